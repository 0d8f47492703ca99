package cdispec

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// wantNode is the expected CDI node for /dev/infiniband/NAME.
func wantNode(name string, major, minor int64, mode os.FileMode, hostPath string) specs.DeviceNode {
	return specs.DeviceNode{
		Path: "/dev/infiniband/" + name, HostPath: hostPath,
		Type: "c", Major: major, Minor: minor, FileMode: &mode,
	}
}

func nodesOf(ns []*specs.DeviceNode) []specs.DeviceNode {
	out := make([]specs.DeviceNode, 0, len(ns))
	for _, n := range ns {
		out = append(out, *n)
	}
	return out
}

func deviceNames(s *specs.Spec) []string {
	var names []string
	for _, d := range s.Devices {
		names = append(names, d.Name)
	}
	return names
}

func device(t *testing.T, s *specs.Spec, name string) specs.Device {
	t.Helper()
	for _, d := range s.Devices {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("spec has no device %q (has %v)", name, deviceNames(s))
	return specs.Device{}
}

func mustRender(t *testing.T, node model.Node, stack model.UserStack, opts Options) (*specs.Spec, []string) {
	t.Helper()
	spec, warnings, err := Render(node, stack, opts)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return spec, warnings
}

func TestRenderDefaults(t *testing.T) {
	spec, warnings := mustRender(t, testNode(), testStack(), Options{})
	if len(warnings) != 0 {
		t.Errorf("warnings = %q, want none", warnings)
	}
	if spec.Kind != "rdma.example.com/hca" {
		t.Errorf("kind = %q", spec.Kind)
	}
	// No hostPath, no mount type, names start with letters: the oldest version.
	if spec.Version != "0.3.0" {
		t.Errorf("cdiVersion = %q, want 0.3.0", spec.Version)
	}
	if got, want := deviceNames(spec), []string{"mlx5_0", "mlx5_1", "mlx5_bond_0", "all"}; !slices.Equal(got, want) {
		t.Errorf("devices = %v, want %v", got, want)
	}

	wantMlx51 := []specs.DeviceNode{
		wantNode("uverbs1", 231, 193, 0o666, ""),
		wantNode("umad1", 231, 1, 0o600, ""),
		wantNode("issm1", 231, 65, 0o600, ""),
		wantNode("umad2", 231, 2, 0o600, ""),
		wantNode("issm2", 231, 66, 0o600, ""),
	}
	mlx51 := device(t, spec, "mlx5_1")
	if got := nodesOf(mlx51.ContainerEdits.DeviceNodes); !reflect.DeepEqual(got, wantMlx51) {
		t.Errorf("mlx5_1 nodes:\n got %+v\nwant %+v", got, wantMlx51)
	}
	if e := mlx51.ContainerEdits; len(e.Mounts)+len(e.Hooks)+len(e.Env) != 0 {
		t.Errorf("mlx5_1 has edits besides its nodes: %+v", e)
	}

	bond := device(t, spec, "mlx5_bond_0")
	wantBond := []specs.DeviceNode{
		wantNode("uverbs2", 231, 194, 0o666, ""),
		wantNode("umad3", 231, 3, 0o600, ""),
		wantNode("issm3", 231, 67, 0o600, ""),
	}
	if got := nodesOf(bond.ContainerEdits.DeviceNodes); !reflect.DeepEqual(got, wantBond) {
		t.Errorf("mlx5_bond_0 nodes:\n got %+v\nwant %+v", got, wantBond)
	}

	var allPaths []string
	for _, n := range device(t, spec, "all").ContainerEdits.DeviceNodes {
		allPaths = append(allPaths, strings.TrimPrefix(n.Path, "/dev/infiniband/"))
	}
	wantAll := []string{"uverbs0", "umad0", "issm0", "uverbs1", "umad1", "issm1", "umad2", "issm2", "uverbs2", "umad3", "issm3"}
	if !slices.Equal(allPaths, wantAll) {
		t.Errorf("all nodes = %v, want %v", allPaths, wantAll)
	}

	// Spec-wide: rdma_cm only, since libraries and hooks are off.
	common := spec.ContainerEdits
	if got, want := nodesOf(common.DeviceNodes), []specs.DeviceNode{wantNode("rdma_cm", 10, 58, 0o666, "")}; !reflect.DeepEqual(got, want) {
		t.Errorf("spec-wide nodes = %+v, want %+v", got, want)
	}
	if len(common.Mounts) != 0 || len(common.Hooks) != 0 {
		t.Errorf("mounts %v / hooks %v without InjectLibraries or hooks", common.Mounts, common.Hooks)
	}
}

func TestRenderDevRootKeepsHostPath(t *testing.T) {
	spec, _ := mustRender(t, testNode(), testStack(), Options{DevRoot: "/tmp/fx/dev"})
	want := []specs.DeviceNode{
		wantNode("uverbs0", 231, 192, 0o666, "/tmp/fx/dev/infiniband/uverbs0"),
		wantNode("umad0", 231, 0, 0o600, "/tmp/fx/dev/infiniband/umad0"),
		wantNode("issm0", 231, 64, 0o600, "/tmp/fx/dev/infiniband/issm0"),
	}
	if got := nodesOf(device(t, spec, "mlx5_0").ContainerEdits.DeviceNodes); !reflect.DeepEqual(got, want) {
		t.Errorf("mlx5_0 nodes:\n got %+v\nwant %+v", got, want)
	}
	if got := spec.ContainerEdits.DeviceNodes[0].HostPath; got != "/tmp/fx/dev/infiniband/rdma_cm" {
		t.Errorf("rdma_cm hostPath = %q", got)
	}
	for _, n := range device(t, spec, "all").ContainerEdits.DeviceNodes {
		if n.HostPath != "/tmp/fx"+n.Path {
			t.Errorf("all: %s hostPath = %q", n.Path, n.HostPath)
		}
	}
	if spec.Version != "0.5.0" {
		t.Errorf("cdiVersion = %q, want 0.5.0 (hostPath)", spec.Version)
	}

	// A DevRoot that only differs by a trailing slash is still /dev.
	spec, _ = mustRender(t, testNode(), testStack(), Options{DevRoot: "/dev/"})
	if spec.Version != "0.3.0" || spec.ContainerEdits.DeviceNodes[0].HostPath != "" {
		t.Errorf("DevRoot /dev/: version %s, rdma_cm hostPath %q; want 0.3.0 and none",
			spec.Version, spec.ContainerEdits.DeviceNodes[0].HostPath)
	}
}

func fullOptions() Options {
	return Options{
		InjectLibraries: true,
		Hooks: HookOptions{
			Binary:    "/usr/local/bin/rdma-cdi",
			Args:      []string{"--sysfs-root", "/host/sys", "--config", "/etc/rdma-cdi/config.toml"},
			UserSpace: true,
			NCCLConf:  true,
			Memlock:   true,
		},
	}
}

func TestRenderLibrariesAndHooks(t *testing.T) {
	spec, warnings := mustRender(t, testNode(), testStack(), fullOptions())
	if len(warnings) != 0 {
		t.Errorf("warnings = %q, want none", warnings)
	}
	// Hooks and typeless mounts are 0.3.0 material: podman 4.3 (<= 0.5.0)
	// and CRI-O 1.24 (0.3.0) read the full default spec.
	if spec.Version != "0.3.0" {
		t.Errorf("cdiVersion = %q, want 0.3.0", spec.Version)
	}

	// The spec mounts no library: whether a container gets the host's
	// depends on its image, which only the hook sees.
	if n := len(spec.ContainerEdits.Mounts); n != 0 {
		t.Errorf("the spec mounts %d libraries; the hook lends them", n)
	}
	// The versioned real files are reached through their links: lent
	// under the links' names only.
	lend := func(p string) []string { return []string{"--lend", p + "=/host" + p} }

	globals := []string{"--sysfs-root", "/host/sys", "--config", "/etc/rdma-cdi/config.toml"}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	bin := "/usr/local/bin/rdma-cdi"
	wantHooks := []specs.Hook{
		{HookName: "createRuntime", Path: bin, Env: env, Args: slices.Concat(
			[]string{"rdma-cdi", "hook", "create-runtime"}, globals,
			lend("/etc/libibverbs.d/mlx5.driver"), lend(libDir+"/libibverbs.so.1"),
			lend(libDir+"/libibverbs/libmlx5-rdmav34.so"), lend(libDir+"/libmlx5.so.1"),
			[]string{"--folder", libDir, "--folder", libDir + "/libibverbs", "--provider", "mlx5", "--steps", "memlock,user-space,nccl-conf"})},
	}
	var gotHooks []specs.Hook
	for _, h := range spec.ContainerEdits.Hooks {
		gotHooks = append(gotHooks, *h)
	}
	if !reflect.DeepEqual(gotHooks, wantHooks) {
		t.Errorf("hooks:\n got %+v\nwant %+v", gotHooks, wantHooks)
	}
	// Devices carry only their nodes; everything shared is spec-wide.
	for _, d := range spec.Devices {
		if len(d.ContainerEdits.Mounts)+len(d.ContainerEdits.Hooks) != 0 {
			t.Errorf("device %s carries mounts or hooks", d.Name)
		}
	}
}

func TestRenderStackProblemsBecomeWarnings(t *testing.T) {
	stack := testStack()
	stack.Problems = []string{"libmlx5-rdmav34.so has PABI 34 but libibverbs wants 35", "no provider for mlx5"}
	spec, warnings := mustRender(t, testNode(), stack, fullOptions())

	want := []string{
		"RDMA libraries not lent to containers: libmlx5-rdmav34.so has PABI 34 but libibverbs wants 35",
		"RDMA libraries not lent to containers: no provider for mlx5",
	}
	if !slices.Equal(warnings, want) {
		t.Errorf("warnings = %q, want %q", warnings, want)
	}
	// Nothing to lend, but the user-space step still tells each container
	// whether its image's own stack serves the node's providers.
	hooks := spec.ContainerEdits.Hooks
	if len(hooks) != 1 || hooks[0].Args[2] != "create-runtime" || slices.Contains(hooks[0].Args, "--lend") ||
		!slices.Equal(hooks[0].Args[len(hooks[0].Args)-4:], []string{"--provider", "mlx5", "--steps", "memlock,user-space,nccl-conf"}) {
		t.Errorf("hooks = %+v, want create-runtime with no --lend, the provider mlx5 and the steps memlock, user-space and nccl-conf", hooks)
	}
}

func TestRenderEmptyStackWarns(t *testing.T) {
	_, warnings := mustRender(t, testNode(), model.UserStack{}, Options{InjectLibraries: true})
	if len(warnings) != 1 || !strings.Contains(warnings[0], "no RDMA user-space stack found") {
		t.Errorf("warnings = %q, want one about a missing stack", warnings)
	}
}

func TestRenderSelectsDevices(t *testing.T) {
	spec, _ := mustRender(t, testNode(), testStack(), Options{Devices: []string{"mlx5_bond_0", "mlx5_1", "mlx5_1"}})
	if got, want := deviceNames(spec), []string{"mlx5_1", "mlx5_bond_0", "all"}; !slices.Equal(got, want) {
		t.Errorf("devices = %v, want %v", got, want)
	}
	if n := len(device(t, spec, "all").ContainerEdits.DeviceNodes); n != 8 {
		t.Errorf("all carries %d nodes, want 8 (5 of mlx5_1 + 3 of mlx5_bond_0)", n)
	}
}

func TestRenderUnknownDevice(t *testing.T) {
	_, _, err := Render(testNode(), testStack(), Options{Devices: []string{"mlx5_1", "mlx5_9"}})
	if err == nil {
		t.Fatal("Render with an unknown device succeeded")
	}
	want := "unknown RDMA device(s) mlx5_9 (this node has: mlx5_0, mlx5_1, mlx5_bond_0)"
	if err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}

func TestRenderNoDevices(t *testing.T) {
	_, _, err := Render(model.Node{RDMACM: char("rdma_cm", 10, 58)}, testStack(), Options{})
	if !errors.Is(err, ErrNoDevices) {
		t.Errorf("empty node: err = %v, want ErrNoDevices", err)
	}
	// A device without char devices cannot be offered either.
	bare := model.Node{Devices: []model.Device{{Name: "mlx5_0"}}}
	_, _, err = Render(bare, testStack(), Options{})
	if !errors.Is(err, ErrNoDevices) {
		t.Errorf("node without char devices: err = %v, want ErrNoDevices", err)
	}
}

func TestRenderDropsDeviceWithoutCharDevices(t *testing.T) {
	node := testNode()
	node.Devices = append(node.Devices, model.Device{Name: "rxe0"})
	spec, warnings := mustRender(t, node, testStack(), Options{})
	if slices.Contains(deviceNames(spec), "rxe0") {
		t.Error("rxe0 without char devices is in the spec")
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "rxe0") {
		t.Errorf("warnings = %q, want one naming rxe0", warnings)
	}
}

func TestRenderBadNames(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		node func(model.Node) model.Node
		want string
	}{
		{"vendor", Options{Vendor: "rdma example"}, nil, `CDI vendor "rdma example"`},
		{"class", Options{Class: "hca/x"}, nil, `CDI class "hca/x"`},
		{"device", Options{}, func(n model.Node) model.Node { n.Devices[0].Name = "mlx5 bond"; return n }, `RDMA device name "mlx5 bond"`},
		{"all", Options{}, func(n model.Node) model.Node { n.Devices[0].Name = "all"; return n }, `RDMA device named "all"`},
		{"duplicate", Options{}, func(n model.Node) model.Node { n.Devices[0].Name = "mlx5_0"; return n }, `RDMA device "mlx5_0" listed twice`},
		{"hook binary", Options{Hooks: HookOptions{Memlock: true}}, nil, "no rdma-cdi binary path"},
		{"relative hook", Options{Hooks: HookOptions{Memlock: true, Binary: "bin/rdma-cdi"}}, nil, `"bin/rdma-cdi" is not an absolute path`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			node := testNode()
			if c.node != nil {
				node = c.node(node)
			}
			_, _, err := Render(node, testStack(), c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestRenderMaxVersion(t *testing.T) {
	fx := Options{DevRoot: "/tmp/fx/dev", MaxVersion: "0.3.0"}
	_, _, err := Render(testNode(), testStack(), fx)
	want := "spec needs CDI 0.5.0 but --cdi-version caps at 0.3.0 (because device nodes need hostPath (CDI 0.5.0) since --dev-root /tmp/fx/dev is not /dev)"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}

	// Within the cap: fine, and the version stays the minimum.
	for _, maxV := range []string{"0.5.0", "v0.5.0", "0.5", "1.1.0"} {
		fx.MaxVersion = maxV
		spec, _ := mustRender(t, testNode(), testStack(), fx)
		if spec.Version != "0.5.0" {
			t.Errorf("MaxVersion %s: cdiVersion = %s, want 0.5.0", maxV, spec.Version)
		}
	}

	_, _, err = Render(testNode(), testStack(), Options{Class: "hca.v2", MaxVersion: "0.5.0"})
	if err == nil || !strings.Contains(err.Error(), `spec needs CDI 0.6.0 but --cdi-version caps at 0.5.0 (because class "hca.v2" contains a dot (CDI 0.6.0))`) {
		t.Errorf("dotted class: err = %v", err)
	}

	_, _, err = Render(testNode(), testStack(), Options{MaxVersion: "five"})
	if err == nil || !strings.Contains(err.Error(), `--cdi-version "five"`) {
		t.Errorf("bad MaxVersion: err = %v", err)
	}
}

// Discovery order and duplicate inputs must not change a byte of output.
func TestRenderDeterministic(t *testing.T) {
	a, _ := mustRender(t, testNode(), testStack(), fullOptions())

	node := testNode()
	slices.Reverse(node.Devices)
	stack := testStack()
	slices.Reverse(stack.Files)
	stack.Files = append(stack.Files, stack.Files[0])
	slices.Reverse(stack.LibraryDirs)
	b, _ := mustRender(t, node, stack, fullOptions())

	for _, format := range []string{"yaml", "json"} {
		ba, err := Marshal(a, format)
		if err != nil {
			t.Fatal(err)
		}
		bb, err := Marshal(b, format)
		if err != nil {
			t.Fatal(err)
		}
		if string(ba) != string(bb) {
			t.Errorf("%s differs with reordered input:\n%s\n---\n%s", format, ba, bb)
		}
	}
}

func TestRenderRejectsConflictingStackFiles(t *testing.T) {
	stack := testStack()
	stack.Files = append(stack.Files, model.HostFile{Path: libDir + "/libibverbs.so.1", HostPath: "/elsewhere/libibverbs.so.1"})
	_, _, err := Render(testNode(), stack, Options{InjectLibraries: true})
	if err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("err = %v, want a duplicate-file error", err)
	}
}

func TestRenderWarnsAboutDanglingLink(t *testing.T) {
	stack := testStack()
	stack.Files = append(stack.Files, model.HostFile{Path: libDir + "/librdmacm.so.1", HostPath: "/host" + libDir + "/librdmacm.so.1", Symlink: "librdmacm.so.1.3.44.0"})
	_, warnings := mustRender(t, testNode(), stack, Options{InjectLibraries: true})
	want := libDir + "/librdmacm.so.1 links to " + libDir + "/librdmacm.so.1.3.44.0, which is not in the RDMA user-space stack"
	if !slices.Equal(warnings, []string{want}) {
		t.Errorf("warnings = %q, want %q", warnings, want)
	}
}

func TestMarshalYAML(t *testing.T) {
	node := model.Node{Devices: []model.Device{{
		Name: "mlx5_0", Verbs: char("uverbs0", 231, 192),
	}}, RDMACM: char("rdma_cm", 10, 58)}
	spec, _ := mustRender(t, node, model.UserStack{}, Options{Hooks: HookOptions{Binary: "/usr/bin/rdma-cdi", Memlock: true}})
	got, err := Marshal(spec, "yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := `cdiVersion: 0.3.0
kind: rdma.example.com/hca
devices:
    - name: mlx5_0
      containerEdits:
        deviceNodes:
            - path: /dev/infiniband/uverbs0
              type: c
              major: 231
              minor: 192
              fileMode: 438
    - name: all
      containerEdits:
        deviceNodes:
            - path: /dev/infiniband/uverbs0
              type: c
              major: 231
              minor: 192
              fileMode: 438
containerEdits:
    deviceNodes:
        - path: /dev/infiniband/rdma_cm
          type: c
          major: 10
          minor: 58
          fileMode: 438
    hooks:
        - hookName: createRuntime
          path: /usr/bin/rdma-cdi
          args:
            - rdma-cdi
            - hook
            - create-runtime
            - --steps
            - memlock
          env:
            - PATH=/usr/sbin:/usr/bin:/sbin:/bin
`
	if string(got) != want {
		t.Errorf("YAML:\n%s\nwant:\n%s", got, want)
	}
	if _, err := Marshal(spec, "toml"); err == nil || !strings.Contains(err.Error(), `"toml"`) {
		t.Errorf("Marshal toml: err = %v", err)
	}
}

// Env (the cdi-env delivery) is validated with the rest of the spec.
func TestRenderValidatesEnv(t *testing.T) {
	spec, _ := mustRender(t, testNode(), testStack(), Options{Env: []string{"NCCL_IB_HCA==mlx5_1"}})
	if !slices.Equal(spec.ContainerEdits.Env, []string{"NCCL_IB_HCA==mlx5_1"}) {
		t.Errorf("env = %q", spec.ContainerEdits.Env)
	}
	if _, _, err := Render(testNode(), testStack(), Options{Env: []string{"NCCL_IB_HCA"}}); err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Errorf("env without =: err = %v, want the spec refused", err)
	}
}
