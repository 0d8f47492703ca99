package e2e

// End-to-end tests of the per-container RDMA user space: an
// image that carries its own stack runs it byte for byte, an image without
// one gets the host's matched set, on every engine the spec serves.

import (
	"archive/tar"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
)

const stackLibDir = "/usr/lib/x86_64-linux-gnu"

// stackProbe prints, in any of the test images: the checksums of the
// libibverbs and libmlx5 the linker's names lead to, mlx5probe's line,
// ibv_devices' exit status (0 or 1: libibverbs loaded and asked the
// kernel, which has no InfiniBand here; 127: not loadable), and whether
// the mlx5 provider is registered and all its libraries resolve.
const stackProbe = `L=` + stackLibDir + `
for f in libibverbs.so.1 libmlx5.so.1; do echo "sum $f $(md5sum < $L/$f 2>/dev/null | cut -c1-32)"; done
echo "probe: $(mlx5probe 2>&1 | head -n1)"
ibv_devices >/dev/null 2>&1; echo "ibv_devices_rc=$?"
p=$L/libibverbs/libmlx5-rdmav34.so
if [ -e /etc/libibverbs.d/mlx5.driver ] && [ -e $p ] && ! /lib64/ld-linux-x86-64.so.2 --list $p 2>&1 | grep -q 'not found'; then echo provider=ok; else echo provider=missing; fi
`

// stackSeen is stackProbe's output.
type stackSeen struct {
	sums           map[string]string // library name -> md5 ("" when absent)
	probe, ibvRC   string
	providerLoaded bool
	raw            string
}

var ibvRCLine = regexp.MustCompile(`(?m)^ibv_devices_rc=(\d+)$`)

func parseStack(t *testing.T, out string) stackSeen {
	t.Helper()
	s := stackSeen{sums: map[string]string{}, raw: out, providerLoaded: strings.Contains(out, "\nprovider=ok")}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "sum" {
			s.sums[f[1]] = strings.Join(f[2:], "")
		}
		if v, ok := strings.CutPrefix(line, "probe: "); ok {
			s.probe = v
		}
	}
	m := ibvRCLine.FindStringSubmatch(out)
	if m == nil || len(s.sums) != 2 {
		t.Fatalf("not stackProbe's output:\n%s", out)
	}
	s.ibvRC = m[1]
	return s
}

func (s stackSeen) libibverbsLoads() bool { return s.ibvRC == "0" || s.ibvRC == "1" }

// hostSums are the checksums of the host's libibverbs and libmlx5.
var hostSums = sync.OnceValues(func() (map[string]string, error) {
	out := map[string]string{}
	for _, lib := range []string{"libibverbs.so.1", "libmlx5.so.1"} {
		data, err := os.ReadFile(path.Join(stackLibDir, lib))
		if err != nil {
			return nil, err
		}
		sum := md5.Sum(data)
		out[lib] = hex.EncodeToString(sum[:])
	}
	return out, nil
})

// imageSum is the md5 of the file name leads to in an image's rootfs tar,
// following the image's own relative links.
func imageSum(t *testing.T, img Image, name string) string {
	t.Helper()
	f, err := os.Open(img.RootfsTar(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	links, files := map[string]string{}, map[string]string{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := path.Clean("/" + h.Name)
		switch h.Typeflag {
		case tar.TypeSymlink:
			links[p] = h.Linkname
		case tar.TypeReg:
			if path.Dir(p) == stackLibDir {
				sum := md5.New()
				if _, err := io.Copy(sum, tr); err != nil {
					t.Fatal(err)
				}
				files[p] = hex.EncodeToString(sum.Sum(nil))
			}
		}
	}
	p := path.Join(stackLibDir, name)
	for range 8 {
		target, ok := links[p]
		if !ok {
			break
		}
		p = path.Join(path.Dir(p), target)
	}
	if files[p] == "" {
		t.Fatalf("%s: %s leads to %s, which is not a file of the image", img.Name, name, p)
	}
	return files[p]
}

// checkOwnStack: the image's own files, byte for byte, and a program that
// needs their newer ABI starts.
func checkOwnStack(t *testing.T, engine string, out string) {
	t.Helper()
	s := parseStack(t, out)
	for _, lib := range []string{"libibverbs.so.1", "libmlx5.so.1"} {
		if want := imageSum(t, OwnStack, lib); s.sums[lib] != want {
			t.Errorf("%s: %s in the container is %q, not the image's own %s:\n%s", engine, lib, s.sums[lib], want, out)
		}
	}
	if !strings.HasPrefix(s.probe, "mlx5probe: MLX5_1.25 resolved") {
		t.Errorf("%s: mlx5probe does not start on the image's own libmlx5: %s", engine, s.probe)
	}
	if !s.libibverbsLoads() || !s.providerLoaded {
		t.Errorf("%s: the image's own stack does not load (ibv_devices %s, provider %v):\n%s", engine, s.ibvRC, s.providerLoaded, out)
	}
}

// checkLent: an image without a stack loads the host's libibverbs and
// sees the host's mlx5 provider.
func checkLent(t *testing.T, engine string, out string) {
	t.Helper()
	s := parseStack(t, out)
	want, err := hostSums()
	if err != nil {
		t.Fatal(err)
	}
	for lib, sum := range want {
		if s.sums[lib] != sum {
			t.Errorf("%s: %s in the container is %q, not the host's %s:\n%s", engine, lib, s.sums[lib], sum, out)
		}
	}
	if !s.libibverbsLoads() || !s.providerLoaded {
		t.Errorf("%s: the lent stack does not load (ibv_devices %s, provider %v):\n%s", engine, s.ibvRC, s.providerLoaded, out)
	}
}

func TestUserSpacePodman(t *testing.T) {
	s := seed002Spec(t)
	p := Podman(t)
	p.Import(t, OwnStack, NoProv, Lib64)
	podmanRun := func(t *testing.T, args ...string) string {
		t.Helper()
		return mustPodman(t, p, append(args, "sh", "-c", stackProbe)...)
	}
	all := s.Device("all")

	t.Run("own stack runs untouched", func(t *testing.T) {
		checkOwnStack(t, "podman", podmanRun(t, "--device", all, OwnStack.Ref))
	})
	t.Run("glibc without a stack gets the host's", func(t *testing.T) {
		checkLent(t, "podman", podmanRun(t, "--device", all, Glibc.Ref))
	})
	t.Run("lib64 layout without a stack gets the host's", func(t *testing.T) {
		checkLent(t, "podman", podmanRun(t, "--device", all, Lib64.Ref))
	})
	t.Run("libibverbs without providers is not patched", func(t *testing.T) {
		got := parseStack(t, podmanRun(t, "--device", all, NoProv.Ref))
		if want := imageSum(t, NoProv, "libibverbs.so.1"); got.sums["libibverbs.so.1"] != want || got.sums["libmlx5.so.1"] != "" || got.providerLoaded {
			t.Errorf("the image's libibverbs was patched with host files: %+v", got)
		}
		if log := s.Node.HookLog; !strings.Contains(readFile(t, log), "has no providers in /lib/x86_64-linux-gnu/libibverbs: it sees no HCA (install the image's ibverbs-providers") {
			t.Errorf("the hook log does not say what the image lacks:\n%s", readFile(t, log))
		}
	})
	t.Run("env override host mounts over the image's stack", func(t *testing.T) {
		got := parseStack(t, podmanRun(t, "--device", all, "-e", apis.EnvUserSpace+"=host", OwnStack.Ref))
		want, _ := hostSums()
		if got.sums["libibverbs.so.1"] != want["libibverbs.so.1"] || !strings.Contains(got.probe, "version `MLX5_1.25' not found") {
			t.Errorf("%s=host: want the host's libibverbs and mlx5probe failing on MLX5_1.25: %+v", apis.EnvUserSpace, got)
		}
	})
	t.Run("annotation override image lends nothing", func(t *testing.T) {
		got := parseStack(t, podmanRun(t, "--device", all, "--annotation", apis.AnnotationUserSpace+"=image", Glibc.Ref))
		if got.ibvRC != "127" || got.sums["libibverbs.so.1"] != "" {
			t.Errorf("%s=image: the host's stack was lent: %+v", apis.AnnotationUserSpace, got)
		}
	})
	t.Run("a bad override refuses the container, naming it", func(t *testing.T) {
		_, se, err := p.Run("--device", all, "-e", apis.EnvUserSpace+"=hots", Glibc.Ref, "true")
		if err == nil || !strings.Contains(se, `RDMA user-space mode "hots": want auto, host or image`) {
			t.Errorf("err %v, stderr:\n%s", err, se)
		}
	})
	t.Run("restarted container gets the host's again", func(t *testing.T) {
		id := UniqueID("restart-")
		if _, se, err := p.Podman("create", "--name", id, "--device", all, Glibc.Ref, "sh", "-c", stackProbe); err != nil {
			t.Fatalf("%v\n%s", err, se)
		}
		defer p.Podman("rm", "-f", id)
		for i := range 2 {
			so, se, err := p.Podman("start", "--attach", id)
			if err != nil {
				t.Fatalf("start %d: %v\n%s", i, err, se)
			}
			checkLent(t, "podman start "+string(rune('1'+i)), so)
		}
	})
	// doctor tells the same, for a running container and for an image root.
	t.Run("doctor explains", func(t *testing.T) {
		id := UniqueID("doctor-")
		if _, se, err := p.Podman("run", "-d", "--name", id, "--device", all, OwnStack.Ref, "sleep", "600"); err != nil {
			t.Fatalf("%v\n%s", err, se)
		}
		defer p.Podman("rm", "-f", "--time", "0", id)
		pid, _, err := p.Podman("inspect", "--format", "{{.State.Pid}}", id)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := doctorRun(t, s.Node, CDIDir, "--pid", strings.TrimSpace(pid))
		if !regexp.MustCompile(`(?m)^PASS user-space: container process \d+ gets its own stack: the image carries libibverbs.so.1 at /lib/x86_64-linux-gnu/libibverbs.so.1`).MatchString(out) {
			t.Errorf("doctor --pid:\n%s", out)
		}
		root := t.TempDir()
		if so, err := exec.Command("tar", "-C", root, "-xf", NoProv.RootfsTar(t)).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, so)
		}
		out, err = doctorRun(t, s.Node, CDIDir, "--rootfs", root)
		if err == nil || !regexp.MustCompile(`(?m)^FAIL user-space: image root \S+ gets its own stack: .* has no providers in /lib/x86_64-linux-gnu/libibverbs: it sees no HCA .*\(fix: .*RDMA_CDI_USER_SPACE=host`).MatchString(out) {
			t.Errorf("doctor --rootfs of an image without providers (err %v):\n%s", err, out)
		}
	})
	t.Run("bystander own stack", func(t *testing.T) {
		got := parseStack(t, podmanRun(t, OwnStack.Ref))
		if got.sums["libibverbs.so.1"] != imageSum(t, OwnStack, "libibverbs.so.1") {
			t.Errorf("a container without a device changed: %+v", got)
		}
	})
}

// bothStacks runs the own-stack image and a stack-less one through run
// on one engine, and checks each for its outcome.
func bothStacks(t *testing.T, engine string, stackless Image, run func(*testing.T, Image) string) {
	t.Helper()
	for _, tc := range []struct {
		img   Image
		check func(*testing.T, string, string)
	}{{OwnStack, checkOwnStack}, {stackless, checkLent}} {
		t.Run(tc.img.Name, func(t *testing.T) { tc.check(t, engine, run(t, tc.img)) })
	}
}

// mustPodman is `podman run --rm ARGS` that fails the test when it fails.
func mustPodman(t *testing.T, p *PodmanEnv, args ...string) string {
	t.Helper()
	so, se, err := p.Run(args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, se)
	}
	return so
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestUserSpaceDocker29(t *testing.T) {
	s := seed002Spec(t)
	d := Docker29(t)
	bothStacks(t, "docker 29", Glibc, func(t *testing.T, img Image) string {
		so, se, code, err := d.RunAPI(DockerRunSpec{Image: img.Ref, Cmd: []string{"sh", "-c", stackProbe}, CDIDevices: []string{s.Device("mlx5_1")}})
		if err != nil || code != 0 {
			t.Fatalf("exit %d, %v\nstderr: %s", code, err, se)
		}
		return so
	})
}

func TestUserSpaceContainerd(t *testing.T) {
	s := seed002Spec(t)
	c := Containerd(t)
	bothStacks(t, "ctr", Glibc, func(t *testing.T, img Image) string {
		so, se, err := c.Run("--device", s.Device("mlx5_1"), img.Ref, UniqueID("us-"), "sh", "-c", stackProbe)
		if err != nil {
			t.Fatalf("%v\n%s", err, se)
		}
		return so
	})
}

// checkCRIStacks runs the own-stack image and a stack-less one in a pod of
// the CRI runtime c, each given mlx5_1 through ContainerConfig.CDIDevices
// (what the device plugin and DRA ask for).
func checkCRIStacks(t *testing.T, engine string, c *CRIEnv, s *CDISpec, stackless Image) {
	pod, podCfg := c.RunPod(t, UniqueID("us-pod-"))
	bothStacks(t, engine, stackless, func(t *testing.T, img Image) string {
		out, code := c.RunContainer(t, pod, podCfg, &runtimeapi.ContainerConfig{
			Metadata:   &runtimeapi.ContainerMetadata{Name: UniqueID("us-")},
			Image:      criImage(img.Ref),
			Command:    []string{"sh", "-c", stackProbe},
			CDIDevices: []*runtimeapi.CDIDevice{{Name: s.Device("mlx5_1")}},
		})
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		return out
	})
}

func TestUserSpaceCRI(t *testing.T) {
	checkCRIStacks(t, "containerd CRI", CRI(t), seed002Spec(t), Lib64)
}

func TestUserSpaceCRIO(t *testing.T) {
	checkCRIStacks(t, "CRI-O", CRIO(t, CRIOOptions{}), seed002Spec(t), Glibc)
}

// The runtime wrapper (engines without CDI) applies the same spec, hook
// included, to a container that asks through RDMA_VISIBLE_DEVICES.
func TestUserSpaceRuntimeWrapper(t *testing.T) {
	s := newRDMASetup(t)
	p := Podman(t)
	p.Import(t, OwnStack)
	rt := wrapperRuntime(t, s, s.config)
	bothStacks(t, "runtime wrapper", Glibc, func(t *testing.T, img Image) string {
		return mustPodman(t, p, "--runtime", rt, "-e", "RDMA_VISIBLE_DEVICES=all", img.Ref, "sh", "-c", stackProbe)
	})
}

// In a user-namespaced container the hook (the host's root) lends into a
// mount namespace the container's user namespace owns.
func TestUserSpaceUserNamespaced(t *testing.T) {
	s := usernsHookSetup(t)
	p := Podman(t)
	p.Import(t, OwnStack)
	bothStacks(t, "podman --uidmap", Glibc, func(t *testing.T, img Image) string {
		so, se, err := run(usernsPodman(t, p, s, "mlx5_1", img.Ref, "sh", "-c", stackProbe))
		if err != nil {
			t.Fatalf("%v\n%s\nhook log:\n%s", err, se, s.hookLog())
		}
		return so
	})
}

// podman's precreate hook applies the spec's edits, its hook included, to
// a container that asks through its env.
func TestUserSpacePrecreate(t *testing.T) {
	s := newRDMASetup(t)
	base := Podman(t)
	base.Import(t, OwnStack)
	p := base.WithHooksDir(s.hooksDir(t, `{"always":true}`))
	bothStacks(t, "podman precreate", Glibc, func(t *testing.T, img Image) string {
		return mustPodman(t, p, "-e", "RDMA_VISIBLE_DEVICES=all", img.Ref, "sh", "-c", stackProbe)
	})
}

// Through Kubernetes: the own-stack image and a stack-less one as pods
// asking rdma/hca: 1 from the device plugin, and through a ResourceClaim
// from the DRA driver, on seed 002's node with the shipped DaemonSets.
func TestKubeUserSpace(t *testing.T) {
	node := SharedFixtureNode(t, "seed002")
	for _, tc := range []struct {
		name            string
		start           func(*testing.T) *KubeEnv
		podSpec, limits string
		setup           func(*testing.T, *KubeEnv, string)
	}{
		{
			name:   "device plugin",
			start:  func(t *testing.T) *KubeEnv { return devicePluginNode(t, node, "1000", "8") },
			limits: "\n      resources:\n        limits:\n          " + sharedResource + ": 1",
		},
		{
			name:    "DRA",
			start:   func(t *testing.T) *KubeEnv { return draNode(t, node, 9) },
			podSpec: "\n  resourceClaims:\n    - name: rdma\n      resourceClaimTemplateName: one-hca",
			limits:  "\n      resources:\n        claims:\n          - name: rdma",
			setup:   func(t *testing.T, k *KubeEnv, ns string) { k.Apply(t, exampleTemplates(t, ns)) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := tc.start(t)
			k.ImportImage(t, OwnStack.DockerArchive(t), OwnStack.Ref)
			ns := UniqueID("userspace-")
			k.Apply(t, namespaceManifest(ns))
			if tc.setup != nil {
				tc.setup(t, k, ns)
			}
			k.Apply(t, podManifest(ns, "own", OwnStack, tc.podSpec, tc.limits)+"---\n"+podManifest(ns, "lent", Glibc, tc.podSpec, tc.limits))
			for _, pod := range []struct {
				name  string
				check func(*testing.T, string, string)
			}{{"own", checkOwnStack}, {"lent", checkLent}} {
				k.WaitPod(t, ns, pod.name, "Ready", 2*time.Minute)
				pod.check(t, tc.name+" pod", k.MustExecInPod(t, ns, pod.name, "main", "/bin/sh", "-c", stackProbe))
			}
		})
	}
}
