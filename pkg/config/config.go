// Package config holds rdma-cdi's configuration: defaults, the TOML file
// (/etc/rdma-cdi/config.toml) and validation. Every key is also a flag (see
// flags.go), so the file is optional.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
)

// DefaultPath is where the config file is read from when --config is not given.
const DefaultPath = "/etc/rdma-cdi/config.toml"

// Config is the whole file. The `flag` tag names the command-line flag that
// sets the same key; the `help` tag documents it in both places.
type Config struct {
	NCCL    NCCL    `toml:"nccl"`
	CDI     CDI     `toml:"cdi"`
	Hooks   Hooks   `toml:"hooks"`
	Runtime Runtime `toml:"runtime"`
	Watch   Watch   `toml:"watch"`
	// DevicePlugin steers `rdma-cdi device-plugin`.
	DevicePlugin DevicePlugin `toml:"device_plugin"`
	// DRA steers `rdma-cdi-dra dra-driver`.
	DRA DRA `toml:"dra"`
	// Health steers grey health (flaps, error bursts, degraded links) in
	// the device-plugin and dra-driver agents.
	Health Health `toml:"health"`
	// Metrics steers the agents' Prometheus endpoint and the hooks' reports.
	Metrics Metrics `toml:"metrics"`
	// PodNetwork steers what the DRA driver and the device plugin do for
	// pods in their own network namespaces.
	PodNetwork PodNetwork `toml:"pod_network"`
	// Topology says which rail each HCA is on and where the node sits.
	Topology Topology `toml:"topology"`
	// NCCLPlugins is the host's NCCL plugins and nccl.conf keys that
	// containers get.
	NCCLPlugins NCCLPlugins `toml:"nccl_plugins"`
}

// PodNetwork steers pod networking: the DRA driver or the device plugin, at
// each pod sandbox's start (an NRI plugin), gives a pod that holds a RoCE
// HCA and has its own network namespace that HCA's interface: moved in or
// as a sub-interface (DRA, per claim config), as a sub-interface (device
// plugin, whose units the kubelet's PodResources API names).
type PodNetwork struct {
	Enabled            bool             `toml:"enabled" flag:"pod-network" help:"give a pod in its own network namespace the RoCE interface of each HCA it holds, through NRI (dra-driver: its claims' HCAs; device-plugin: a sub-interface on each HCA its units give); off: pods get the HCAs alone, as with hostNetwork; the container hooks read it from the file too: on, a pod's container that holds an HCA waits until the agent has listed its sandbox, also while the list is missing (after a reboot, before the agent has written it), so set it in the file, not by the flag alone"`
	NRISocket          string           `toml:"nri_socket" flag:"pod-network-nri-socket" help:"the container runtime's NRI socket (containerd 2.x and CRI-O enable it there by default)"`
	Ranges             PodNetworkRanges `toml:"ranges" flag:"pod-network-range" help:"this node's addresses for sub-interfaces, per host netdev: NETDEV=CIDR or NETDEV=FIRST-LAST (e.g. eth1=10.0.61.200-10.0.61.220), inside the netdev's subnet; several blocks, comma-separated, for nodes whose netdevs are in different subnets (each takes the block in its own); repeatable"`
	PodResourcesSocket string           `toml:"pod_resources_socket" flag:"pod-network-pod-resources-socket" help:"device-plugin: the kubelet's PodResources socket, which names the units each pod was allocated"`
	StateDir           string           `toml:"state_dir" flag:"pod-network-state-dir" help:"the host directory of the list of pod sandboxes the agent has handled (pod-sandboxes.json), which the container hook reads from the file: with pod networking on, a pod's container that holds an HCA waits until its sandbox is listed; the device plugin also keeps its record of attached interfaces (pod-network.json) there, across restarts (the DRA driver keeps that in its plugin directory)"`
	// Movable lifts the node's claim on a netdev it uses (a bridge or bond
	// port, a VLAN's lower device, the node's InternalIP): only an
	// operator knows that moving it into a pod is safe.
	Movable []string `toml:"movable" flag:"pod-network-movable" help:"host netdevs a claim may move into a pod although the node uses them (a port of a bridge or bond, the lower device of the node's VLAN or macvlan, one holding the node's InternalIP, a PF with VFs enabled); the default-route netdev stays the node's; without it such a netdev is given as a sub-interface only"`
	// MoveKeepsAddresses hands a tenant the node's own fabric address
	// with a moved netdev: the node's identity on that rail (storage
	// ACLs, NFS exports and monitoring trust it), so only an operator
	// turns it on.
	MoveKeepsAddresses bool `toml:"move_keeps_addresses" flag:"pod-network-move-keeps-addresses" help:"a netdev moved into a pod keeps the node's own addresses and routes on it; off (the default): the pod gets an address of the node's range or pool in the same subnet, with the netdev's routes, and the node's addresses come back with the netdev; a claim's own addresses win either way"`
	// Pools, BlockSize and ReclaimAfter are the cluster's shared
	// addresses: the same on every node, each node holding blocks of them
	// as Leases (pkg/podnetwork/blocklease).
	Pools        PodNetworkPools      `toml:"pools" flag:"pod-network-pools" help:"addresses the cluster's nodes share for sub-interfaces, each a CIDR or FIRST-LAST inside one subnet (e.g. [\"10.0.61.0/24\"]; the flag: comma-separated); a pool serves the host netdev whose subnet holds it, and each node takes blocks of it as Leases in the agent's namespace, so that no address goes to two pods of the cluster; needs the node's name and namespace (Kubernetes)"`
	BlockSize    podnetwork.BlockSize `toml:"block_size" flag:"pod-network-block-size" help:"how many addresses of a pool a node takes at once: a count (16) or a prefix length (\"/28\"); the same on every node"`
	ReclaimAfter Duration             `toml:"reclaim_after" flag:"pod-network-reclaim-after" help:"a block (or registered static range) whose node has not renewed its Lease for this long may be taken by another node, and its own node stops handing out its addresses; long enough to outlast a partition, in which the node's pods keep their addresses (a deleted Node frees its blocks at once); at least 1m"`
	// IPAM hands the addresses of some subnets to a CNI IPAM plugin the
	// site runs (Whereabouts, nv-ipam) instead of the pools.
	IPAM       []PodNetworkIPAM `toml:"ipam,omitempty" help:"subnets whose pod addresses a CNI IPAM plugin gives (Whereabouts, nv-ipam), as [[pod_network.ipam]] tables (below): the DRA driver calls the plugin (ADD) when it prepares a claim whose RoCE HCA's netdev is in the subnet, keyed by the claim's UID and device, and frees the address (DEL) when it unprepares it; not in mode device-plugin, whose pods get their addresses at the sandbox's start"`
	CNIBinDirs []string         `toml:"cni_bin_dirs" flag:"pod-network-cni-bin-dirs" help:"where the pod_network.ipam plugins' binaries are looked up, in order (CNI_PATH)"`
}

// minReclaimAfter bounds pod_network.reclaim_after from below: a node
// renews each Lease every third of it, and a shorter one would take a
// partitioned node's addresses while its pods still use them.
const minReclaimAfter = time.Minute

// Metrics steers the agents' endpoint and what the hooks report to it.
type Metrics struct {
	Address string `toml:"address" flag:"metrics-address" help:"address the agents (watch, device-plugin, dra-driver) serve /metrics, /healthz and /readyz on, e.g. :9477 or 127.0.0.1:9477; empty: none"`
	// ProbeAddress has listener slots of its own, so that clients holding
	// every slot of Address (any pod reaches it on the node's network)
	// cannot fail the kubelet's liveness probe.
	ProbeAddress string      `toml:"probe_address" flag:"probe-address" help:"address the agents serve /healthz and /readyz alone on, for the kubelet's probes, e.g. 127.0.0.1:9478; empty: none (the probes are also on the metrics address)"`
	HookSocket   string      `toml:"hook_socket" flag:"metrics-hook-socket" help:"unix datagram socket each container hook reports its outcome to, which an agent serving metrics listens on; empty: no reports"`
	Auth         MetricsAuth `toml:"auth" flag:"metrics-auth" help:"who may read /metrics (the probes stay open): none (anyone who reaches the address, e.g. the host's own Prometheus) or kubernetes (a bearer token the API server authenticates, whose user may get the nonResourceURL /metrics; needs the in-cluster config)"`
}

// MetricsAuth is how the agents' /metrics checks who asks: its data names
// the pods holding HCAs, and in a cluster the address is on the node's
// network, which every pod reaches.
type MetricsAuth string

const (
	// MetricsAuthNone serves /metrics to anyone who reaches the address.
	MetricsAuthNone MetricsAuth = "none"
	// MetricsAuthKubernetes asks the API server: a TokenReview of the
	// bearer token, then a SubjectAccessReview of get on /metrics.
	MetricsAuthKubernetes MetricsAuth = "kubernetes"
)

// DRA steers the DRA driver.
type DRA struct {
	UnhealthyTaintEffect TaintEffect `toml:"unhealthy_taint_effect" flag:"dra-unhealthy-taint-effect" help:"effect of the taint an unhealthy HCA gets in the ResourceSlice: NoSchedule (no new claims) or NoExecute (the pods holding it are evicted too)"`
	// DeviceMetadata is read when the driver starts: the kubelet plugin
	// helper takes it then.
	DeviceMetadata bool `toml:"device_metadata" flag:"dra-device-metadata" help:"give each container of a claim a file describing its HCAs (KEP-5304 device metadata, under /var/run/kubernetes.io/dra-device-attributes): the slice's attributes and the pod's interface, through a CDI spec per claim request in cdi.spec_dir; read at start"`
}

// TaintEffect is a device taint's effect, as resource.k8s.io spells it.
type TaintEffect string

const (
	TaintNoSchedule TaintEffect = "NoSchedule"
	TaintNoExecute  TaintEffect = "NoExecute"
)

// NCCL steers the computed NCCL settings.
type NCCL struct {
	IncludeHCAs            []string          `toml:"include_hcas" flag:"nccl-include-hcas" help:"only these RDMA devices (NAME or NAME:PORT) go into NCCL_IB_HCA"`
	ExcludeHCAs            []string          `toml:"exclude_hcas" flag:"nccl-exclude-hcas" help:"RDMA devices (NAME or NAME:PORT) left out of NCCL_IB_HCA"`
	ExcludeDefaultRouteHCA bool              `toml:"exclude_default_route_hca" flag:"nccl-exclude-default-route-hca" help:"leave out the HCA whose netdev carries the default route (the TCP/management NIC)"`
	AddrFamily             AddrFamily        `toml:"addr_family" flag:"nccl-addr-family" help:"NCCL_IB_ADDR_FAMILY used for GID selection: AF_INET or AF_INET6"`
	AddrRange              AddrRange         `toml:"addr_range" flag:"nccl-addr-range" help:"NCCL_IB_ADDR_RANGE (CIDR) used for GID selection"`
	RoCEVersion            int               `toml:"roce_version" flag:"nccl-roce-version" help:"NCCL_IB_ROCE_VERSION_NUM used for GID selection: 1 or 2"`
	SocketIfname           string            `toml:"socket_ifname" flag:"nccl-socket-ifname" help:"NCCL_SOCKET_IFNAME; empty means the default-route netdev"`
	Delivery               Delivery          `toml:"delivery" flag:"nccl-delivery" help:"how containers get NCCL settings: nccl-conf (a /etc/nccl.conf the user's env overrides), cdi-env (CDI env, overrides the user's env) or none"`
	Tunables               map[string]string `toml:"tunables" flag:"nccl-tunable" help:"site NCCL settings, NAME=VALUE (e.g. NCCL_IB_TIMEOUT=22); repeatable"`
}

// Delivery is how containers get their NCCL settings: the spec writer picks
// its hooks or env by it, the hooks and editors act by it.
type Delivery string

const (
	// DeliveryNCCLConf writes /etc/nccl.conf, which the user's env beats.
	DeliveryNCCLConf Delivery = "nccl-conf"
	// DeliveryCDIEnv puts the settings in the CDI spec's env, which beats
	// the user's env in every engine.
	DeliveryCDIEnv Delivery = "cdi-env"
	// DeliveryNone gives containers no NCCL settings.
	DeliveryNone Delivery = "none"
)

// CDI steers spec generation.
type CDI struct {
	Vendor          string `toml:"vendor" flag:"vendor" help:"CDI vendor of the device kind"`
	Class           string `toml:"class" flag:"class" help:"CDI class of the device kind"`
	SpecDir         string `toml:"spec_dir" flag:"spec-dir" help:"directory the spec is written to"`
	Format          string `toml:"format" help:"spec format: yaml or json (generate --format)"`
	MaxVersion      string `toml:"max_version" flag:"cdi-version" help:"highest CDI version to emit (e.g. 0.5.0 for podman 4.3); empty means the minimum the spec needs"`
	InjectLibraries bool   `toml:"inject_libraries" flag:"inject-libraries" help:"let the spec lend the host's RDMA user-space libraries at all (false: never, whatever user_space says)"`
	// UserSpace is the node's default of whose RDMA user space a container
	// runs; each container may override it (pkg/userspace: EnvVar, Annotation).
	UserSpace      model.UserSpaceMode `toml:"user_space" flag:"user-space" help:"whose RDMA user space containers run: auto (the image's own when it has one, else the host's lent), host (the host's, even over the image's) or image (never the host's); a container overrides it with RDMA_CDI_USER_SPACE or the annotation rdma.example.com/user-space"`
	ExtraLibraries []string            `toml:"extra_libraries" flag:"extra-libraries" help:"more host files to mount read-only at the same path"`
}

// Hooks steers the container hooks.
type Hooks struct {
	LogFile string  `toml:"log_file" flag:"hook-log-file" help:"host file hooks log to (in addition to stderr); past 16 MiB it becomes FILE.1 and a new one starts"`
	Memlock Memlock `toml:"memlock" flag:"memlock" help:"RLIMIT_MEMLOCK for containers: unlimited or a size in bytes (K/M/G suffixes)"`
}

// Runtime steers the OCI runtime wrapper (and, for the two request
// switches, podman's precreate hook, which shares its editor).
//
// A Kubernetes container is one whose config.json carries a CRI runtime's
// own annotations or the kubelet's mounts (pkg/ociedit's DetectAsker). Its
// env and annotations are written by the pod's author or its image: by
// default they are no request, and only devices the kubelet's allocation
// placed (a device plugin's or DRA's CDI devices, the annotations
// fallback's device nodes) count. A plain engine's containers are not
// affected by either switch.
type Runtime struct {
	Path    string `toml:"path" flag:"runtime-path" help:"the real OCI runtime the wrapper executes"`
	LogFile string `toml:"log_file" flag:"runtime-log-file" help:"host file the runtime wrapper logs to; past 16 MiB it becomes FILE.1 and a new one starts"`
	// KubernetesAcceptEnv lets RDMA_VISIBLE_DEVICES ask under Kubernetes.
	KubernetesAcceptEnv bool `toml:"kubernetes_accept_env" flag:"runtime-kubernetes-accept-env" help:"accept RDMA_VISIBLE_DEVICES in a Kubernetes container's env (the pod's or its image's: anyone who may create a pod then gets any HCA, CAP_IPC_LOCK and memlock, past the scheduler, quotas and Pod Security); false: only devices the kubelet placed (device plugin, DRA) count"`
	// KubernetesAcceptAnnotations lets <vendor>/devices and cdi.k8s.io/*
	// ask under Kubernetes.
	KubernetesAcceptAnnotations bool `toml:"kubernetes_accept_annotations" flag:"runtime-kubernetes-accept-annotations" help:"accept the annotations <vendor>/devices and cdi.k8s.io/* of a Kubernetes container (CRI-O copies the pod's own annotations into it, containerd those its pod_annotations lets through: anyone who may create a pod then gets any HCA, CAP_IPC_LOCK and memlock); false: only devices the kubelet placed (device plugin, DRA) count"`
}

// Watch steers `rdma-cdi watch`.
type Watch struct {
	RescanInterval Duration `toml:"rescan_interval" flag:"rescan-interval" help:"periodic rescan, a safety net for missed events"`
	Debounce       Duration `toml:"debounce" flag:"debounce" help:"quiet time after an event before rescanning"`
}

// DevicePlugin steers the kubelet device plugin.
type DevicePlugin struct {
	Allocation Allocation `toml:"allocation" flag:"device-plugin-allocation" help:"what Allocate gives the kubelet: cdi-devices (CDI device names, Kubernetes >= 1.31 with a CDI runtime) or annotations (device nodes plus the cdi.k8s.io annotation, for older kubelets and runtimes through the runtime wrapper)"`
	// Resources are the extended resources served; none means one shared
	// rdma/hca (DefaultResource).
	Resources []Resource `toml:"resources,omitempty" help:"the extended resources served, each a [[device_plugin.resources]] table (below); none: one shared rdma/hca"`
}

// Allocation is how Allocate hands devices to the kubelet.
type Allocation string

const (
	AllocationCDIDevices  Allocation = "cdi-devices"
	AllocationAnnotations Allocation = "annotations"
)

// ResourceMode says how the units of a resource map to HCAs.
type ResourceMode string

const (
	// ModeShared advertises max_pods identical units, each giving the
	// container every HCA the resource selects.
	ModeShared ResourceMode = "shared"
	// ModeExclusive advertises one unit per selected HCA.
	ModeExclusive ResourceMode = "exclusive"
)

// Resource is one extended resource of the device plugin and the HCAs it
// selects. The HCA rules are NCCL's: with neither list set, the resource
// selects the devices NCCL_IB_HCA would name (nccl.include_hcas,
// nccl.exclude_hcas and the default-route rule), whatever their port state.
type Resource struct {
	Name        string       `toml:"name" help:"the extended resource's name, as pods ask for it (e.g. rdma/hca)"`
	Mode        ResourceMode `toml:"mode" help:"shared (max_pods units, each giving the container every HCA the resource selects) or exclusive (one unit per selected HCA)"`
	MaxPods     int          `toml:"max_pods" help:"how many pods may hold a shared resource at once (its units)"`
	IncludeHCAs []string     `toml:"include_hcas" help:"only these HCAs (NAME or NAME:PORT); with neither list, the HCAs NCCL_IB_HCA would name"`
	ExcludeHCAs []string     `toml:"exclude_hcas" help:"HCAs (NAME or NAME:PORT) the resource leaves out"`
	LinkLayers  []string     `toml:"link_layers" help:"only ports of these link layers: InfiniBand, Ethernet"`
	PCIVendors  []string     `toml:"pci_vendors" help:"only HCAs of these PCI vendor IDs (0x15b3 or 15b3, any case)"`
	PCIDevices  []string     `toml:"pci_devices" help:"only HCAs of these PCI device IDs (e.g. 0x101d)"`
	Drivers     []string     `toml:"drivers" help:"only HCAs bound to these kernel drivers (e.g. mlx5_core)"`
	Functions   Functions    `toml:"functions" help:"which SR-IOV functions: vfs, pfs (PFs and HCAs without SR-IOV), all, or empty: VFs only where the node has VFs, else all"`
}

// Functions selects SR-IOV functions for a device-plugin resource.
type Functions string

const (
	// FunctionsAuto is VFs only on a node that has VFs, else every HCA:
	// where VFs exist they are what is handed out, and their PF carries
	// the traffic of them all.
	FunctionsAuto Functions = ""
	FunctionsVFs  Functions = "vfs"
	// FunctionsPFs are PFs and HCAs without SR-IOV: every HCA but a VF.
	FunctionsPFs Functions = "pfs"
	FunctionsAll Functions = "all"
)

// DefaultMaxPods is how many pods may share a shared resource at once.
const DefaultMaxPods = 1000

// DefaultResource is what the device plugin serves when the config lists
// no resource: seed 002's rdma/hca, shared.
func DefaultResource() Resource {
	return Resource{Name: "rdma/hca", Mode: ModeShared, MaxPods: DefaultMaxPods}
}

// ServedResources are the configured resources with their defaults filled
// in, or DefaultResource alone.
func (d DevicePlugin) ServedResources() []Resource {
	if len(d.Resources) == 0 {
		return []Resource{DefaultResource()}
	}
	out := make([]Resource, len(d.Resources))
	for i, r := range d.Resources {
		if r.Mode == "" {
			r.Mode = ModeShared
		}
		if r.Mode == ModeShared && r.MaxPods == 0 {
			r.MaxPods = DefaultMaxPods
		}
		out[i] = r
	}
	return out
}

// Duration is a time.Duration written as "30s" in TOML.
type Duration struct{ time.Duration }

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// Default returns the configuration used when the file is silent.
func Default() Config {
	return Config{
		NCCL: NCCL{
			ExcludeDefaultRouteHCA: true,
			AddrFamily:             AddrFamilyIPv4,
			RoCEVersion:            2,
			Delivery:               DeliveryNCCLConf,
		},
		CDI: CDI{
			Vendor:          apis.Group,
			Class:           apis.Class,
			SpecDir:         "/var/run/cdi",
			Format:          "yaml",
			InjectLibraries: true,
			UserSpace:       model.UserSpaceAuto,
		},
		Hooks:   Hooks{LogFile: "/var/log/rdma-cdi/hooks.log", Memlock: Unlimited},
		Runtime: Runtime{Path: "runc", LogFile: "/var/log/rdma-cdi/runtime.log"},
		Watch:   Watch{RescanInterval: Duration{time.Minute}, Debounce: Duration{500 * time.Millisecond}},

		DevicePlugin: DevicePlugin{Allocation: AllocationCDIDevices},
		DRA:          DRA{UnhealthyTaintEffect: TaintNoSchedule, DeviceMetadata: true},
		Health:       DefaultHealth(),
		Metrics:      Metrics{HookSocket: "/run/rdma-cdi/hook-events.sock", Auth: MetricsAuthNone},
		PodNetwork: PodNetwork{NRISocket: "/var/run/nri/nri.sock", Movable: []string{}, CNIBinDirs: []string{"/opt/cni/bin"},
			PodResourcesSocket: "/var/lib/kubelet/pod-resources/kubelet.sock", StateDir: "/run/rdma-cdi",
			BlockSize: podnetwork.BlockOf(16), ReclaimAfter: Duration{time.Hour}},
		NCCLPlugins: DefaultNCCLPlugins(),
	}
}

// Load reads path over the defaults, strictly: an unknown key or a bad
// value is an error that names it. A missing file means the defaults,
// whether or not it was named on the command line: a node without a config
// file is a node with the default configuration.
func Load(path string) (Config, error) {
	cfg, unknown, _, err := load(path)
	if err == nil && unknown != nil {
		err = fmt.Errorf("config %s: %w", path, unknown)
	}
	return cfg, err
}

// BlocksRDMA is the error for a container that asked for RDMA when the
// config file could not be used (loadErr, from LoadForContainers); nil when
// it could.
func BlocksRDMA(loadErr error) error {
	if loadErr == nil {
		return nil
	}
	return fmt.Errorf("%w; the container asked for RDMA, which needs a usable config: fix the file or move it away to use the defaults (rdma-cdi doctor checks it)", loadErr)
}

// LoadForContainers is Load for the code that runs at container starts
// (hooks, the runtime wrapper), where a config must not stop containers
// that asked for nothing:
//   - keys this binary does not know (a newer config on an older binary)
//     are warnings, and the rest of the file applies;
//   - a file that cannot be read, does not parse or holds a bad value gives
//     the defaults with the error, which the caller turns into a failure
//     only for containers that asked for RDMA (and the defaults name the
//     log file that error goes to). The one exception is runtime.path of a
//     file that parsed: the wrapper must keep execing the runtime that
//     created the node's containers, or their delete and kill miss them.
func LoadForContainers(path string) (cfg Config, warnings []string, err error) {
	cfg, unknown, parsed, err := load(path)
	if err != nil {
		def := Default()
		if parsed {
			def.Runtime.Path = cfg.Runtime.Path
		}
		return def, nil, err
	}
	if unknown != nil {
		warnings = append(warnings, fmt.Sprintf("config %s: %v ignored (from a newer rdma-cdi?)", path, unknown))
	}
	return cfg, warnings, nil
}

// load reads path over the defaults in one strict decode: go-toml reports
// unknown keys only after decoding every known one, so cfg is complete
// when unknown is set. err is a file that cannot be used (unreadable, not
// TOML, a bad value); parsed says whether cfg holds the file's values (a
// bad value) or not (a file that did not decode). A missing file is the
// defaults.
func load(path string) (cfg Config, unknown *UnknownKeysError, parsed bool, err error) {
	cfg = Default()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cfg, nil, true, nil
	}
	if err != nil {
		return cfg, nil, false, fmt.Errorf("config: %w", err)
	}
	if err := Decode(data, &cfg); err != nil && !errors.As(err, &unknown) {
		return cfg, nil, false, fmt.Errorf("config %s: %w", path, err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, unknown, true, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, unknown, true, nil
}

// UnknownKeysError names keys of the file that Config does not have.
type UnknownKeysError struct{ Keys []string }

func (e *UnknownKeysError) Error() string { return "unknown key " + strings.Join(e.Keys, ", ") }

// Decode parses TOML into cfg strictly: unknown keys are errors.
func Decode(data []byte, cfg *Config) error {
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(cfg)
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		keys := make([]string, 0, len(strict.Errors))
		for _, e := range strict.Errors {
			keys = append(keys, tomlKey(e.Key()))
		}
		return &UnknownKeysError{Keys: keys}
	}
	var decErr *toml.DecodeError
	if errors.As(err, &decErr) {
		row, col := decErr.Position()
		// A value of a table (pod_network.ranges.eth1) cannot name its own
		// entry: the key does.
		if k := decErr.Key(); len(k) > 2 {
			return fmt.Errorf("line %d column %d: %s: %s", row, col, tomlKey(k), decErr.Error())
		}
		return fmt.Errorf("line %d column %d: %s", row, col, decErr.Error())
	}
	return err
}

// tomlKey writes a dotted key as TOML does: bare parts as they are, others
// (empty, or with dots, spaces, newlines) quoted, so an error always shows
// the key and stays on one line.
func tomlKey(parts []string) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		bare := p != ""
		for _, c := range p {
			if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				bare = false
				break
			}
		}
		if bare {
			out[i] = p
		} else {
			out[i] = strconv.Quote(p)
		}
	}
	return strings.Join(out, ".")
}

// Validate checks values that TOML types cannot. Values of the types that
// parse themselves (Memlock, AddrFamily, AddrRange, RangeBlocks) were
// checked when they were read; what is left is how they fit together.
func (c Config) Validate() error {
	var errs []error
	if c.NCCL.RoCEVersion != 1 && c.NCCL.RoCEVersion != 2 {
		errs = append(errs, fmt.Errorf("nccl.roce_version %d: want 1 or 2", c.NCCL.RoCEVersion))
	}
	errs = append(errs, c.NCCLPlugins.validate()...)
	switch c.NCCL.Delivery {
	case DeliveryNCCLConf, DeliveryCDIEnv, DeliveryNone:
	default:
		errs = append(errs, fmt.Errorf("nccl.delivery %q: want nccl-conf, cdi-env or none", c.NCCL.Delivery))
	}
	for name := range c.NCCL.Tunables {
		if !strings.HasPrefix(name, "NCCL_") || strings.ContainsAny(name, "= \t\n") {
			errs = append(errs, fmt.Errorf("nccl.tunables key %q: want an NCCL_* name", name))
		}
	}
	for name, value := range c.NCCL.Tunables {
		if strings.ContainsAny(value, "\n\r") {
			errs = append(errs, fmt.Errorf("nccl.tunables %s: value must be one line", name))
		}
	}
	switch c.CDI.Format {
	case "yaml", "json":
	default:
		errs = append(errs, fmt.Errorf("cdi.format %q: want yaml or json", c.CDI.Format))
	}
	if _, err := model.ParseUserSpaceMode(string(c.CDI.UserSpace)); err != nil {
		errs = append(errs, fmt.Errorf("cdi.user_space: %w", err))
	}
	errs = append(errs, c.DevicePlugin.validate()...)
	errs = append(errs, c.Health.validate()...)
	errs = append(errs, c.Topology.validate(c.CDI.Vendor)...)
	switch c.DRA.UnhealthyTaintEffect {
	case TaintNoSchedule, TaintNoExecute:
	default:
		errs = append(errs, fmt.Errorf("dra.unhealthy_taint_effect %q: want NoSchedule or NoExecute", c.DRA.UnhealthyTaintEffect))
	}
	if a := c.Metrics.Address; a != "" {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("metrics.address %q: want HOST:PORT or :PORT", a))
		}
	}
	if p := c.Metrics.HookSocket; p != "" && !filepath.IsAbs(p) {
		errs = append(errs, fmt.Errorf("metrics.hook_socket %q: want an absolute path", p))
	}
	switch c.Metrics.Auth {
	case MetricsAuthNone, MetricsAuthKubernetes:
	default:
		errs = append(errs, fmt.Errorf("metrics.auth %q: want none or kubernetes", c.Metrics.Auth))
	}
	for _, p := range [][2]string{{"nri_socket", c.PodNetwork.NRISocket}, {"pod_resources_socket", c.PodNetwork.PodResourcesSocket}, {"state_dir", c.PodNetwork.StateDir}} {
		if !filepath.IsAbs(p[1]) {
			errs = append(errs, fmt.Errorf("pod_network.%s %q: want an absolute path", p[0], p[1]))
		}
	}
	if err := podnetwork.CheckOverlaps(c.PodNetwork.Ranges.ByNetDev()); err != nil {
		errs = append(errs, fmt.Errorf("pod_network.ranges: %w", err))
	}
	if err := podnetwork.CheckPools(c.PodNetwork.Pools, c.PodNetwork.BlockSize, c.PodNetwork.Ranges.ByNetDev()); err != nil {
		errs = append(errs, fmt.Errorf("pod_network.pools: %w", err))
	}
	errs = append(errs, c.PodNetwork.validateIPAM()...)
	if r := c.PodNetwork.ReclaimAfter.Duration; r < minReclaimAfter {
		errs = append(errs, fmt.Errorf("pod_network.reclaim_after %v: want at least %v", r, minReclaimAfter))
	}
	return errors.Join(errs...)
}
