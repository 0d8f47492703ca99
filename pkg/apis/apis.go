// Package apis is rdma-cdi's public contract: every name a user writes (in
// a container's environment or annotations, a claim's CEL selector, a
// toleration) or reads back (a hook in a CDI spec, a taint, an NRI plugin)
// is defined here once. Versioned claim parameters live in
// pkg/apis/rdma/<version>. Constants and string functions only, so that the
// hook binary can link it without the Kubernetes API.
//
// Compatibility: a name here is never renamed or reused with another
// meaning (docs/compatibility.md); new ones may be added.
package apis

// Group is the project's API group: the CDI vendor, the DRA driver's name
// and its attribute domain, and the group of its claim parameters.
const Group = "rdma.example.com"

// CDI kind the node's HCAs get when the config names none: Group/Class.
const (
	// Class is the CDI class of an HCA (rdma.example.com/hca=mlx5_1).
	Class = "hca"
	// AllDevices names the device that holds every HCA of a kind, in a CDI
	// name (rdma.example.com/hca=all) and in EnvDevices.
	AllDevices = "all"
)

// How a container asks for HCAs and chooses whose RDMA user space it runs,
// besides CDI device names.
const (
	// EnvDevices is the container process's variable that asks for HCAs
	// by name (mlx5_1,mlx5_2 or all), read by the runtime wrapper.
	EnvDevices = "RDMA_VISIBLE_DEVICES"
	// EnvUserSpace chooses whose user space the container runs: auto,
	// host or image.
	EnvUserSpace = "RDMA_CDI_USER_SPACE"
	// AnnotationUserSpace is EnvUserSpace as an annotation; it wins over
	// the variable, which an image's own ENV could set.
	AnnotationUserSpace = Group + "/user-space"
	// EnvNCCLPlugins chooses whether the container gets the host's NCCL
	// plugins and carried nccl.conf keys: auto (when the image has no
	// plugin of its own) or none.
	EnvNCCLPlugins = "RDMA_CDI_NCCL_PLUGINS"
	// AnnotationNCCLPlugins is EnvNCCLPlugins as an annotation; it wins
	// over the variable.
	AnnotationNCCLPlugins = Group + "/nccl-plugins"
	// EnvClaimNCCLPlugins is what a DRA claim's config (ncclPlugins:
	// none) sets in the containers that use the claim, through the CDI
	// device ClaimNCCLPluginsNone: none there wins over the annotation and
	// EnvNCCLPlugins, as the stricter word.
	EnvClaimNCCLPlugins = "RDMA_CDI_CLAIM_NCCL_PLUGINS"
)

// How the DRA driver carries a claim's settings to the containers that use
// it: beside the claim's HCAs, its prepare answer names a CDI device of the
// claim class (Group/ClaimClass, in the spec the driver writes when it
// starts), whose edits set the variable the hook reads.
const (
	// ClaimClass is the CDI class of those devices.
	ClaimClass = "claim"
	// ClaimNCCLPluginsNone sets EnvClaimNCCLPlugins=none.
	ClaimNCCLPluginsNone = "nccl-plugins-none"
)

// DevicesAnnotation is the annotation that asks for vendor's devices by
// name (rdma.example.com/devices by default).
func DevicesAnnotation(vendor string) string { return vendor + "/devices" }

// Taint keys of a device in the DRA driver's ResourceSlice; driver is the
// driver's name (Group by default).

// UnhealthyTaintKey is the key of the taint an unhealthy device carries
// (a flapping link, an error burst): its value is the health code.
func UnhealthyTaintKey(driver string) string { return driver + "/unhealthy" }

// DegradedTaintKey is the key of the NoSchedule taint a degraded device
// carries: a link or PCIe slot below what it trains at.
func DegradedTaintKey(driver string) string { return driver + "/degraded" }

// The agents' NRI plugin, as the runtime lists it: both Kubernetes modes
// register under the same name and index, so a node runs one of them.
const (
	NRIPluginName  = "rdma-cdi"
	NRIPluginIndex = "10"
)

// TravelNetDevPrefix starts the temporary name a netdev takes while it
// moves between the node's network namespace and a pod's; no pod
// interface may be named with it.
const TravelNetDevPrefix = "rdmamv"

// The Leases that hold a node's share of the cluster's pod addresses, in
// the agent's namespace (pod_network.pools and pod_network.ranges):
// `kubectl get leases -l rdma.example.com/address-block` lists them.
const (
	// AddressBlockLabel marks each such Lease; its value is the kind of
	// range: AddressBlockPool or AddressBlockStatic.
	AddressBlockLabel  = Group + "/address-block"
	AddressBlockPool   = "pool"
	AddressBlockStatic = "static"
	// AddressRangeAnnotation is the range the Lease holds, FIRST-LAST.
	AddressRangeAnnotation = Group + "/address-range"
	// AddressPoolAnnotation is the pool a block was taken from, as the
	// config writes it.
	AddressPoolAnnotation = Group + "/address-pool"
	// AddressNetDevAnnotation is the host netdev a static range serves.
	AddressNetDevAnnotation = Group + "/address-netdev"
)
