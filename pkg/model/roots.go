package model

// Roots are the trees a node is read under: the host's own, or a fixture's,
// or the host mounted elsewhere (a DaemonSet's /host). The zero value of a
// field means its default.
type Roots struct {
	// Sysfs is the sysfs tree (default /sys): every sysfs read happens under it.
	Sysfs string
	// Dev is the dev tree holding infiniband/ char devices (default /dev);
	// specs point there.
	Dev string
	// Host is the host root holding the RDMA user-space libraries (default /).
	Host string
	// Proc is the procfs tree (default /proc): the GPU driver's version
	// and the kernel's release and config are read under it.
	Proc string
	// NetNS is a network namespace file (e.g. /proc/PID/ns/net) to read
	// netdevs and routes in; "" is the caller's namespace.
	NetNS string
}

// The default roots: the host's own trees.
const (
	DefaultSysfsRoot = "/sys"
	DefaultDevRoot   = "/dev"
	DefaultHostRoot  = "/"
	DefaultProcRoot  = "/proc"
)

// DefaultRoots are the host's own trees in the caller's network namespace.
func DefaultRoots() Roots {
	return Roots{Sysfs: DefaultSysfsRoot, Dev: DefaultDevRoot, Host: DefaultHostRoot, Proc: DefaultProcRoot}
}

// WithDefaults fills the empty roots with their defaults.
func (r Roots) WithDefaults() Roots {
	d := DefaultRoots()
	if r.Sysfs == "" {
		r.Sysfs = d.Sysfs
	}
	if r.Dev == "" {
		r.Dev = d.Dev
	}
	if r.Host == "" {
		r.Host = d.Host
	}
	if r.Proc == "" {
		r.Proc = d.Proc
	}
	return r
}
