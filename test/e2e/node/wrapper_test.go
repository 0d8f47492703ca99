package node

// End-to-end tests of the runtime wrapper (Docker 20.10, --add-runtime) and
// of the podman precreate hook, against the seed 002 fixture: real char
// device nodes made with mknod, a CDI spec written by the real `rdma-cdi
// generate` for the fixture with the host's RDMA libraries, and a static
// program that pins 64 MiB. This machine's RLIMIT_MEMLOCK hard limit is
// 8 MiB, so only CAP_IPC_LOCK lets that program pass.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
	"github.com/rdma-cdi/rdma-cdi/pkg/runtimewrap"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// rdmaSetup is one fixture node with its CDI spec and rdma-cdi config.
type rdmaSetup struct {
	dir, sys, dev string
	vendor        string
	config        string // rdma-cdi config file
	binary        string // bin/rdma-cdi
	mlock         string // static mlock program
	node          discover.Result
	cfg           config.Config
	devices       []string
}

const wrapperMemlock = 4 << 20 // below the host's 8 MiB hard limit: runc may set it

func newRDMASetup(t *testing.T) *rdmaSetup {
	t.Helper()
	e2e.RequireRoot(t)
	dir, err := e2e.ScratchDir(t, "wrap")
	if err != nil {
		t.Fatal(err)
	}
	n := e2e.SharedFixtureNode(t, "seed002")
	s := &rdmaSetup{dir: dir, sys: n.Sys, dev: n.Dev, vendor: e2e.UniqueVendor(t), binary: e2e.Binary(t, "rdma-cdi")}
	s.node, err = discover.Discover(discover.Options{Roots: model.Roots{Sysfs: s.sys, Dev: s.dev}})
	if err != nil {
		t.Fatal(err)
	}
	s.devices = s.node.Node.DeviceNames()
	if len(s.devices) != 9 {
		t.Fatalf("fixture devices = %v", s.devices)
	}

	s.cfg = config.Default()
	s.cfg.CDI.Vendor = s.vendor
	s.cfg.CDI.SpecDir = e2e.CDIDir
	s.cfg.NCCL.Tunables = map[string]string{"NCCL_IB_TIMEOUT": "22"}
	s.config = filepath.Join(dir, "config.toml")
	cfgText := fmt.Sprintf(`[cdi]
vendor = %q
spec_dir = %q
[hooks]
memlock = "%d"
log_file = %q
[runtime]
path = %q
log_file = %q
[nccl.tunables]
NCCL_IB_TIMEOUT = "22"
`, s.vendor, e2e.CDIDir, wrapperMemlock, filepath.Join(dir, "hooks.log"), s.recorder(t), filepath.Join(dir, "runtime.log"))
	if err := os.WriteFile(s.config, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}

	// The CDI spec, written by the real `rdma-cdi generate` with this config
	// into /var/run/cdi (podman 4.3 reads <= 0.5.0: the default is 0.5.0).
	spec := n.GenerateSpec(t, e2e.SpecOptions{Vendor: s.vendor, Config: s.config})
	if v := regexp.MustCompile(`(?m)^cdiVersion: (\S+)$`).FindStringSubmatch(spec.Data(t)); v == nil || v[1] != "0.5.0" {
		t.Fatalf("generated spec version %v, want 0.5.0", v)
	}

	s.mlock = filepath.Join(dir, "mlock")
	cmd := exec.Command("go", "build", "-trimpath", "-o", s.mlock, "./test/e2e/testdata/mlock")
	cmd.Dir = e2e.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building mlock: %v\n%s", err, out)
	}
	return s
}

// recorder writes a runtime script that keeps a copy of each config.json
// it is asked to create (by container id) and then execs runc.
// wrapperBinary is the runtime wrapper as installed: a link named
// rdma-container-runtime to the binary under test.
func (s *rdmaSetup) wrapperBinary(t *testing.T) string {
	t.Helper()
	wrapper := filepath.Join(t.TempDir(), runtimewrap.Name)
	if err := os.Symlink(s.binary, wrapper); err != nil {
		t.Fatal(err)
	}
	return wrapper
}

func (s *rdmaSetup) recorder(t *testing.T) string {
	t.Helper()
	return writeRecordingRuntime(t, filepath.Join(s.dir, "record-runc"), "", filepath.Join(s.dir, "rec"), e2e.RequireBinary(t, "runc"))
}

// writeRecordingRuntime writes at path an OCI runtime script that keeps a
// copy of each config.json it is asked to create, as dir/ID.json, then
// execs runtime with its arguments; env, when not "", is a shell line run
// first (an export).
func writeRecordingRuntime(t *testing.T, path, env, dir, runtime string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`#!/bin/sh
%s
bundle=.; prev=; cmd=; id=
for a in "$@"; do
	case "$prev" in --bundle|-b) bundle=$a ;; esac
	case "$a" in --bundle=*) bundle=${a#--bundle=} ;; esac
	[ "$a" = create ] && [ -z "$cmd" ] && cmd=create
	prev=$a; id=$a
done
[ "$cmd" = create ] && cp "$bundle/config.json" %q/"$id".json
exec %q "$@"
`, env, dir, runtime)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func (s *rdmaSetup) recorded(t *testing.T, cidFile string) *specs.Spec {
	t.Helper()
	id, err := os.ReadFile(cidFile)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(s.dir, "rec", strings.TrimSpace(string(id))+".json"))
	if err != nil {
		t.Fatalf("no config recorded for the container: %v", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	return &spec
}

// expectedNCCL is what the wrapper must compute for devices: the same
// policy over the same fixture.
func (s *rdmaSetup) expectedNCCL(devices []string) []string {
	vars := nccl.Compute(s.node.Node, s.cfg.NCCL, nccl.Scope{Devices: devices}).Vars
	var out []string
	for _, v := range vars {
		out = append(out, v.Name+"="+v.Value)
	}
	slices.Sort(out)
	return out
}

type probed struct {
	devs    []string
	uverbs1 string
	capEff  uint64
	memlock string
	env     []string
	ldd     string
	mlock   string
}

func parseProbe(t *testing.T, out string) probed {
	t.Helper()
	var p probed
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		switch k {
		case "devs":
			p.devs = strings.Fields(v)
		case "uverbs1":
			p.uverbs1 = v
		case "capeff":
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("CapEff %q: %v", v, err)
			}
			p.capEff = n
		case "memlock":
			p.memlock = v
		case "env":
			p.env = append(p.env, v)
		case "ldd":
			p.ldd = v
		case "mlock":
			p.mlock = v
		}
	}
	return p
}

const capIPCLockBit = 14

// injectedLib is ldd's line for a libibverbs found (the image has none of its own).
var injectedLib = regexp.MustCompile(`libibverbs\.so\.1 => (/usr)?/lib/x86_64-linux-gnu/libibverbs\.so\.1 \(`)

func (p probed) ipcLock() bool { return p.capEff&(1<<capIPCLockBit) != 0 }

// devNames are the /dev/infiniband nodes of the seed002 devices given.
func devNames(t *testing.T, devices ...int) []string {
	var out []string
	for _, n := range devices {
		out = append(out, fmt.Sprintf("uverbs%d", n), fmt.Sprintf("umad%d", n), fmt.Sprintf("issm%d", n))
	}
	out = append(out, "rdma_cm")
	slices.Sort(out)
	return out
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// checkRDMA asserts what a container that asked for devices must see.
func (s *rdmaSetup) checkRDMA(t *testing.T, p probed, devices []int, userEnv ...string) {
	t.Helper()
	if want := devNames(t, devices...); !slices.Equal(p.devs, want) {
		t.Errorf("/dev/infiniband = %v, want %v", p.devs, want)
	}
	if slices.Contains(devices, 1) && p.uverbs1 != "character special file e7:c1" {
		t.Errorf("uverbs1 = %q, want char 231:193", p.uverbs1)
	}
	if !p.ipcLock() {
		t.Errorf("CapEff %x lacks CAP_IPC_LOCK", p.capEff)
	}
	if p.memlock != strconv.Itoa(wrapperMemlock>>10) {
		t.Errorf("ulimit -l = %q, want %d", p.memlock, wrapperMemlock>>10)
	}
	var names []string
	for _, n := range devices {
		names = append(names, fmt.Sprintf("mlx5_%d", n))
	}
	want := s.expectedNCCL(names)
	for _, u := range userEnv {
		k, _, _ := strings.Cut(u, "=")
		want = slices.DeleteFunc(want, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
		want = append(want, u)
	}
	slices.Sort(want)
	if !slices.Equal(p.env, want) {
		t.Errorf("NCCL env = %v, want %v", p.env, want)
	}
	if !injectedLib.MatchString(p.ldd) {
		t.Errorf("ldd: libibverbs not resolved: %q", p.ldd)
	}
	if p.mlock != "mlock 64 MiB ok" {
		t.Errorf("mlock: %q", p.mlock)
	}
}

// checkNothing asserts a container that asked for nothing got nothing.
func checkNothing(t *testing.T, p probed) {
	t.Helper()
	if len(p.devs) != 0 || p.ipcLock() || p.memlock != "8192" || len(p.env) != 0 || !strings.Contains(p.ldd, "libibverbs.so.1 => not found") {
		t.Errorf("a container that asked for nothing got something: %+v", p)
	}
	if !strings.HasPrefix(p.mlock, "mlock 64 MiB failed") {
		t.Errorf("mlock without IPC_LOCK under an 8 MiB limit: %q", p.mlock)
	}
}

func TestWrapperDocker20(t *testing.T) {
	s := newRDMASetup(t)
	wrapper := s.wrapperBinary(t)
	// dockerd's env reaches the runtime through containerd and the shim.
	t.Setenv(runtimewrap.EnvConfig, s.config)
	t.Setenv(runtimewrap.EnvSysfsRoot, s.sys)
	t.Setenv(runtimewrap.EnvDevRoot, s.dev)
	d := e2e.Docker20(t, "--add-runtime", "rdma="+wrapper, "--add-runtime", "rec="+s.recorder(t))

	run := func(t *testing.T, args ...string) (string, string, error) {
		full := append([]string{"-v", s.mlock + ":/mlock:ro"}, args...)
		return d.Run(full...)
	}
	probeRun := func(t *testing.T, args ...string) probed {
		t.Helper()
		so, se, err := run(t, append(args, e2e.Glibc.Ref, "sh", "-c", e2e.Probe)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, so)
		}
		_ = se
		return parseProbe(t, so)
	}

	t.Run("all", func(t *testing.T) {
		p := probeRun(t, "--runtime", "rdma", "-e", "RDMA_VISIBLE_DEVICES=all")
		s.checkRDMA(t, p, seq(9))
	})
	t.Run("user NCCL env wins", func(t *testing.T) {
		p := probeRun(t, "--runtime", "rdma", "-e", "RDMA_VISIBLE_DEVICES=mlx5_1,mlx5_2", "-e", "NCCL_IB_HCA=mlx5_3:1")
		s.checkRDMA(t, p, []int{1, 2}, "NCCL_IB_HCA=mlx5_3:1")
	})
	t.Run("user memlock wins", func(t *testing.T) {
		p := probeRun(t, "--runtime", "rdma", "-e", "RDMA_VISIBLE_DEVICES=mlx5_4", "--ulimit", "memlock=1048576:1048576")
		if p.memlock != "1024" || !p.ipcLock() || p.mlock != "mlock 64 MiB ok" {
			t.Errorf("got %+v", p)
		}
	})
	t.Run("asked for nothing: config unchanged", func(t *testing.T) {
		cids := []string{filepath.Join(s.dir, "cid-rdma"), filepath.Join(s.dir, "cid-rec")}
		p := probeRun(t, "--runtime", "rdma", "--cidfile", cids[0])
		checkNothing(t, p)
		q := probeRun(t, "--runtime", "rec", "--cidfile", cids[1])
		checkNothing(t, q)
		// The wrapper's runtime saw the config Docker wrote, as a runtime
		// without rdma-cdi did (once container-specific names are blanked).
		a, b := normalize(s.recorded(t, cids[0])), normalize(s.recorded(t, cids[1]))
		if a != b {
			t.Errorf("config differs from a plain runtime's:\n%s\n%s", a, b)
		}
	})
	t.Run("without rdma-cdi mlock fails", func(t *testing.T) {
		so, _, err := run(t, "-e", "RDMA_VISIBLE_DEVICES=all", e2e.BB.Ref, "/mlock")
		if err == nil || !strings.Contains(so, "mlock 64 MiB failed") {
			t.Errorf("plain runc: %q, %v", so, err)
		}
	})
	t.Run("unknown device fails the start with the known names", func(t *testing.T) {
		_, se, err := run(t, "--runtime", "rdma", "-e", "RDMA_VISIBLE_DEVICES=mlx5_42", e2e.BB.Ref, "true")
		if err == nil || !strings.Contains(se, `unknown RDMA device \"mlx5_42\"`) && !strings.Contains(se, `unknown RDMA device "mlx5_42"`) || !strings.Contains(se, "mlx5_0, mlx5_1") {
			t.Errorf("got %v\n%s", err, se)
		}
	})
}

// normalize blanks what differs between two runs of the same docker run.
func normalize(s *specs.Spec) string {
	s.Hostname = ""
	s.Root = nil
	if s.Linux != nil {
		s.Linux.CgroupsPath = ""
	}
	id := regexp.MustCompile(`[0-9a-f]{64}`)
	for i := range s.Mounts {
		s.Mounts[i].Source = id.ReplaceAllString(s.Mounts[i].Source, "ID")
	}
	if s.Hooks != nil {
		prestart := s.Hooks.Prestart //nolint:staticcheck // the runtime wrapper's tests give prestart hooks too
		for i := range prestart {
			for j := range prestart[i].Args {
				prestart[i].Args[j] = id.ReplaceAllString(prestart[i].Args[j], "ID")
			}
		}
	}
	s.Process.Env = slices.DeleteFunc(s.Process.Env, func(kv string) bool { return strings.HasPrefix(kv, "HOSTNAME=") })
	data, _ := json.MarshalIndent(s, "", " ")
	return string(data)
}

func (s *rdmaSetup) hooksDir(t *testing.T, when string) string {
	t.Helper()
	dir := filepath.Join(s.dir, "hooks-"+e2e.UniqueID(""))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	hook := fmt.Sprintf(`{"version":"1.0.0","hook":{"path":%q,"args":["rdma-cdi","--config",%q,"--sysfs-root",%q,"--dev-root",%q,"hook","precreate"],"env":["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],"timeout":30},"when":%s,"stages":["precreate"]}`,
		s.binary, s.config, s.sys, s.dev, when)
	if err := os.WriteFile(filepath.Join(dir, "rdma-cdi-precreate.json"), []byte(hook), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestPrecreatePodman(t *testing.T) {
	s := newRDMASetup(t)
	base := e2e.Podman(t)
	always := base.WithHooksDir(s.hooksDir(t, `{"always":true}`))
	annot := base.WithHooksDir(s.hooksDir(t, fmt.Sprintf(`{"annotations":{%q:".*"}}`, "^"+regexp.QuoteMeta(s.vendor+"/devices")+"$")))

	probeRun := func(t *testing.T, p *e2e.PodmanEnv, args ...string) probed {
		t.Helper()
		full := append([]string{"-v", s.mlock + ":/mlock:ro"}, args...)
		so, _, err := p.Run(append(full, e2e.Glibc.Ref, "sh", "-c", e2e.Probe)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, so)
		}
		return parseProbe(t, so)
	}

	t.Run("env all, hook always", func(t *testing.T) {
		s.checkRDMA(t, probeRun(t, always, "-e", "RDMA_VISIBLE_DEVICES=all"), seq(9))
	})
	t.Run("user NCCL env wins", func(t *testing.T) {
		s.checkRDMA(t, probeRun(t, always, "-e", "RDMA_VISIBLE_DEVICES=mlx5_1,mlx5_2", "-e", "NCCL_IB_HCA=mlx5_3:1"), []int{1, 2}, "NCCL_IB_HCA=mlx5_3:1")
	})
	t.Run("annotation, hook on annotation", func(t *testing.T) {
		s.checkRDMA(t, probeRun(t, annot, "--annotation", s.vendor+"/devices=mlx5_1"), []int{1})
	})
	// podman's --annotation splits its value on commas: one name per annotation.
	t.Run("cdi.k8s.io annotations", func(t *testing.T) {
		s.checkRDMA(t, probeRun(t, always, "--annotation", "cdi.k8s.io/rdma-a="+s.vendor+"/hca=mlx5_3", "--annotation", "cdi.k8s.io/rdma-b="+s.vendor+"/hca=mlx5_5"), []int{3, 5})
	})
	// podman applied the CDI spec itself: the hook adds what CDI cannot.
	t.Run("podman --device alone", func(t *testing.T) {
		s.checkRDMA(t, probeRun(t, always, "--device", s.vendor+"/hca=mlx5_2"), []int{2})
	})
	t.Run("podman --device and the same env request: not injected twice", func(t *testing.T) {
		s.checkRDMA(t, probeRun(t, always, "--device", s.vendor+"/hca=mlx5_2", "-e", "RDMA_VISIBLE_DEVICES=mlx5_2,mlx5_6"), []int{2, 6})
	})
	t.Run("env request does not reach an annotation-only hook", func(t *testing.T) {
		checkNothing(t, probeRun(t, annot, "-e", "RDMA_VISIBLE_DEVICES=all"))
	})
	t.Run("asked for nothing", func(t *testing.T) {
		checkNothing(t, probeRun(t, always))
	})
	t.Run("without rdma-cdi mlock fails", func(t *testing.T) {
		checkNothing(t, probeRun(t, base, "-e", "RDMA_VISIBLE_DEVICES=all"))
	})
	t.Run("unknown device fails the start", func(t *testing.T) {
		_, se, err := always.Run("-e", "RDMA_VISIBLE_DEVICES=mlx5_42", e2e.BB.Ref, "true")
		if err == nil || !strings.Contains(se, "precreate") {
			t.Errorf("got %v\n%s", err, se)
		}
		// podman shows only the hook's exit status; the hook log has why.
		log, _ := os.ReadFile(filepath.Join(s.dir, "hooks.log"))
		if !strings.Contains(string(log), `unknown RDMA device \"mlx5_42\"`) || !strings.Contains(string(log), "known: mlx5_0, mlx5_1") {
			t.Errorf("hook log: %s", log)
		}
	})
}
