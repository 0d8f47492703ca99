package apis

// HookName is an `rdma-cdi hook NAME` subcommand, or a step of the steps
// hook. A generated CDI spec names these, so a spec written by an older
// release must still find each one: a name is never removed.
type HookName string

const (
	// HookCreateRuntime runs the steps HookMemlock, HookUpdateLDCache and
	// HookNCCLConf in one process (createRuntime stage): what generated
	// specs carry.
	HookCreateRuntime HookName = "create-runtime"
	// HookCreateContainer is the steps hook under the name older specs
	// give their createContainer hook (HookUpdateLDCache and HookNCCLConf).
	HookCreateContainer HookName = "create-container"
	// HookUserSpace gives the container its RDMA user space: the image's
	// own, or the host's lent set (then HookUpdateLDCache's work too).
	HookUserSpace HookName = "user-space"
	// HookUpdateLDCache adds the injected library dirs to the linker cache.
	HookUpdateLDCache HookName = "update-ldcache"
	// HookNCCLConf writes the container's /etc/nccl.conf.
	HookNCCLConf HookName = "nccl-conf"
	// HookMemlock raises RLIMIT_MEMLOCK of the container's init: a step,
	// and older specs' createRuntime hook of its own.
	HookMemlock HookName = "memlock"
	// HookPrecreate is podman's precreate hook (hooks.d files only).
	HookPrecreate HookName = "precreate"
)

// HookEnv is the whole environment of every hook, and of what a hook runs:
// nothing is inherited, so an image's LD_PRELOAD or LD_LIBRARY_PATH never
// reaches a host binary (CVE-2025-23266).
var HookEnv = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
