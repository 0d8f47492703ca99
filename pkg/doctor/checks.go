package doctor

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/cdispec"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
	"github.com/rdma-cdi/rdma-cdi/pkg/userspace"
)

// Facts are everything the checks judge. Gather fills them from a node;
// tests write them by hand.
type Facts struct {
	SysfsRoot string
	DevRoot   string
	// ConfigPath is the config file, ConfigErr why it could not be used,
	// ConfigWarnings what of it was ignored (keys from a newer version).
	ConfigPath     string
	ConfigErr      string
	ConfigWarnings []string
	// Node is the discovered node; DiscoverErr is set when discovery failed.
	Node        model.Node
	DiscoverErr string
	// DevNodes are the char device nodes found under DevRoot, by the
	// container path of model.CharDevice (e.g. /dev/infiniband/uverbs0).
	DevNodes map[string]DevNode
	// Stack is the user-space stack under the host root.
	Stack    model.UserStack
	StackErr string
	// InjectLibraries is the config's cdi.inject_libraries, UserSpaceDefault
	// its cdi.user_space.
	InjectLibraries  bool
	UserSpaceDefault model.UserSpaceMode
	// WantMemlock is the config's hooks.memlock in bytes (config.Unlimited
	// for unlimited).
	WantMemlock uint64
	// NCCL is the config's nccl section, what the hook computes from.
	NCCL config.NCCL
	// Services are the engines' memlock limits (running processes and
	// systemd units).
	Services []Service
	// Engines are the installed container engines.
	Engines []Engine
	Spec    Spec
	// UserSpace is what an image or running container would get, when
	// doctor was asked about one (nil otherwise).
	UserSpace *UserSpaceFacts
	// Grey are the ports' and PCIe links' readings for the grey-health
	// check (nil: not read).
	Grey *GreyFacts
	// EFA is the host's NCCL offer that an EFA node's containers need.
	EFA EFAFacts
}

// UserSpaceFacts are an image's RDMA user space and its override.
type UserSpaceFacts struct {
	// Target names the image root or container that was read.
	Target    string
	Image     userspace.ImageStack
	Choice    userspace.Choice
	ChoiceErr string
	// Env is the container's env (NAME=VALUE), as given or read from its
	// process.
	Env []string
	// Process is what a running container's process holds (nil for an
	// image root).
	Process *ProcessFacts
}

// ProcessFacts are a running container process's memlock limit and
// whether it has CAP_IPC_LOCK (ProcErr: why they are unknown).
type ProcessFacts struct {
	PID        int
	Soft, Hard uint64
	IPCLock    bool
	ProcErr    string
}

// DevNode is what stat says about a device node under the dev root.
type DevNode struct {
	HostPath string
	Exists   bool
	Char     bool
	Major    uint32
	Minor    uint32
	Err      string
}

// Service is the memlock limit of one engine process or systemd unit.
type Service struct {
	// Name is the process or unit name (dockerd, containerd.service).
	Name string
	// PID is the process, 0 for a systemd unit.
	PID  int
	Soft uint64
	Hard uint64
}

// Engine is one installed container engine.
type Engine struct {
	// Name is the engine's name in knownEngines (docker, containerd...).
	Name    string
	Version string
	// VersionErr says why the version is unknown.
	VersionErr string
	// CDIConfig is the engine's explicit CDI switch: nil when its config
	// does not say (the version's default applies).
	CDIConfig *bool
	// ConfigPath is the file CDIConfig was read from (or would be).
	ConfigPath string
	// ConfigErr is a problem reading that file.
	ConfigErr string
}

// Spec is what doctor found about the CDI spec.
type Spec struct {
	Path   string
	Exists bool
	// Version is the spec's cdiVersion ("" when unreadable).
	Version string
	// LoadErrors are the CDI library's complaints about the file.
	LoadErrors []string
	// Devices are the qualified device names the CDI cache resolved.
	Devices []string
	// Rendered is what generation would write now; RenderErr when it failed.
	Rendered  []byte
	RenderErr string
	// OnDisk is the file's content.
	OnDisk []byte
}

// Check runs every check over facts, in the order an operator reads them.
func Check(f Facts) []Result {
	out := []Result{
		checkDevices(f),
		checkDevNodes(f),
		checkNetNSMode(f),
		checkStack(f),
		checkMemlock(f),
	}
	out = append(out, checkEFA(f)...)
	out = append(out, checkGreyHealth(f)...)
	out = append(out, checkGPUDirect(f)...)
	out = append(out, checkEngines(f)...)
	out = append(out, checkSpec(f), checkSpecCurrent(f), checkConfig(f))
	if f.UserSpace != nil {
		out = append(out, checkUserSpace(f), checkContainerNCCL(f))
		if f.UserSpace.Process != nil {
			out = append(out, checkContainerMemlock(*f.UserSpace.Process))
		}
	}
	return out
}

// checkContainerMemlock: a process without CAP_IPC_LOCK may pin only its
// RLIMIT_MEMLOCK, and RDMA registers (pins) every buffer it sends from.
func checkContainerMemlock(p ProcessFacts) Result {
	r := Result{Name: "container-memlock"}
	who := fmt.Sprintf("container process %d", p.PID)
	switch {
	case p.ProcErr != "":
		r.Status, r.Detail = Warn, who+": "+p.ProcErr
	case p.IPCLock:
		r.Status, r.Detail = Pass, who+" has CAP_IPC_LOCK: memlock does not limit what it pins"
	case p.Soft >= lowMemlock:
		r.Status, r.Detail = Pass, fmt.Sprintf("%s may pin %s (memlock soft/hard %s/%s)", who, formatLimit(p.Soft), formatLimit(p.Soft), formatLimit(p.Hard))
	default:
		r.Status = Fail
		r.Detail = fmt.Sprintf("%s has memlock %s/%s and no CAP_IPC_LOCK: registering RDMA memory beyond %s fails (ibv_reg_mr: Cannot allocate memory)",
			who, formatLimit(p.Soft), formatLimit(p.Hard), formatLimit(p.Soft))
		r.Fix = "start it with an rdma.example.com/hca device (the spec's memlock hook raises the limit), --ulimit memlock=-1, or CAP_IPC_LOCK through the runtime wrapper or podman's precreate hook"
	}
	return r
}

// checkContainerNCCL looks for NCCL settings in the container's env that
// keep NCCL off the HCAs or off the GID the hook computed: NCCL gives its
// process env precedence over /etc/nccl.conf.
func checkContainerNCCL(f Facts) Result {
	r := Result{Name: "nccl-env"}
	env := map[string]string{}
	for _, kv := range f.UserSpace.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "NCCL_") {
			env[k] = v
		}
	}
	target := f.UserSpace.Target
	fix := "remove it from the container's env (pod spec env, -e, mpirun -x): the hook's /etc/nccl.conf has the node's value"
	if v := env["NCCL_IB_DISABLE"]; v != "" && v != "0" {
		r.Status, r.Fix = Fail, fix
		r.Detail = fmt.Sprintf("%s sets NCCL_IB_DISABLE=%s: NCCL leaves the HCAs alone and runs over TCP sockets", target, v)
		return r
	}
	if v := env["NCCL_NET"]; strings.EqualFold(v, "Socket") {
		r.Status, r.Fix = Fail, fix
		r.Detail = fmt.Sprintf("%s sets NCCL_NET=%s: NCCL runs over TCP sockets, not the HCAs", target, v)
		return r
	}
	node := nccl.Compute(f.Node, f.NCCL, nccl.Scope{})
	if v, ok := env["NCCL_IB_GID_INDEX"]; ok {
		if want, computed := node.Get("NCCL_IB_GID_INDEX"); computed && v != want {
			r.Status, r.Fix = Fail, fix
			r.Detail = fmt.Sprintf("%s sets NCCL_IB_GID_INDEX=%s, which beats the node's %s (the RoCE v2 GID of the HCAs' addresses): "+
				"NCCL uses another GID, and connections time out or cross the wrong network", target, v, want)
			return r
		}
	}
	if v, ok := env["NCCL_IB_HCA"]; ok {
		if missing := hcasNotOn(f.Node, v); len(missing) > 0 {
			r.Status, r.Fix = Fail, fix
			r.Detail = fmt.Sprintf("%s sets NCCL_IB_HCA=%s, naming %s, which this node does not have: NCCL finds no HCA and falls back to sockets",
				target, v, strings.Join(missing, ", "))
			return r
		}
	}
	r.Status = Pass
	var set []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		set = append(set, k+"="+env[k])
	}
	if len(set) == 0 {
		r.Detail = target + " sets no NCCL_* variable: NCCL takes the hook's /etc/nccl.conf"
	} else {
		r.Detail = target + " sets " + strings.Join(set, " ") + ", which agree with this node"
	}
	return r
}

// hcasNotOn returns the devices an NCCL_IB_HCA value names that node lacks.
// A leading "^" makes it a list of what not to use (nothing to check); a
// leading "=" asks for exact names, else a name is a prefix, as NCCL
// matches them; ":PORT" is dropped.
func hcasNotOn(node model.Node, value string) []string {
	if strings.HasPrefix(value, "^") {
		return nil
	}
	exact := strings.HasPrefix(value, "=")
	var missing []string
	for _, entry := range strings.Split(strings.TrimPrefix(value, "="), ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(entry), ":")
		if name == "" {
			continue
		}
		if !slices.ContainsFunc(node.Devices, func(d model.Device) bool {
			return d.Name == name || (!exact && strings.HasPrefix(d.Name, name))
		}) {
			missing = append(missing, name)
		}
	}
	return missing
}

// checkUserSpace says which RDMA user space the image or container gets,
// by the hook's own decision, and what will not work in it.
func checkUserSpace(f Facts) Result {
	u := f.UserSpace
	r := Result{Name: "user-space"}
	if u.ChoiceErr != "" {
		r.Status, r.Detail = Fail, u.Target+": "+u.ChoiceErr+"; the hook refuses such a container"
		r.Fix = "set " + apis.EnvUserSpace + " (or the annotation " + apis.AnnotationUserSpace + ") to auto, host or image"
		return r
	}
	usable, _ := cdispec.StackUsable(f.Stack)
	hostSet := f.InjectLibraries && f.StackErr == "" && usable
	d := userspace.Decide(u.Choice, u.Image, cdispec.NodeProviders(f.Node.Devices), hostSet)
	stack := "its own stack"
	if d.Lend {
		stack = "the host's stack"
	}
	r.Detail = fmt.Sprintf("%s gets %s: %s", u.Target, stack, d.Reason)
	if len(d.Problems) == 0 && d.Replace {
		r.Status = Warn
		r.Detail += "; an image built against a newer rdma-core than the host's then fails with " +
			"\"version `MLX5_1.25' not found\", and NCCL quietly turns off what it looks up by version (data direct, DMA-BUF)"
		r.Fix = "drop the host override (" + u.Choice.Source + "): auto runs the image's own stack untouched"
		return r
	}
	if len(d.Problems) == 0 {
		r.Status = Pass
		return r
	}
	r.Status = Fail
	r.Detail += "; " + strings.Join(d.Problems, "; ")
	r.Fix = "complete the image's stack as said"
	if u.Image.Carries() && d.Mode != model.UserSpaceHost {
		r.Fix += ", or lend it the host's with " + apis.EnvUserSpace + "=host in the container's env"
	}
	return r
}

// checkConfig reports the config file as the hooks and the wrapper read it.
func checkConfig(f Facts) Result {
	r := Result{Name: "config"}
	switch {
	case f.ConfigErr != "":
		r.Status, r.Detail = Fail, f.ConfigErr+"; until it is fixed, containers that ask for RDMA are refused (others start)"
		r.Fix = "correct the file, or move it away to use the defaults"
	case len(f.ConfigWarnings) > 0:
		r.Status, r.Detail = Warn, strings.Join(f.ConfigWarnings, "; ")
		r.Fix = "upgrade rdma-cdi to the version the file was written for, or remove the keys"
	default:
		r.Status, r.Detail = Pass, f.ConfigPath+": usable (a missing file is the defaults)"
	}
	return r
}

func checkDevices(f Facts) Result {
	r := Result{Name: "rdma-devices"}
	if f.DiscoverErr != "" {
		r.Status, r.Detail = Fail, "discovery failed: "+f.DiscoverErr
		r.Fix = "check --sysfs-root and that /sys is mounted"
		return r
	}
	if len(f.Node.Devices) == 0 {
		r.Status = Fail
		r.Detail = fmt.Sprintf("no RDMA devices under %s/class/infiniband", strings.TrimSuffix(f.SysfsRoot, "/"))
		r.Fix = "load the HCA driver and ib_core (modprobe mlx5_ib), or check the sysfs mount"
		return r
	}
	var active, inactive []string
	for _, d := range f.Node.Devices {
		for _, p := range d.Ports {
			ref := fmt.Sprintf("%s:%d", d.Name, p.Number)
			if p.Active() {
				active = append(active, ref)
			} else {
				inactive = append(inactive, fmt.Sprintf("%s %s/%s", ref, orDash(string(p.State)), orDash(p.PhysState)))
			}
		}
	}
	switch {
	case len(active) == 0:
		r.Status = Fail
		r.Detail = fmt.Sprintf("%d device(s), no ACTIVE port (%s)", len(f.Node.Devices), strings.Join(inactive, ", "))
		r.Fix = "check cables, switch ports and the subnet manager (InfiniBand) or the netdev link (RoCE)"
	case len(inactive) > 0:
		r.Status = Warn
		r.Detail = fmt.Sprintf("%d device(s); active: %s; not active: %s", len(f.Node.Devices), strings.Join(active, ", "), strings.Join(inactive, ", "))
		r.Fix = "exclude the inactive ports (nccl.exclude_hcas) or bring them up"
	default:
		r.Status = Pass
		r.Detail = fmt.Sprintf("%d device(s), active ports: %s", len(f.Node.Devices), strings.Join(active, ", "))
	}
	return r
}

func checkDevNodes(f Facts) Result {
	r := Result{Name: "uverbs-nodes"}
	if len(f.Node.Devices) == 0 {
		r.Status, r.Detail = Warn, "skipped: no RDMA devices"
		return r
	}
	var problems, ok []string
	check := func(owner string, cd *model.CharDevice) {
		n, found := f.DevNodes[cd.Path]
		host := n.HostPath
		if host == "" {
			host = cd.Path
		}
		switch {
		case !found || !n.Exists:
			problems = append(problems, fmt.Sprintf("%s: %s missing (sysfs says %d:%d)", owner, host, cd.Major, cd.Minor))
		case n.Err != "":
			problems = append(problems, fmt.Sprintf("%s: %s: %s", owner, host, n.Err))
		case !n.Char:
			problems = append(problems, fmt.Sprintf("%s: %s is not a char device", owner, host))
		case n.Major != cd.Major || n.Minor != cd.Minor:
			problems = append(problems, fmt.Sprintf("%s: %s is %d:%d but sysfs says %d:%d", owner, host, n.Major, n.Minor, cd.Major, cd.Minor))
		default:
			ok = append(ok, fmt.Sprintf("%s %d:%d", host, n.Major, n.Minor))
		}
	}
	var noVerbs []string
	for _, d := range f.Node.Devices {
		if d.Verbs == nil {
			noVerbs = append(noVerbs, d.Name)
			continue
		}
		check(d.Name, d.Verbs)
	}
	if f.Node.RDMACM != nil {
		check("rdma_cm", f.Node.RDMACM)
	}
	if len(noVerbs) > 0 {
		problems = append(problems, "no uverbs device in sysfs for "+strings.Join(noVerbs, ", "))
	}
	if len(problems) > 0 {
		r.Status = Fail
		r.Detail = strings.Join(problems, "; ")
		r.Fix = fmt.Sprintf("modprobe ib_uverbs rdma_ucm; udev must create the nodes under %s/infiniband (libibverbs drops a device without its node)", strings.TrimSuffix(f.DevRoot, "/"))
		return r
	}
	r.Status = Pass
	r.Detail = strings.Join(ok, ", ")
	if f.Node.RDMACM == nil {
		r.Status = Warn
		r.Detail += "; no rdma_cm device"
		r.Fix = "modprobe rdma_ucm (librdmacm needs /dev/infiniband/rdma_cm)"
	}
	return r
}

func checkNetNSMode(f Facts) Result {
	r := Result{Name: "rdma-netns-mode"}
	switch f.Node.NetNSMode {
	case "shared":
		r.Status = Pass
		r.Detail = "shared: every network namespace sees every RDMA device; containers open only the injected uverbs nodes"
	case "exclusive":
		r.Status = Warn
		r.Detail = "exclusive: a container in its own network namespace sees only the RDMA devices moved into it (rdma dev set DEV netns NS); injected uverbs nodes of other devices cannot be opened"
		r.Fix = "use host networking, move devices with a CNI such as rdma-cni, or `rdma system set netns shared`"
	default:
		r.Status = Warn
		r.Detail = "unknown: ib_core's netns_mode parameter is not readable"
		r.Fix = "check `rdma system show netns`"
	}
	return r
}

func checkStack(f Facts) Result {
	r := Result{Name: "rdma-core"}
	if f.StackErr != "" {
		r.Status, r.Detail, r.Fix = Fail, f.StackErr, "check --host-root and cdi.extra_libraries"
		return r
	}
	s := f.Stack
	if len(s.Problems) > 0 {
		r.Status = Fail
		if !f.InjectLibraries {
			r.Status = Warn
		}
		r.Detail = strings.Join(s.Problems, "; ")
		r.Fix = "install a consistent rdma-core (apt-get install ibverbs-providers libibverbs1 librdmacm1); images that ship their own stack are not affected"
		return r
	}
	if s.Flavor == "" {
		r.Status = Fail
		if !f.InjectLibraries {
			r.Status = Warn
		}
		r.Detail = "no RDMA user-space stack (libibverbs.so.1) found on the host"
		r.Fix = "apt-get install ibverbs-providers (or dnf install rdma-core); images that ship their own stack are not affected"
		return r
	}
	roles := map[model.FileRole]int{}
	for _, file := range s.Files {
		if file.Symlink == "" {
			roles[file.Role]++
		}
	}
	r.Status = Pass
	r.Detail = fmt.Sprintf("%s: %d file(s), %d provider(s), %d driver config(s) in %s", s.Flavor, len(s.Files),
		roles[model.RoleProvider], roles[model.RoleDriverConfig], strings.Join(s.LibraryDirs, ", "))
	if !f.InjectLibraries {
		r.Detail += "; never lent (cdi.inject_libraries = false)"
	} else {
		r.Detail += "; lent to images without a stack of their own (cdi.user_space = " + string(f.UserSpaceDefault) + ")"
	}
	return r
}

// lowMemlock is where pinning a useful RDMA buffer fails.
const lowMemlock = 64 << 20

func checkMemlock(f Facts) Result {
	r := Result{Name: "memlock"}
	if len(f.Services) == 0 {
		r.Status = Warn
		r.Detail = "no running container engine (" + strings.Join(processNames(), ", ") + ") or engine unit found; cannot check the memlock limit containers inherit"
		return r
	}
	var low, fine []string
	for _, s := range f.Services {
		who := s.Name
		if s.PID > 0 {
			who = fmt.Sprintf("%s (pid %d)", s.Name, s.PID)
		}
		desc := fmt.Sprintf("%s %s/%s", who, formatLimit(s.Soft), formatLimit(s.Hard))
		if s.Soft < f.WantMemlock && s.Soft < lowMemlock {
			low = append(low, desc)
		} else {
			fine = append(fine, desc)
		}
	}
	if len(low) == 0 {
		r.Status = Pass
		r.Detail = "memlock soft/hard: " + strings.Join(fine, ", ")
		return r
	}
	r.Status = Warn
	r.Detail = fmt.Sprintf("containers inherit a low memlock from %s; RDMA memory registration fails unless the rdma-cdi memlock hook raises it (hooks.memlock = %s)",
		strings.Join(low, ", "), formatLimit(f.WantMemlock))
	if len(fine) > 0 {
		r.Detail += "; fine: " + strings.Join(fine, ", ")
	}
	r.Fix = "LimitMEMLOCK=infinity in a drop-in of the engine's unit (systemctl edit docker.service), then restart it"
	return r
}

func formatLimit(v uint64) string {
	switch {
	case v == config.Unlimited:
		return "unlimited"
	case v >= 1<<30 && v%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", v>>30)
	case v >= 1<<20 && v%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", v>>20)
	case v >= 1<<10 && v%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", v>>10)
	}
	return fmt.Sprintf("%dB", v)
}

var noCDIFix = "upgrade, or use the rdma-container-runtime wrapper (--add-runtime rdma=/usr/local/bin/rdma-container-runtime)"

func checkEngines(f Facts) []Result {
	if len(f.Engines) == 0 {
		return []Result{{Status: Warn, Name: "cdi-engines", Detail: "no container engine (" + strings.Join(engineNames(), ", ") + ") found in PATH"}}
	}
	var out []Result
	for _, e := range f.Engines {
		out = append(out, checkEngine(e, f.Spec))
	}
	return out
}

func checkEngine(e Engine, spec Spec) Result {
	r := Result{Name: "cdi-" + e.Name}
	if e.VersionErr != "" || e.Version == "" {
		r.Status, r.Detail = Warn, fmt.Sprintf("%s installed, version unknown: %s", e.Name, orDash(e.VersionErr))
		return r
	}
	v, ok := parseSemver(e.Version)
	if !ok {
		r.Status, r.Detail = Warn, fmt.Sprintf("%s version %q not understood", e.Name, e.Version)
		return r
	}
	known := engineNamed(e.Name)
	sup, supported := known.cdiAt(v)
	who := e.Name + " " + e.Version
	if !supported {
		r.Status, r.Detail, r.Fix = Warn, who+" has no CDI support", noCDIFix
		return r
	}
	on := sup.defaultOn
	how := "on by default"
	if e.CDIConfig != nil {
		on = *e.CDIConfig
		how = fmt.Sprintf("set to %v in %s", on, e.ConfigPath)
	} else if !sup.defaultOn {
		how = "off by default, not enabled in " + orDash(e.ConfigPath)
	}
	if e.ConfigErr != "" {
		how += " (" + e.ConfigErr + ")"
	}
	if !on {
		r.Status, r.Detail, r.Fix = Warn, fmt.Sprintf("%s: CDI %s", who, how), known.cdiOffFix
		return r
	}
	detail := fmt.Sprintf("%s: CDI %s", who, how)
	if sup.maxSpec == "" {
		r.Status, r.Detail = Pass, detail+"; accepted cdiVersions not known to doctor"
		return r
	}
	if spec.Version == "" {
		r.Status, r.Detail = Pass, detail+"; reads cdiVersion <= "+sup.maxSpec
		return r
	}
	sv, ok := parseSemver(spec.Version)
	if !ok {
		r.Status, r.Detail = Warn, fmt.Sprintf("%s; spec cdiVersion %q not understood", detail, spec.Version)
		return r
	}
	mv, _ := parseSemver(sup.maxSpec)
	if mv.Less(sv) {
		r.Status = Fail
		r.Detail = fmt.Sprintf("%s reads cdiVersion <= %s but %s is %s: its devices are unresolvable there", who, sup.maxSpec, spec.Path, spec.Version)
		r.Fix = fmt.Sprintf("set cdi.max_version = %q to learn which options need %s and drop them, or upgrade %s", sup.maxSpec, spec.Version, e.Name)
		return r
	}
	r.Status, r.Detail = Pass, fmt.Sprintf("%s; reads cdiVersion <= %s, spec is %s", detail, sup.maxSpec, spec.Version)
	return r
}

func checkSpec(f Facts) Result {
	r := Result{Name: "cdi-spec"}
	s := f.Spec
	if !s.Exists {
		r.Status = Fail
		r.Detail = s.Path + " does not exist"
		r.Fix = "rdma-cdi generate, or systemctl enable --now rdma-cdi-watch.service"
		if len(f.Node.Devices) == 0 {
			r.Status, r.Detail, r.Fix = Warn, s.Path+" does not exist (no RDMA devices to describe)", ""
		}
		return r
	}
	if len(s.LoadErrors) > 0 {
		r.Status = Fail
		r.Detail = fmt.Sprintf("%s is rejected by the CDI library: %s", s.Path, strings.Join(s.LoadErrors, "; "))
		r.Fix = "rdma-cdi generate rewrites it; remove conflicting specs of the same devices"
		return r
	}
	if len(s.Devices) == 0 {
		r.Status, r.Detail, r.Fix = Fail, s.Path+" resolves no devices", "rdma-cdi generate"
		return r
	}
	names := slices.Clone(s.Devices)
	slices.Sort(names)
	r.Status = Pass
	r.Detail = fmt.Sprintf("%s (cdiVersion %s): %s", s.Path, orDash(s.Version), strings.Join(names, ", "))
	return r
}

func checkSpecCurrent(f Facts) Result {
	r := Result{Name: "cdi-spec-current"}
	s := f.Spec
	switch {
	case s.RenderErr != "":
		r.Status, r.Detail, r.Fix = Fail, "cannot render the spec now: "+s.RenderErr, "rdma-cdi generate --log-level debug shows why"
	case !s.Exists && s.Rendered == nil:
		r.Status, r.Detail = Pass, "no spec expected: nothing to render"
	case !s.Exists:
		r.Status, r.Detail, r.Fix = Fail, "no spec on disk, but one would be written now", "rdma-cdi generate"
	case s.Rendered == nil:
		r.Status, r.Detail, r.Fix = Fail, s.Path+" exists but nothing would be rendered now (no devices)", "rdma-cdi generate removes it"
	case string(s.Rendered) == string(s.OnDisk):
		r.Status, r.Detail = Pass, s.Path+" matches what would be rendered now"
	default:
		r.Status = Fail
		r.Detail = fmt.Sprintf("%s is stale: %s", s.Path, firstDifference(s.OnDisk, s.Rendered))
		r.Fix = "rdma-cdi generate, or check that rdma-cdi-watch.service is running (and was started with the same flags)"
	}
	return r
}

// firstDifference names the first line that differs.
func firstDifference(old, cur []byte) string {
	a := strings.Split(string(old), "\n")
	b := strings.Split(string(cur), "\n")
	for i := 0; i < len(a) || i < len(b); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return fmt.Sprintf("line %d is %q on disk, %q now", i+1, strings.TrimSpace(x), strings.TrimSpace(y))
		}
	}
	return "contents differ"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
