// Package hookname holds what a generated CDI spec writes and the hook
// commands answer to: the hook and step names, and the hooks' environment.
// One definition for both sides, so a renamed hook cannot leave specs that
// name one this binary no longer has.
package hookname

// Name is an `rdma-cdi hook NAME` subcommand, or a step of create-container.
type Name string

const (
	// CreateRuntime runs the steps Memlock, UpdateLDCache and NCCLConf in
	// one process (createRuntime stage): what generated specs carry.
	CreateRuntime Name = "create-runtime"
	// CreateContainer is the steps hook under the name older specs give
	// their createContainer hook (UpdateLDCache and NCCLConf).
	CreateContainer Name = "create-container"
	// UserSpace gives the container its RDMA user space: the image's own,
	// or the host's lent set (then UpdateLDCache's work too).
	UserSpace Name = "user-space"
	// UpdateLDCache adds the injected library dirs to the linker cache.
	UpdateLDCache Name = "update-ldcache"
	// NCCLConf writes the container's /etc/nccl.conf.
	NCCLConf Name = "nccl-conf"
	// Memlock raises RLIMIT_MEMLOCK of the container's init: a step, and
	// older specs' createRuntime hook of its own.
	Memlock Name = "memlock"
	// Precreate is podman's precreate hook (hooks.d files only).
	Precreate Name = "precreate"
)

// Env is the whole environment of every hook, and of what a hook runs:
// nothing is inherited, so an image's LD_PRELOAD or LD_LIBRARY_PATH never
// reaches a host binary (CVE-2025-23266).
var Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
