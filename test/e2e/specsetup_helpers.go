package e2e

// Fixture nodes and CDI specs written by the real CLI: a test builds a
// bundled topology (sysfs tree + mknod char devices under a scratch dir) and
// runs `bin/rdma-cdi --sysfs-root S --dev-root D generate --output FILE`
// into a spec dir the engines read, exactly as an operator would.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/hostlibs"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// FixtureNode is a bundled topology built under a scratch dir: a
// kernel-like sysfs tree and real char device nodes (mknod: needs root),
// with an rdma-cdi config file that keeps the hook log in the dir.
type FixtureNode struct {
	Name    string // bundled topology name, e.g. "seed002"
	Dir     string // scratch root
	Sys     string // --sysfs-root
	Dev     string // --dev-root
	Proc    string // --proc-root, for doctor's GPUDirect checks (not in Roots)
	Config  string // rdma-cdi config file (--config)
	HookLog string // [hooks] log_file of Config
	Topo    fixture.Topology
	// owner is the test the node was built for (nil: the binary's), which
	// what runs on the node (a Kubernetes node) must not outlive.
	owner Cleaner
}

// SharedFixtureNode returns the node built from bundled topology name for
// the whole test binary (under Main; per test otherwise). Tests must not
// change it: use NewFixtureNode for that.
func SharedFixtureNode(t testing.TB, name string) *FixtureNode {
	t.Helper()
	RequireRoot(t)
	topo, err := fixture.LoadBundled(name)
	if err != nil {
		t.Fatal(err)
	}
	return GetShared(t, "fixture\x00"+name, func(c Cleaner) (*FixtureNode, error) {
		return BuildFixtureNode(c, topo)
	})
}

// NewFixtureNode builds topology name for this test alone.
func NewFixtureNode(t testing.TB, name string) *FixtureNode {
	t.Helper()
	RequireRoot(t)
	topo, err := fixture.LoadBundled(name)
	if err != nil {
		t.Fatal(err)
	}
	n, err := BuildFixtureNode(t, topo)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// BuildFixtureNode builds topo's node in a scratch directory that c
// removes.
func BuildFixtureNode(c Cleaner, topo fixture.Topology) (*FixtureNode, error) {
	dir, err := ScratchDir(c, "node")
	if err != nil {
		return nil, err
	}
	n := &FixtureNode{Name: topo.Name, Dir: dir, Config: filepath.Join(dir, "config.toml"), HookLog: filepath.Join(dir, "log", "hooks.log")}
	if _, binarys := c.(binaryCleaner); !binarys {
		n.owner = c
	}
	if err := n.Rebuild(topo); err != nil {
		return nil, err
	}
	if err := os.WriteFile(n.Config, []byte(fmt.Sprintf("[hooks]\nlog_file = %q\n", n.HookLog)), 0o644); err != nil {
		return nil, err
	}
	return n, nil
}

// Rebuild replaces the node's sysfs and dev trees with topo, as after a
// device was removed (hot-unplug) or added. The paths stay the same.
func (n *FixtureNode) Rebuild(topo fixture.Topology) error {
	sys, dev, proc := filepath.Join(n.Dir, "sys"), filepath.Join(n.Dir, "dev"), filepath.Join(n.Dir, "proc")
	for _, d := range []string{sys, dev, proc} {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	if err := fixture.BuildSysfs(topo, sys); err != nil {
		return fmt.Errorf("fixture %s: %w", topo.Name, err)
	}
	if err := fixture.BuildDev(topo, dev, true); err != nil {
		return fmt.Errorf("fixture %s: %w", topo.Name, err)
	}
	if err := fixture.BuildProc(topo, proc); err != nil {
		return fmt.Errorf("fixture %s: %w", topo.Name, err)
	}
	n.Sys, n.Dev, n.Proc, n.Topo = sys, dev, proc, topo
	return nil
}

// Roots are the global flags that point rdma-cdi at this node.
func (n *FixtureNode) Roots() []string {
	return []string{"--sysfs-root", n.Sys, "--dev-root", n.Dev}
}

// RDMACDI runs `bin/rdma-cdi ARGS...` (the real binary, built when stale).
func RDMACDI(t testing.TB, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return Run(exec.Command(Binary(t, "rdma-cdi"), args...))
}

// RDMACDI runs `bin/rdma-cdi --sysfs-root S --dev-root D --config C ARGS...`.
func (n *FixtureNode) RDMACDI(t testing.TB, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return RDMACDI(t, append(append(n.Roots(), "--config", n.Config), args...)...)
}

// RequireHostRDMALibs skips the test (fails in CI) unless the host has the
// RDMA user-space stack that specs inject (Debian's libibverbs1,
// ibverbs-providers, librdmacm1: `make deps`).
func RequireHostRDMALibs(t testing.TB) {
	t.Helper()
	stack, err := hostlibs.Discover(hostlibs.Options{HostRoot: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if len(stack.Problems) > 0 || len(stack.Files) == 0 {
		Missing(t, "host RDMA user-space stack incomplete (run `make deps`): %v", stack.Problems)
	}
}

// SpecOptions say how GenerateSpec runs generate.
type SpecOptions struct {
	// Vendor is the CDI vendor (--vendor); default UniqueVendor(t), since
	// test binaries share /var/run/cdi.
	Vendor string
	// Path is the spec file (--output); default
	// /var/run/cdi/<vendor>-hca.yaml. A .json path gets --format json.
	Path string
	// Config is the rdma-cdi config file; default the node's.
	Config string
	// Flags are more global flags for generate, e.g. "--cdi-version=0.5.0".
	Flags []string
}

// CDISpec is a spec file that the real CLI wrote for a fixture node.
type CDISpec struct {
	Node   *FixtureNode
	Vendor string
	Path   string
	Config string
	Flags  []string
}

// GenerateSpec runs the real `rdma-cdi generate` for the node, fails the
// test when it fails, and removes the spec file when the test ends.
func (n *FixtureNode) GenerateSpec(t testing.TB, opts SpecOptions) *CDISpec {
	t.Helper()
	RequireHostRDMALibs(t)
	s := &CDISpec{Node: n, Vendor: opts.Vendor, Path: opts.Path, Config: opts.Config, Flags: opts.Flags}
	if s.Vendor == "" {
		s.Vendor = UniqueVendor(t)
	}
	if s.Path == "" {
		s.Path = filepath.Join(CDIDir, s.Vendor+"-hca.yaml")
	}
	if s.Config == "" {
		s.Config = n.Config
	}
	if err := os.MkdirAll(filepath.Dir(s.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(s.Path) })
	if _, se, err := s.Generate(t); err != nil {
		t.Fatalf("rdma-cdi generate: %v\n%s", err, se)
	}
	if _, err := os.Stat(s.Path); err != nil {
		t.Fatalf("rdma-cdi generate wrote no spec: %v", err)
	}
	return s
}

// Generate runs `rdma-cdi ROOTS --config C --vendor V FLAGS EXTRA generate
// --output PATH` again (EXTRA are more global flags) and returns its output.
func (s *CDISpec) Generate(t testing.TB, extra ...string) (stdout, stderr string, err error) {
	t.Helper()
	args := append(s.Node.Roots(), "--config", s.Config, "--vendor", s.Vendor)
	if filepath.Ext(s.Path) == ".json" {
		args = append(args, "--format", "json")
	}
	args = append(append(append(args, s.Flags...), extra...), "generate", "--output", s.Path)
	return RDMACDI(t, args...)
}

// Device returns the fully qualified CDI name VENDOR/hca=NAME.
func (s *CDISpec) Device(name string) string { return s.Vendor + "/hca=" + name }

// Data returns the spec file's bytes.
func (s *CDISpec) Data(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// LinkInto makes DIR/<base of the spec> a symlink to the spec, removed when
// the test ends: a spec kept elsewhere (a tmpfs of its own) becomes visible
// in a dir the engines read, such as /var/run/cdi.
func (s *CDISpec) LinkInto(t testing.TB, dir string) string {
	t.Helper()
	link := filepath.Join(dir, filepath.Base(s.Path))
	if err := os.Symlink(s.Path, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(link) })
	return link
}

// MountTmpfs mounts a tmpfs of the given size (e.g. "64k") on a new scratch
// dir and unmounts it when the test ends.
func MountTmpfs(t testing.TB, size string) string {
	t.Helper()
	RequireRoot(t)
	dir, err := ScratchDir(t, "tmpfs")
	if err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0755", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, strings.TrimSpace(string(out)))
	}
	// Registered after scratchDir's cleanup, so it runs first.
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	return mnt
}

// Remount remounts the mount at mnt with options, e.g. "ro" or "rw".
func Remount(t testing.TB, mnt, options string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,"+options, mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount %s %s: %v: %s", mnt, options, err, strings.TrimSpace(string(out)))
	}
}

// LentFiles are the container paths of the host files a spec's hook lends
// to images without an RDMA stack of their own (its --lend args), sorted.
func LentFiles(spec *cdispecs.Spec) []string {
	var out []string
	for _, h := range spec.ContainerEdits.Hooks {
		for i := 0; i+1 < len(h.Args); i++ {
			if h.Args[i] == "--lend" {
				ctr, _, _ := strings.Cut(h.Args[i+1], "=")
				out = append(out, ctr)
			}
		}
	}
	slices.Sort(out)
	return out
}
