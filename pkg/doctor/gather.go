package doctor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/hostlibs"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/userspace"
)

// Options say where Gather looks.
type Options struct {
	// Roots: engine configs and libraries are read under Roots.Host.
	Roots    model.Roots
	ProcRoot string // default Roots.Proc: engine processes' limits
	Config   config.Config
	// ConfigPath is the config file; ConfigErr is why it could not be used
	// (Config then holds the defaults), ConfigWarnings its unknown keys.
	ConfigPath     string
	ConfigErr      error
	ConfigWarnings []string
	// SpecPath is the spec file to check.
	SpecPath string
	// Render returns what generation would write now; nil bytes and no
	// error mean "no spec" (no devices). Nil Render skips the currency check.
	Render func() ([]byte, error)
	// LookPath and Run find and run engine binaries (defaults: exec.LookPath
	// and a 10s exec); tests replace them.
	LookPath func(string) (string, error)
	Run      func(ctx context.Context, name string, args ...string) (string, error)
	// Container, when set, is an image root or a running container to
	// tell the RDMA user space of.
	Container *Container
	// Grey, when set, reads the ports and PCIe links for the grey-health
	// check.
	Grey *GreyOptions
}

// GreyOptions say how the grey-health check reads the node: Read twice,
// Interval apart (once when it is 0), judged by Policy.
type GreyOptions struct {
	Interval time.Duration
	Policy   health.Policy
	// Read reads every port and PCIe link of node (greyhealth.Sample),
	// with what it could not read.
	Read func(node model.Node, at time.Time) (health.Sample, []error)
}

// Container is an image or container as the hook would see it.
type Container struct {
	Target string
	// PID is the running container's process (0 for an image root).
	PID         int
	Root        userspace.ImageFS
	Env         []string
	Annotations map[string]string
}

func (o *Options) defaults() {
	o.Roots = o.Roots.WithDefaults()
	if o.ProcRoot == "" {
		o.ProcRoot = o.Roots.Proc
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	if o.Run == nil {
		o.Run = runCommand
	}
}

func runCommand(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		return string(out), fmt.Errorf("%s %s: %v %s", name, strings.Join(args, " "), err, msg)
	}
	return string(out), nil
}

// Gather reads the node. It never fails: what it cannot read becomes a
// fact the checks judge.
func Gather(ctx context.Context, opts Options) Facts {
	opts.defaults()
	f := Facts{SysfsRoot: opts.Roots.Sysfs, DevRoot: opts.Roots.Dev, InjectLibraries: opts.Config.CDI.InjectLibraries,
		UserSpaceDefault: opts.Config.CDI.UserSpace, ConfigPath: opts.ConfigPath, ConfigWarnings: opts.ConfigWarnings}
	if opts.ConfigErr != nil {
		f.ConfigErr = opts.ConfigErr.Error()
	}
	f.WantMemlock = uint64(opts.Config.Hooks.Memlock)
	f.NCCL = opts.Config.NCCL

	res, err := discover.Discover(discover.Options{Roots: opts.Roots, SkipNet: true, GPUDirect: true})
	if err != nil {
		f.DiscoverErr = err.Error()
	}
	f.Node = res.Node
	f.DevNodes = statDevNodes(opts.Roots.Dev, f.Node)
	var grey *greyReading
	if opts.Grey != nil && len(f.Node.Devices) > 0 {
		grey = startGrey(ctx, *opts.Grey, f.Node)
	}

	stack, err := hostlibs.Discover(hostlibs.Options{HostRoot: opts.Roots.Host, ExtraPaths: opts.Config.CDI.ExtraLibraries})
	if err != nil {
		f.StackErr = err.Error()
	}
	f.Stack = stack
	f.EFA = efaFacts(opts)

	f.Services = processLimits(opts.ProcRoot)
	if opts.Roots.Host == "/" {
		f.Services = append(f.Services, unitLimits(ctx, opts)...)
	}
	f.Engines = engines(ctx, opts)
	f.Spec = readSpec(opts)
	if opts.Render != nil {
		data, err := opts.Render()
		if err != nil {
			f.Spec.RenderErr = err.Error()
		}
		f.Spec.Rendered = data
	}
	if c := opts.Container; c != nil {
		u := &UserSpaceFacts{Target: c.Target, Image: userspace.Probe(c.Root, c.Env), Env: c.Env}
		if c.PID > 0 {
			u.Process = processFacts(opts.ProcRoot, c.PID)
		}
		if u.Choice, err = userspace.Choose(opts.Config.CDI.UserSpace, c.Annotations, c.Env); err != nil {
			u.ChoiceErr = err.Error()
		}
		f.UserSpace = u
	}
	if grey != nil {
		f.Grey = grey.finish()
	}
	return f
}

// efaFacts reads the host's NCCL offer as the hook would.
func efaFacts(opts Options) EFAFacts {
	p := opts.Config.NCCLPlugins
	host, warnings := hostlibs.FindNCCL(hostlibs.NCCLOptions{HostRoot: opts.Roots.Host, Dirs: p.Dirs, LibfabricDirs: p.LibfabricDirs})
	return EFAFacts{NCCL: host, Warnings: warnings, PluginsEnabled: p.Enabled}
}

// greyReading is the grey-health check's readings under way: the first
// one right after discovery, the second an interval later in the
// background, so that the wait overlaps the other checks' reading.
type greyReading struct {
	facts *GreyFacts
	done  chan struct{}
}

func startGrey(ctx context.Context, o GreyOptions, node model.Node) *greyReading {
	g := &greyReading{facts: &GreyFacts{Interval: o.Interval, Policy: o.Policy}, done: make(chan struct{})}
	first := time.Now()
	read := func(at time.Time) {
		s, errs := o.Read(node, at)
		g.facts.Samples = append(g.facts.Samples, s)
		g.facts.ReadErrs = g.facts.ReadErrs[:0] // the last reading's
		for _, err := range errs {
			g.facts.ReadErrs = append(g.facts.ReadErrs, err.Error())
		}
	}
	read(first)
	if o.Interval <= 0 {
		close(g.done)
		return g
	}
	go func() {
		defer close(g.done)
		select {
		case <-ctx.Done(): // the second reading is left out
			g.facts.Interval = 0
		case <-time.After(o.Interval):
			at := time.Now()
			read(at)
			// A gap that overran the interval by a quarter (a loaded
			// machine) is told as it was, to a tenth of the interval.
			if gap := at.Sub(first); gap >= o.Interval*5/4 {
				g.facts.Interval = gap.Round(o.Interval / 10)
			}
		}
	}()
	return g
}

// finish waits for the second reading.
func (g *greyReading) finish() *GreyFacts {
	<-g.done
	return g.facts
}

// processFacts reads pid's memlock limit and effective capabilities.
func processFacts(procRoot string, pid int) *ProcessFacts {
	p := &ProcessFacts{PID: pid}
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	limits, err := os.ReadFile(filepath.Join(dir, "limits"))
	if err != nil {
		p.ProcErr = err.Error()
		return p
	}
	var ok bool
	if p.Soft, p.Hard, ok = ParseMemlockLimit(limits); !ok {
		p.ProcErr = "no memlock line in " + filepath.Join(dir, "limits")
		return p
	}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		p.ProcErr = err.Error()
		return p
	}
	caps, ok := capEff(status)
	if !ok {
		p.ProcErr = "no CapEff line in " + filepath.Join(dir, "status")
		return p
	}
	p.IPCLock = caps&(1<<unix.CAP_IPC_LOCK) != 0
	return p
}

// capEff is the effective capability set of a /proc/PID/status.
func capEff(status []byte) (uint64, bool) {
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return caps, err == nil
		}
	}
	return 0, false
}

// statDevNodes looks up the verbs and rdma_cm nodes under devRoot.
func statDevNodes(devRoot string, node model.Node) map[string]DevNode {
	out := map[string]DevNode{}
	add := func(cd *model.CharDevice) {
		if cd == nil {
			return
		}
		host := filepath.Join(devRoot, strings.TrimPrefix(cd.Path, "/dev/"))
		n := DevNode{HostPath: host}
		var st unix.Stat_t
		err := unix.Stat(host, &st)
		switch {
		case errors.Is(err, unix.ENOENT):
		case err != nil:
			n.Exists, n.Err = true, err.Error()
		default:
			n.Exists = true
			n.Char = st.Mode&unix.S_IFMT == unix.S_IFCHR
			n.Major, n.Minor = unix.Major(st.Rdev), unix.Minor(st.Rdev)
		}
		out[cd.Path] = n
	}
	for _, d := range node.Devices {
		add(d.Verbs)
	}
	add(node.RDMACM)
	return out
}

// processLimits reads RLIMIT_MEMLOCK of running engine processes.
func processLimits(procRoot string) []Service {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil
	}
	engineProcesses := processNames()
	var out []Service
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "comm"))
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(comm))
		if !slices.Contains(engineProcesses, name) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "limits"))
		if err != nil {
			continue
		}
		soft, hard, ok := ParseMemlockLimit(data)
		if !ok {
			continue
		}
		out = append(out, Service{Name: name, PID: pid, Soft: soft, Hard: hard})
	}
	slices.SortFunc(out, func(a, b Service) int { return a.PID - b.PID })
	return out
}

// ParseMemlockLimit reads the "Max locked memory" row of /proc/PID/limits.
func ParseMemlockLimit(limits []byte) (soft, hard uint64, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(limits))
	for sc.Scan() {
		line := sc.Text()
		rest, found := strings.CutPrefix(line, "Max locked memory")
		if !found {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) < 2 {
			return 0, 0, false
		}
		s, err1 := parseLimit(fields[0])
		h, err2 := parseLimit(fields[1])
		return s, h, err1 == nil && err2 == nil
	}
	return 0, 0, false
}

func parseLimit(s string) (uint64, error) {
	if s == "unlimited" || s == "infinity" {
		return config.Unlimited, nil
	}
	return strconv.ParseUint(s, 10, 64)
}

// unitLimits asks systemd for the engines' units' LimitMEMLOCK.
func unitLimits(ctx context.Context, opts Options) []Service {
	if _, err := opts.LookPath("systemctl"); err != nil {
		return nil
	}
	var out []Service
	for _, e := range knownEngines {
		if e.unit == "" {
			continue
		}
		text, err := opts.Run(ctx, "systemctl", "show", "-p", "LoadState", "-p", "LimitMEMLOCK", "-p", "LimitMEMLOCKSoft", e.unit)
		if err != nil {
			continue
		}
		if s, ok := ParseUnitLimits(e.unit, text); ok {
			out = append(out, s)
		}
	}
	return out
}

// ParseUnitLimits reads `systemctl show -p LoadState -p LimitMEMLOCK -p
// LimitMEMLOCKSoft UNIT`; ok is false for a unit that is not loaded.
func ParseUnitLimits(unit, text string) (Service, bool) {
	props := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			props[k] = v
		}
	}
	if props["LoadState"] != "loaded" {
		return Service{}, false
	}
	hard, err := parseLimit(props["LimitMEMLOCK"])
	if err != nil {
		return Service{}, false
	}
	soft := hard
	if v, ok := props["LimitMEMLOCKSoft"]; ok {
		if s, err := parseLimit(v); err == nil {
			soft = s
		}
	}
	return Service{Name: unit, Soft: soft, Hard: hard}, true
}

// engines finds the installed engines, their versions and CDI switches.
func engines(ctx context.Context, opts Options) []Engine {
	var out []Engine
	for _, known := range knownEngines {
		if e, found := probeEngine(ctx, opts, known); found {
			out = append(out, e)
		}
	}
	return out
}

// probeEngine asks the first of known's binaries in PATH for its version
// and reads its CDI switch; found is false when none is installed.
func probeEngine(ctx context.Context, opts Options, known engine) (e Engine, found bool) {
	for _, bin := range known.binaries {
		path, err := opts.LookPath(bin)
		if err != nil {
			continue
		}
		e = Engine{Name: known.name}
		text, err := opts.Run(ctx, path, "--version")
		if err != nil {
			e.VersionErr = err.Error()
		} else if m := versionRE.FindString(versionLine(text)); m != "" {
			e.Version = strings.TrimPrefix(m, "v")
		} else {
			e.VersionErr = fmt.Sprintf("no version in %q", strings.TrimSpace(text))
		}
		if known.configPath != "" {
			e.ConfigPath = filepath.Join(opts.Roots.Host, known.configPath)
			e.CDIConfig, e.ConfigErr = readCDISwitch(e.ConfigPath, known.parseCDISwitch)
		}
		return e, true
	}
	return Engine{}, false
}

// versionLine picks the line holding the version ("Version: 1.24.6" in
// crio's multi-line output), else the first line.
func versionLine(text string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for _, l := range lines {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "Version" {
			return v
		}
	}
	return lines[0]
}

// readCDISwitch reads an engine's CDI switch from its config at path with
// parse; a missing file says nothing (the release's default applies).
func readCDISwitch(path string, parse func([]byte) (*bool, string)) (*bool, string) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ""
	}
	if err != nil {
		return nil, err.Error()
	}
	return parse(data)
}

// DockerCDIFeature reads "features": {"cdi": bool} from a daemon.json.
func DockerCDIFeature(data []byte) (*bool, string) {
	var doc struct {
		Features map[string]bool `json:"features"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, "daemon.json: " + err.Error()
	}
	if v, ok := doc.Features["cdi"]; ok {
		return &v, ""
	}
	return nil, ""
}

// ContainerdCDI reads enable_cdi of the CRI plugin from a containerd
// config (1.7 layout; 2.x moved CDI out of the switch and keeps it on).
func ContainerdCDI(data []byte) (*bool, string) {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		return nil, "config.toml: " + err.Error()
	}
	plugins, _ := doc["plugins"].(map[string]any)
	for _, name := range []string{"io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"} {
		cri, _ := plugins[name].(map[string]any)
		if v, ok := cri["enable_cdi"].(bool); ok {
			return &v, ""
		}
	}
	return nil, ""
}

// readSpec loads the spec as engines do, through the CDI library's cache,
// which also reports conflicts with other specs in the same directories.
func readSpec(opts Options) Spec {
	s := Spec{Path: opts.SpecPath}
	data, err := os.ReadFile(opts.SpecPath)
	if errors.Is(err, os.ErrNotExist) {
		return s
	}
	s.Exists = true
	if err != nil {
		s.LoadErrors = []string{err.Error()}
		return s
	}
	s.OnDisk = data
	if spec, err := cdi.ReadSpec(opts.SpecPath, 0); err == nil {
		s.Version = spec.Version
	}
	dir := filepath.Dir(opts.SpecPath)
	dirs := []string{dir}
	if slices.Contains(cdi.DefaultSpecDirs, dir) {
		dirs = cdi.DefaultSpecDirs
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil && cache == nil {
		s.LoadErrors = []string{err.Error()}
		return s
	}
	for _, e := range cache.GetErrors()[opts.SpecPath] {
		s.LoadErrors = append(s.LoadErrors, e.Error())
	}
	prefix := opts.Config.CDI.Vendor + "/" + opts.Config.CDI.Class + "="
	for _, d := range cache.ListDevices() {
		if strings.HasPrefix(d, prefix) {
			if dev := cache.GetDevice(d); dev != nil && dev.GetSpec().GetPath() == opts.SpecPath {
				s.Devices = append(s.Devices, d)
			}
		}
	}
	return s
}
