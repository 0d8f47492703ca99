// Package reliability holds the fault, load and hostile-input tests of
// rdma-cdi (RELIABILITY.md): real binaries, real fixture nodes with mknod
// device nodes, real podman + runc. Quick versions run in `go test`; the
// long load run needs RDMA_CDI_STRESS=1 (`make stress`).
package reliability

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

func TestMain(m *testing.M) { e2e.Main(m) }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// node is a fixture node: a kernel-like sysfs tree and a dev tree with real
// char device nodes (mknod, as root).
type node struct {
	dir, sys, dev string
	topo          fixture.Topology
	res           discover.Result
}

func newNode(t testing.TB, topology string) *node {
	t.Helper()
	e2e.RequireRoot(t)
	tr := fixture.BuildBundledTrees(t, topology, true)
	n := &node{dir: tr.Dir, sys: tr.Sys, dev: tr.Dev, topo: tr.Topo}
	var err error
	n.res, err = discover.Discover(discover.Options{Roots: model.Roots{Sysfs: n.sys, Dev: n.dev}, SkipNet: true})
	must(t, err)
	return n
}

// roots are the global flags that point rdma-cdi at the node.
func (n *node) roots() []string { return []string{"--sysfs-root", n.sys, "--dev-root", n.dev} }

// result of one rdma-cdi run.
type result struct {
	stdout, stderr string
	code           int
	wall           time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %.2000s\nstderr: %.4000s", r.code, r.stdout, r.stderr)
}

// rdmaCDI runs bin/rdma-cdi with args and stdin.
func rdmaCDI(t testing.TB, stdin []byte, args ...string) result {
	t.Helper()
	return runBin(t, stdin, e2e.Binary(t, "rdma-cdi"), args...)
}

func runBin(t testing.TB, stdin []byte, bin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	var so, se bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &so, &se
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: so.String(), stderr: se.String(), wall: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	return r
}

// generate runs `rdma-cdi generate` for the node into specDir.
func (n *node) generate(t testing.TB, specDir, vendor string, extra ...string) result {
	t.Helper()
	args := append(n.roots(), "--spec-dir", specDir, "--vendor", vendor, "--cdi-version", "0.5.0")
	args = append(args, extra...)
	return rdmaCDI(t, nil, append(args, "generate")...)
}

// bundle is a container bundle (rootfs, config.json) with a process whose
// cwd is the rootfs, as runc's init is while hooks run.
type bundle struct {
	dir, rootfs string
	spec        specs.Spec
	pid         int
}

func newBundle(t testing.TB, spec specs.Spec) *bundle {
	t.Helper()
	dir := t.TempDir()
	b := &bundle{dir: dir, rootfs: filepath.Join(dir, "rootfs"), spec: spec}
	must(t, os.MkdirAll(filepath.Join(b.rootfs, "etc"), 0o755))
	if b.spec.Root == nil {
		b.spec.Root = &specs.Root{Path: "rootfs"}
	}
	b.save(t)
	cmd := exec.Command("sleep", "600")
	cmd.Dir = b.rootfs
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	b.pid = cmd.Process.Pid
	return b
}

func (b *bundle) save(t testing.TB) {
	t.Helper()
	data, err := json.Marshal(b.spec)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(b.dir, "config.json"), data, 0o644))
}

// state is the OCI state an engine would give a hook for this container.
func (b *bundle) state(pid int, bundleDir string) []byte {
	data, _ := json.Marshal(specs.State{Version: specs.Version, ID: "ctr-" + filepath.Base(b.dir), Status: specs.StateCreated, Pid: pid, Bundle: bundleDir})
	return data
}

// rdmaDevices are linux.devices entries for every uverbs node of the node.
func (n *node) rdmaDevices() []specs.LinuxDevice {
	var out []specs.LinuxDevice
	for _, d := range n.res.Node.Devices {
		if d.Verbs != nil {
			out = append(out, specs.LinuxDevice{Path: d.Verbs.Path, Type: "c", Major: int64(d.Verbs.Major), Minor: int64(d.Verbs.Minor)})
		}
	}
	return out
}

// tempFiles lists dot-files left by atomic writers in dir.
func tempFiles(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	must(t, err)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

func rdmaBin(t testing.TB) string { return e2e.Binary(t, "rdma-cdi") }
