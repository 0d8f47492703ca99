package cdispec

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// loadCache writes the marshaled spec into a fresh spec dir and loads it
// with the CDI library's own cache, as an engine would.
func loadCache(t *testing.T, spec *specs.Spec, format string) *cdi.Cache {
	t.Helper()
	data, err := Marshal(spec, format)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rdma.example.com-hca."+format), data, 0o644); err != nil {
		t.Fatal(err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("NewCache: %v", err)
	}
	if errs := cache.GetErrors(); len(errs) != 0 {
		t.Fatalf("CDI cache rejected the %s spec: %v\n%s", format, errs, data)
	}
	return cache
}

func ociSpec(uid uint32) *oci.Spec {
	return &oci.Spec{
		Process: &oci.Process{User: oci.User{UID: uid, GID: uid}},
		Linux:   &oci.Linux{},
	}
}

type ociNode struct {
	Path         string
	Major, Minor int64
	Mode         os.FileMode
}

func ociNodes(s *oci.Spec) []ociNode {
	var out []ociNode
	for _, d := range s.Linux.Devices {
		n := ociNode{Path: d.Path, Major: d.Major, Minor: d.Minor}
		if d.Type != "c" {
			n.Path += " (type " + d.Type + ")"
		}
		if d.FileMode != nil {
			n.Mode = *d.FileMode
		}
		out = append(out, n)
	}
	return out
}

func TestCDICacheLoadsAndInjects(t *testing.T) {
	spec, _ := mustRender(t, testNode(), testStack(), fullOptions())
	for _, format := range []string{"yaml", "json"} {
		t.Run(format, func(t *testing.T) {
			cache := loadCache(t, spec, format)
			wantDevices := []string{
				"rdma.example.com/hca=all",
				"rdma.example.com/hca=mlx5_0",
				"rdma.example.com/hca=mlx5_1",
				"rdma.example.com/hca=mlx5_bond_0",
			}
			if got := cache.ListDevices(); !slices.Equal(got, wantDevices) {
				t.Errorf("ListDevices = %v, want %v", got, wantDevices)
			}

			oc := ociSpec(0)
			if unresolved, err := cache.InjectDevices(oc, "rdma.example.com/hca=mlx5_1"); err != nil {
				t.Fatalf("InjectDevices: %v (unresolved %v)", err, unresolved)
			}
			assertInjected(t, oc)
		})
	}
}

func assertInjected(t *testing.T, s *oci.Spec) {
	t.Helper()
	// Spec-wide edits come first (rdma_cm), then the device's own nodes.
	wantNodes := []ociNode{
		{"/dev/infiniband/rdma_cm", 10, 58, 0o666},
		{"/dev/infiniband/uverbs1", 231, 193, 0o666},
		{"/dev/infiniband/umad1", 231, 1, 0o600},
		{"/dev/infiniband/issm1", 231, 65, 0o600},
		{"/dev/infiniband/umad2", 231, 2, 0o600},
		{"/dev/infiniband/issm2", 231, 66, 0o600},
	}
	if got := ociNodes(s); !reflect.DeepEqual(got, wantNodes) {
		t.Errorf("linux.devices:\n got %+v\nwant %+v", got, wantNodes)
	}
	// The cgroup allows exactly those nodes, rwm.
	var allowed []string
	for _, r := range s.Linux.Resources.Devices {
		if !r.Allow || r.Type != "c" || r.Major == nil || r.Minor == nil || r.Access != "rwm" {
			t.Errorf("unexpected cgroup rule %+v", r)
			continue
		}
		allowed = append(allowed, fmt.Sprintf("%d:%d", *r.Major, *r.Minor))
	}
	if want := []string{"10:58", "231:193", "231:1", "231:65", "231:2", "231:66"}; !slices.Equal(allowed, want) {
		t.Errorf("cgroup allows %v, want %v", allowed, want)
	}

	// Libraries are the hook's to lend, per image: the engine mounts none.
	if len(s.Mounts) != 0 {
		t.Errorf("the engine mounted %+v; libraries are lent by the hook", s.Mounts)
	}

	if s.Hooks == nil {
		t.Fatal("no hooks injected")
	}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	var cr [][]string
	for _, h := range s.Hooks.CreateRuntime {
		cr = append(cr, h.Args[2:])
		if h.Path != "/usr/local/bin/rdma-cdi" || !slices.Equal(h.Env, env) {
			t.Errorf("createRuntime hook %+v: want path /usr/local/bin/rdma-cdi and env %v", h, env)
		}
	}
	if len(cr) != 1 || cr[0][0] != "create-runtime" || !slices.Contains(cr[0], "memlock,user-space,nccl-conf") {
		t.Errorf("createRuntime hooks = %v, want one create-runtime hook with the steps memlock, user-space and nccl-conf", cr)
	}
	if len(s.Hooks.CreateContainer)+len(s.Hooks.Prestart)+len(s.Hooks.StartContainer)+len(s.Hooks.Poststart) != 0 { //nolint:staticcheck // the deprecated prestart stage must stay empty too
		t.Errorf("hooks in unexpected stages: %+v", s.Hooks)
	}
}

// The "all" device of a spec whose devices live under a fixture dev root:
// the engine reads hostPath, and the explicit fileMode wins over the host
// node's own mode. With real nodes (root only) this also proves the cache
// stats hostPath, not path.
func TestCDICacheInjectsAllFromDevRoot(t *testing.T) {
	devRoot := filepath.Join(t.TempDir(), "dev")
	if os.Geteuid() == 0 {
		makeNodes(t, devRoot)
	}
	spec, _ := mustRender(t, testNode(), testStack(), Options{DevRoot: devRoot, MaxVersion: "0.5.0"})
	cache := loadCache(t, spec, "yaml")

	s := ociSpec(1000)
	if _, err := cache.InjectDevices(s, "rdma.example.com/hca=all"); err != nil {
		t.Fatalf("InjectDevices all: %v", err)
	}
	nodes := ociNodes(s)
	if len(nodes) != 12 {
		t.Fatalf("all injected %d nodes, want 12 (11 + rdma_cm): %+v", len(nodes), nodes)
	}
	for _, n := range nodes {
		want := os.FileMode(0o666)
		if strings.Contains(n.Path, "umad") || strings.Contains(n.Path, "issm") {
			want = 0o600
		}
		if n.Mode != want {
			t.Errorf("%s mode %o, want %o", n.Path, n.Mode, want)
		}
	}
	// Engines hand nodes without a uid to the container's user, which is
	// why 0600 on umad/issm still lets a non-root container user use them.
	for _, d := range s.Linux.Devices {
		if d.UID == nil || *d.UID != 1000 {
			t.Errorf("%s uid = %v, want 1000", d.Path, d.UID)
		}
	}
}

// makeNodes creates the test node's char devices under devRoot, all 0600, so
// that a mode copied from the host would show.
func makeNodes(t *testing.T, devRoot string) {
	t.Helper()
	for _, c := range testNodeChars() {
		p := filepath.Join(devRoot, strings.TrimPrefix(c.Path, "/dev/"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(c.Major, c.Minor))); err != nil {
			t.Skipf("mknod %s: %v", p, err)
		}
	}
}

func testNodeChars() []model.CharDevice {
	node := testNode()
	out := []model.CharDevice{*node.RDMACM}
	for _, d := range node.Devices {
		out = append(out, d.CharDevices()...)
	}
	return out
}
