package node

// End-to-end proof of the CDI path: the real `rdma-cdi generate` writes the
// spec for a fixture node (sysfs tree + mknod char devices) into a dir the
// engines read, and real engines (podman 4.3 + runc, containerd 2.x, Docker
// 29) start containers with `--device VENDOR/hca=NAME`. Every assertion is on
// what the container itself printed.

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// seed002Spec is the seed002 node (shared by the binary) with a spec of a
// vendor of this test, written by the CLI into /var/run/cdi.
func seed002Spec(t *testing.T) *e2e.CDISpec {
	t.Helper()
	return e2e.SharedFixtureNode(t, "seed002").GenerateSpec(t, e2e.SpecOptions{})
}

func TestCDIPodmanDevices(t *testing.T) {
	s := seed002Spec(t)
	p := e2e.Podman(t)
	if v := cdiVersionOf(t, s.Path); v != "0.5.0" {
		t.Errorf("generate wrote cdiVersion %s for a fixture dev root, want 0.5.0 (hostPath; podman 4.3 reads <= 0.5.0)", v)
	}
	ls := func(t *testing.T, dev string) map[string]e2e.IBNode {
		so, se, err := p.Run("--device", s.Device(dev), e2e.BB.Ref, "ls", "-l", "/dev/infiniband")
		if err != nil {
			t.Fatalf("%v\n%s", err, se)
		}
		return e2e.ParseLsDev(t, so)
	}
	t.Run("mlx5_1", func(t *testing.T) {
		e2e.CheckNodes(t, "=mlx5_1", ls(t, "mlx5_1"), e2e.WantNodes(t, s.Node.Topo, e2e.MLX5_1Nodes...))
	})
	t.Run("all", func(t *testing.T) {
		got := ls(t, "all")
		e2e.CheckNodes(t, "=all", got, e2e.WantNodes(t, s.Node.Topo))
		if len(got) != 9*3+1 {
			t.Errorf("=all: %d nodes, want 28 (9 HCAs x uverbs/umad/issm + rdma_cm)", len(got))
		}
	})
	t.Run("two devices", func(t *testing.T) {
		so, se, err := p.Run("--device", s.Device("mlx5_1"), "--device", s.Device("mlx5_7"), e2e.BB.Ref, "ls", "-l", "/dev/infiniband")
		if err != nil {
			t.Fatalf("%v\n%s", err, se)
		}
		e2e.CheckNodes(t, "=mlx5_1 + =mlx5_7", e2e.ParseLsDev(t, so), e2e.WantNodes(t, s.Node.Topo, append(e2e.MLX5_1Nodes, "uverbs7", "umad7", "issm7")...))
	})
	t.Run("without a device nothing", func(t *testing.T) {
		so, _, err := p.Run(e2e.BB.Ref, "sh", "-c", "ls /dev/infiniband 2>&1; true")
		if err != nil || !strings.Contains(so, "No such file or directory") {
			t.Errorf("a container without --device has /dev/infiniband: %q %v", so, err)
		}
	})
}

func cdiVersionOf(t *testing.T, path string) string {
	t.Helper()
	spec, err := cdi.ReadSpec(path, 0)
	if err != nil {
		t.Fatalf("the CDI library rejects %s: %v", path, err)
	}
	return spec.Version
}

// libProbe loads ibv_devices, then shows how its libibverbs resolves, the
// provider dir and a digest of the libibverbs that the container sees.
const libProbe = `ibv_devices 2>&1; echo "ibv_devices_rc=$?"
echo "--- ldd"; ldd /usr/bin/ibv_devices 2>&1
echo "--- providers"; ls /usr/lib/x86_64-linux-gnu/libibverbs/ 2>&1
echo "--- sha"; sha256sum "$(readlink -f /usr/lib/x86_64-linux-gnu/libibverbs.so.1)" 2>&1
true`

// injected reads what the spec's hook lends an image without a stack: the
// container path of libibverbs.so.1 and the provider file names under its
// libibverbs/ dir.
func injected(t *testing.T, path string) (libibverbs string, providers []string) {
	t.Helper()
	spec, err := cdi.ReadSpec(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(spec.ContainerEdits.Mounts); n != 0 {
		t.Errorf("the spec mounts %d files; libraries are the hook's to lend", n)
	}
	for _, p := range e2e.LentFiles(spec.Spec) {
		switch {
		case filepath.Base(p) == "libibverbs.so.1":
			libibverbs = p
		case filepath.Base(filepath.Dir(p)) == "libibverbs" && strings.Contains(p, "-rdmav"):
			providers = append(providers, filepath.Base(p))
		}
	}
	slices.Sort(providers)
	if libibverbs == "" || len(providers) == 0 {
		t.Fatalf("the generated spec injects no libibverbs.so.1 (%q) or no providers (%v)", libibverbs, providers)
	}
	return libibverbs, providers
}

func TestCDIGlibcLoadsInjectedLibraries(t *testing.T) {
	s := seed002Spec(t)
	p := e2e.Podman(t)
	libPath, providers := injected(t, s.Path)
	if !slices.ContainsFunc(providers, func(n string) bool { return strings.HasPrefix(n, "libmlx5-rdmav") }) {
		t.Errorf("no mlx5 provider injected: %v", providers)
	}
	hostLib, err := filepath.EvalSymlinks("/usr/lib/x86_64-linux-gnu/libibverbs.so.1")
	if err != nil {
		t.Fatal(err)
	}
	hostData, err := os.ReadFile(hostLib)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(hostData)
	hostSum := hex.EncodeToString(sum[:])

	t.Run("with the device", func(t *testing.T) {
		so, se, err := p.Run("--device", s.Device("mlx5_1"), e2e.Glibc.Ref, "sh", "-c", libProbe)
		if err != nil {
			t.Fatalf("%v\n%s", err, se)
		}
		if strings.Contains(so, "error while loading shared libraries") {
			t.Fatalf("ibv_devices does not load with the injected libraries:\n%s", so)
		}
		// Loaded: libibverbs ran and asked the kernel, which has no
		// InfiniBand here (rc 1, ENOSYS), or listed no device (rc 0).
		if !strings.Contains(so, "Failed to get IB devices list") && !strings.Contains(so, "node GUID") {
			t.Errorf("ibv_devices printed neither its device list nor libibverbs' error:\n%s", so)
		}
		if !strings.Contains(so, "ibv_devices_rc=0") && !strings.Contains(so, "ibv_devices_rc=1") {
			t.Errorf("ibv_devices exit status (want 0 or 1, not 127):\n%s", so)
		}
		ldd := e2e.Section(so, "ldd")
		want := regexp.MustCompile(`(?m)^\s*libibverbs\.so\.1 => ` + regexp.QuoteMeta(libPath) + ` \(0x`)
		if !want.MatchString(ldd) {
			t.Errorf("ldd does not resolve libibverbs.so.1 to the injected %s:\n%s", libPath, ldd)
		}
		if strings.Contains(ldd, "not found") {
			t.Errorf("ldd: a dependency is missing:\n%s", ldd)
		}
		if got := strings.Fields(e2e.Section(so, "providers")); !slices.Equal(got, providers) {
			t.Errorf("providers in the container = %v, want the spec's %v", got, providers)
		}
		if got := strings.Fields(e2e.Section(so, "sha")); len(got) == 0 || got[0] != hostSum {
			t.Errorf("libibverbs in the container is not the host's %s (%s): %v", hostLib, hostSum, got)
		}
	})
	t.Run("without the device", func(t *testing.T) {
		so, se, err := p.Run(e2e.Glibc.Ref, "sh", "-c", libProbe)
		if err != nil {
			t.Fatalf("%v\n%s", err, se)
		}
		if !strings.Contains(so, "error while loading shared libraries: libibverbs.so.1") || !strings.Contains(so, "ibv_devices_rc=127") {
			t.Errorf("ibv_devices loaded without the device's libraries:\n%s", so)
		}
		if !strings.Contains(e2e.Section(so, "ldd"), "libibverbs.so.1 => not found") {
			t.Errorf("ldd without the device:\n%s", e2e.Section(so, "ldd"))
		}
		if !strings.Contains(e2e.Section(so, "providers"), "No such file or directory") {
			t.Errorf("provider dir exists without the device:\n%s", e2e.Section(so, "providers"))
		}
	})
}

// containerd (ctr, CDI) and Docker 29 (Engine API, CDI) run the spec's hook
// through runc: the same nccl.conf as under podman.
func TestCDIContainerdDevice(t *testing.T) {
	s := seed002Spec(t)
	c := e2e.Containerd(t)
	so, se, err := c.Run("--device", s.Device("mlx5_1"), e2e.BB.Ref, e2e.UniqueID("cdi-"), "sh", "-c", e2e.HookProbe)
	if err != nil {
		t.Fatalf("%v\n%s", err, se)
	}
	e2e.CheckHookProbe(t, "ctr", s, so)
}

func TestCDIDocker29Device(t *testing.T) {
	s := seed002Spec(t)
	d := e2e.Docker29(t)
	so, se, code, err := d.RunAPI(e2e.DockerRunSpec{
		Image:      e2e.BB.Ref,
		Cmd:        []string{"sh", "-c", e2e.HookProbe},
		CDIDevices: []string{s.Device("mlx5_1")},
	})
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v\nstderr: %s", code, err, se)
	}
	e2e.CheckHookProbe(t, "docker", s, so)
}

func TestCDIUnknownDeviceName(t *testing.T) {
	s := seed002Spec(t)
	p := e2e.Podman(t)
	_, se, err := p.Run("--device", s.Device("mlx5_99"), e2e.BB.Ref, "true")
	if err == nil {
		t.Fatal("podman started a container with an unknown CDI device")
	}
	if !strings.Contains(se, "unresolvable CDI devices") || !strings.Contains(se, s.Device("mlx5_99")) {
		t.Errorf("podman's error does not name the unknown device:\n%s", se)
	}
}

// A device that vanished from the node (hot-unplug): the next generate
// drops it, the engine then refuses it by name and keeps serving the rest.
func TestCDIVanishedDevice(t *testing.T) {
	n := e2e.NewFixtureNode(t, "seed002")
	s := n.GenerateSpec(t, e2e.SpecOptions{})
	p := e2e.Podman(t)
	so, se, err := p.Run("--device", s.Device("mlx5_8"), e2e.BB.Ref, "ls", "-l", "/dev/infiniband")
	if err != nil {
		t.Fatalf("before: %v\n%s", err, se)
	}
	e2e.CheckNodes(t, "before =mlx5_8", e2e.ParseLsDev(t, so), e2e.WantNodes(t, n.Topo, "uverbs8", "umad8", "issm8", "rdma_cm"))

	// The PCI function is gone: the HCA and its netdevs with it.
	topo := n.Topo
	gone, _ := topo.DeviceByName("mlx5_8")
	var netdevs []string
	for _, port := range gone.Ports {
		netdevs = append(netdevs, port.NetDev)
	}
	topo.Devices = slices.DeleteFunc(slices.Clone(topo.Devices), func(d fixture.Device) bool { return d.Name == "mlx5_8" })
	topo.NetDevs = slices.DeleteFunc(slices.Clone(topo.NetDevs), func(d fixture.NetDev) bool { return slices.Contains(netdevs, d.Name) })
	if err := n.Rebuild(topo); err != nil {
		t.Fatal(err)
	}
	if _, se, err := s.Generate(t); err != nil {
		t.Fatalf("generate after the removal: %v\n%s", err, se)
	} else if !strings.Contains(se, "9 CDI devices") {
		t.Errorf("generate should rewrite the spec with 8 HCAs + all:\n%s", se)
	}
	if strings.Contains(s.Data(t), "mlx5_8") || strings.Contains(s.Data(t), "uverbs8") {
		t.Errorf("the regenerated spec still has mlx5_8")
	}
	// cdi list (the real binary) agrees with the engine.
	so, se, err = e2e.RDMACDI(t, "--vendor", s.Vendor, "cdi", "list", "--spec-dir", filepath.Dir(s.Path))
	if err != nil {
		t.Fatalf("cdi list: %v\n%s", err, se)
	}
	if strings.Contains(so, s.Device("mlx5_8")) || !strings.Contains(so, s.Device("mlx5_7")) {
		t.Errorf("cdi list after the removal:\n%s", so)
	}

	_, se, err = p.Run("--device", s.Device("mlx5_8"), e2e.BB.Ref, "true")
	if err == nil || !strings.Contains(se, "unresolvable CDI devices") || !strings.Contains(se, s.Device("mlx5_8")) {
		t.Errorf("the vanished device: %v\n%s", err, se)
	}
	so, se, err = p.Run("--device", s.Device("all"), e2e.BB.Ref, "ls", "-l", "/dev/infiniband")
	if err != nil {
		t.Fatalf("=all after the removal: %v\n%s", err, se)
	}
	e2e.CheckNodes(t, "=all after the removal", e2e.ParseLsDev(t, so), e2e.WantNodes(t, topo))
}

// checkPreviousSpecServes asserts the spec file still holds before and
// that podman still starts =mlx5_1 with it (through a link in /var/run/cdi).
func checkPreviousSpecServes(t *testing.T, s *e2e.CDISpec, before string) {
	t.Helper()
	if s.Data(t) != before {
		t.Fatalf("the previous spec changed after a failed write")
	}
	if _, err := cdi.ReadSpec(s.Path, 0); err != nil {
		t.Fatalf("the previous spec no longer parses: %v", err)
	}
	so, se, err := e2e.Podman(t).Run("--device", s.Device("mlx5_1"), e2e.BB.Ref, "ls", "-l", "/dev/infiniband")
	if err != nil {
		t.Fatalf("podman with the previous spec: %v\n%s", err, se)
	}
	e2e.CheckNodes(t, "previous spec =mlx5_1", e2e.ParseLsDev(t, so), e2e.WantNodes(t, s.Node.Topo, e2e.MLX5_1Nodes...))
}

// onlyFiles asserts dir holds exactly names: no temp file left behind.
func onlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("%s holds %v, want %v (a temp file left behind?)", dir, got, names)
	}
}

func TestCDIGenerateIntoReadOnlySpecDir(t *testing.T) {
	mnt := e2e.MountTmpfs(t, "256k")
	s := e2e.SharedFixtureNode(t, "seed002").GenerateSpec(t, e2e.SpecOptions{Path: filepath.Join(mnt, e2e.UniqueVendor(t)+"-hca.yaml")})
	s.LinkInto(t, e2e.CDIDir)
	before := s.Data(t)
	// chmod 0555 does not stop root: the file system itself is read-only.
	e2e.Remount(t, mnt, "ro")
	// A changed setting, so the spec must be rewritten.
	_, se, err := s.Generate(t, "--memlock", "1G")
	if err == nil {
		t.Fatalf("generate into a read-only spec dir succeeded:\n%s", se)
	}
	if !strings.Contains(se, s.Path) || !strings.Contains(se, "read-only file system") {
		t.Errorf("the error does not name the file and the cause:\n%s", se)
	}
	checkPreviousSpecServes(t, s, before)
	onlyFiles(t, mnt, filepath.Base(s.Path))
}

func TestCDIGenerateIntoFullSpecDir(t *testing.T) {
	mnt := e2e.MountTmpfs(t, "64k")
	s := e2e.SharedFixtureNode(t, "seed002").GenerateSpec(t, e2e.SpecOptions{Path: filepath.Join(mnt, e2e.UniqueVendor(t)+"-hca.yaml")})
	s.LinkInto(t, e2e.CDIDir)
	before := s.Data(t)
	fill(t, filepath.Join(mnt, "filler"))
	_, se, err := s.Generate(t, "--memlock", "1G")
	if err == nil {
		t.Fatalf("generate into a full spec dir succeeded:\n%s", se)
	}
	if !strings.Contains(se, s.Path) || !strings.Contains(se, "no space left on device") {
		t.Errorf("the error does not name the file and the cause:\n%s", se)
	}
	checkPreviousSpecServes(t, s, before)
	onlyFiles(t, mnt, filepath.Base(s.Path), "filler")
}

// fill writes path until its file system has no space left.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for i := 0; i < 1<<16; i++ {
		if _, err := f.Write(buf); err != nil {
			if strings.Contains(err.Error(), "no space left") {
				return
			}
			t.Fatal(err)
		}
	}
	t.Fatal("the tmpfs never filled up")
}

// nodeHostPaths parses spec text with the CDI library and returns its device
// nodes' hostPaths (empty ones included) by container path.
func nodeHostPaths(t *testing.T, data string) map[string]string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := cdi.ReadSpec(path, 0)
	if err != nil {
		t.Fatalf("the CDI library rejects the spec: %v", err)
	}
	out := map[string]string{}
	for _, n := range spec.ContainerEdits.DeviceNodes {
		out[n.Path] = n.HostPath
	}
	for _, d := range spec.Devices {
		for _, n := range d.ContainerEdits.DeviceNodes {
			out[n.Path] = n.HostPath
		}
	}
	return out
}

func TestCDIVersions(t *testing.T) {
	n := e2e.SharedFixtureNode(t, "seed002")
	t.Run("0.3.0 with a fixture dev root is refused", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "spec.yaml")
		_, se, err := n.RDMACDI(t, "--cdi-version", "0.3.0", "generate", "--output", out)
		if err == nil {
			t.Fatalf("generate --cdi-version 0.3.0 with --dev-root %s succeeded", n.Dev)
		}
		for _, want := range []string{"spec needs CDI 0.5.0 but --cdi-version caps at 0.3.0", "hostPath", "--dev-root " + n.Dev + " is not /dev"} {
			if !strings.Contains(se, want) {
				t.Errorf("the error lacks %q:\n%s", want, se)
			}
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("a refused spec was written: %v", err)
		}
	})
	// The node's own /dev: the fixture's nodes bound over /dev in a private
	// mount namespace, so the spec's paths are the real /dev/infiniband ones.
	onDev := func(t *testing.T, flags ...string) (string, string, error) {
		unshare := e2e.RequireBinary(t, "unshare")
		args := append(append([]string{"--sysfs-root", n.Sys, "--dev-root", "/dev", "--config", n.Config}, flags...), "generate", "--output", "-")
		script := `mount --bind "$1" /dev && shift && exec "$@"`
		cmd := exec.Command(unshare, append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", n.Dev, e2e.Binary(t, "rdma-cdi")}, args...)...)
		return e2e.Run(cmd)
	}
	t.Run("default on /dev is at most 0.5.0", func(t *testing.T) {
		so, se, err := onDev(t)
		if err != nil {
			t.Fatalf("%v\n%s", err, se)
		}
		if strings.Contains(se, "missing") {
			t.Errorf("device nodes not found under the bound /dev:\n%s", se)
		}
		v := regexp.MustCompile(`(?m)^cdiVersion: (\S+)$`).FindStringSubmatch(so)
		if v == nil {
			t.Fatalf("no cdiVersion in:\n%s", so)
		}
		if v[1] != "0.3.0" && v[1] != "0.4.0" && v[1] != "0.5.0" {
			t.Errorf("cdiVersion %s on /dev paths, want <= 0.5.0 (podman 4.3)", v[1])
		}
		nodes := nodeHostPaths(t, so)
		if len(nodes) != 28 {
			t.Errorf("%d device nodes, want 28", len(nodes))
		}
		for path, host := range nodes {
			if host != "" || !strings.HasPrefix(path, "/dev/infiniband/") {
				t.Errorf("a spec on /dev: node %s hostPath %q, want a /dev/infiniband path and no hostPath", path, host)
			}
		}
	})
	t.Run("0.3.0 on /dev is accepted", func(t *testing.T) {
		so, se, err := onDev(t, "--cdi-version", "0.3.0")
		if err != nil || !strings.Contains(so, "cdiVersion: 0.3.0\n") {
			t.Errorf("%v\n%s\n%s", err, se, so)
		}
	})
}

// The Kubernetes path: kubelet asks containerd's CRI plugin for a container
// with CDI devices, through ContainerConfig.CDIDevices (Kubernetes >= 1.31,
// from a device plugin or DRA) or a cdi.k8s.io/ annotation on the container
// (older device plugins). Either way the spec's devices and hooks apply.
func TestCDICRIDevice(t *testing.T) {
	s := seed002Spec(t)
	checkCRIDevices(t, e2e.CRI(t), s)
}

// checkCRIDevices runs, in one pod of the CRI runtime c, a container given
// mlx5_1 through CDIDevices, one through a cdi.k8s.io annotation, and one
// that asked for nothing.
func checkCRIDevices(t *testing.T, c *e2e.CRIEnv, s *e2e.CDISpec) {
	t.Helper()
	pod, podCfg := c.RunPod(t, e2e.UniqueID("rdma-pod-"))
	for _, tc := range []struct {
		name string
		edit func(*runtimeapi.ContainerConfig)
	}{
		{"CDIDevices", func(cfg *runtimeapi.ContainerConfig) {
			cfg.CDIDevices = []*runtimeapi.CDIDevice{{Name: s.Device("mlx5_1")}}
		}},
		{"annotation", func(cfg *runtimeapi.ContainerConfig) {
			cfg.Annotations = map[string]string{"cdi.k8s.io/rdma": s.Device("mlx5_1")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: e2e.UniqueID("rdma-")},
				Image:    e2e.CRIImage(e2e.BB.Ref),
				Command:  []string{"/bin/sh", "-c", e2e.HookProbe},
			}
			tc.edit(cfg)
			out, code := c.RunContainer(t, pod, podCfg, cfg)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			e2e.CheckHookProbe(t, "cri "+tc.name, s, out)
		})
	}
	t.Run("no device", func(t *testing.T) {
		out, _ := c.RunContainer(t, pod, podCfg, &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: e2e.UniqueID("plain-")},
			Image:    e2e.CRIImage(e2e.BB.Ref),
			Command:  []string{"/bin/sh", "-c", e2e.HookProbe},
		})
		if strings.Contains(out, "uverbs") || strings.Contains(out, "NCCL_IB_HCA") {
			t.Errorf("a container that asked for nothing got RDMA:\n%s", out)
		}
	})
}
