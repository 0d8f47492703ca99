package node

// End-to-end tests of the per-container RDMA user space: an
// image that carries its own stack runs it byte for byte, an image without
// one gets the host's matched set, on every engine the spec serves.

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

func TestUserSpacePodman(t *testing.T) {
	s := seed002Spec(t)
	p := e2e.Podman(t)
	p.Import(t, e2e.OwnStack, e2e.NoProv, e2e.Lib64)
	podmanRun := func(t *testing.T, args ...string) string {
		t.Helper()
		return mustPodman(t, p, append(args, "sh", "-c", e2e.StackProbe)...)
	}
	all := s.Device("all")

	t.Run("own stack runs untouched", func(t *testing.T) {
		e2e.CheckOwnStack(t, "podman", podmanRun(t, "--device", all, e2e.OwnStack.Ref))
	})
	t.Run("glibc without a stack gets the host's", func(t *testing.T) {
		e2e.CheckLent(t, "podman", podmanRun(t, "--device", all, e2e.Glibc.Ref))
	})
	t.Run("lib64 layout without a stack gets the host's", func(t *testing.T) {
		e2e.CheckLent(t, "podman", podmanRun(t, "--device", all, e2e.Lib64.Ref))
	})
	t.Run("libibverbs without providers is not patched", func(t *testing.T) {
		got := e2e.ParseStack(t, podmanRun(t, "--device", all, e2e.NoProv.Ref))
		if want := e2e.ImageSum(t, e2e.NoProv, "libibverbs.so.1"); got.Sums["libibverbs.so.1"] != want || got.Sums["libmlx5.so.1"] != "" || got.ProviderLoaded {
			t.Errorf("the image's libibverbs was patched with host files: %+v", got)
		}
		if log := s.Node.HookLog; !strings.Contains(readFile(t, log), "has no providers in /lib/x86_64-linux-gnu/libibverbs: it sees no HCA (install the image's ibverbs-providers") {
			t.Errorf("the hook log does not say what the image lacks:\n%s", readFile(t, log))
		}
	})
	t.Run("env override host mounts over the image's stack", func(t *testing.T) {
		got := e2e.ParseStack(t, podmanRun(t, "--device", all, "-e", apis.EnvUserSpace+"=host", e2e.OwnStack.Ref))
		want, _ := e2e.HostSums()
		if got.Sums["libibverbs.so.1"] != want["libibverbs.so.1"] || !strings.Contains(got.Probe, "version `MLX5_1.25' not found") {
			t.Errorf("%s=host: want the host's libibverbs and mlx5probe failing on MLX5_1.25: %+v", apis.EnvUserSpace, got)
		}
	})
	t.Run("annotation override image lends nothing", func(t *testing.T) {
		got := e2e.ParseStack(t, podmanRun(t, "--device", all, "--annotation", apis.AnnotationUserSpace+"=image", e2e.Glibc.Ref))
		if got.IBVRC != "127" || got.Sums["libibverbs.so.1"] != "" {
			t.Errorf("%s=image: the host's stack was lent: %+v", apis.AnnotationUserSpace, got)
		}
	})
	t.Run("a bad override refuses the container, naming it", func(t *testing.T) {
		_, se, err := p.Run("--device", all, "-e", apis.EnvUserSpace+"=hots", e2e.Glibc.Ref, "true")
		if err == nil || !strings.Contains(se, `RDMA user-space mode "hots": want auto, host or image`) {
			t.Errorf("err %v, stderr:\n%s", err, se)
		}
	})
	t.Run("restarted container gets the host's again", func(t *testing.T) {
		id := e2e.UniqueID("restart-")
		if _, se, err := p.Podman("create", "--name", id, "--device", all, e2e.Glibc.Ref, "sh", "-c", e2e.StackProbe); err != nil {
			t.Fatalf("%v\n%s", err, se)
		}
		defer p.Podman("rm", "-f", id)
		for i := range 2 {
			so, se, err := p.Podman("start", "--attach", id)
			if err != nil {
				t.Fatalf("start %d: %v\n%s", i, err, se)
			}
			e2e.CheckLent(t, "podman start "+string(rune('1'+i)), so)
		}
	})
	// doctor tells the same, for a running container and for an image root.
	t.Run("doctor explains", func(t *testing.T) {
		id := e2e.UniqueID("doctor-")
		if _, se, err := p.Podman("run", "-d", "--name", id, "--device", all, e2e.OwnStack.Ref, "sleep", "600"); err != nil {
			t.Fatalf("%v\n%s", err, se)
		}
		defer p.Podman("rm", "-f", "--time", "0", id)
		pid, _, err := p.Podman("inspect", "--format", "{{.State.Pid}}", id)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := doctorRun(t, s.Node, e2e.CDIDir, "--pid", strings.TrimSpace(pid))
		if !regexp.MustCompile(`(?m)^PASS user-space: container process \d+ gets its own stack: the image carries libibverbs.so.1 at /lib/x86_64-linux-gnu/libibverbs.so.1`).MatchString(out) {
			t.Errorf("doctor --pid:\n%s", out)
		}
		root := t.TempDir()
		if so, err := exec.Command("tar", "-C", root, "-xf", e2e.NoProv.RootfsTar(t)).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, so)
		}
		out, err = doctorRun(t, s.Node, e2e.CDIDir, "--rootfs", root)
		if err == nil || !regexp.MustCompile(`(?m)^FAIL user-space: image root \S+ gets its own stack: .* has no providers in /lib/x86_64-linux-gnu/libibverbs: it sees no HCA .*\(fix: .*RDMA_CDI_USER_SPACE=host`).MatchString(out) {
			t.Errorf("doctor --rootfs of an image without providers (err %v):\n%s", err, out)
		}
	})
	t.Run("bystander own stack", func(t *testing.T) {
		got := e2e.ParseStack(t, podmanRun(t, e2e.OwnStack.Ref))
		if got.Sums["libibverbs.so.1"] != e2e.ImageSum(t, e2e.OwnStack, "libibverbs.so.1") {
			t.Errorf("a container without a device changed: %+v", got)
		}
	})
}

// bothStacks runs the own-stack image and a stack-less one through run
// on one engine, and checks each for its outcome.
func bothStacks(t *testing.T, engine string, stackless e2e.Image, run func(*testing.T, e2e.Image) string) {
	t.Helper()
	for _, tc := range []struct {
		img   e2e.Image
		check func(*testing.T, string, string)
	}{{e2e.OwnStack, e2e.CheckOwnStack}, {stackless, e2e.CheckLent}} {
		t.Run(tc.img.Name, func(t *testing.T) { tc.check(t, engine, run(t, tc.img)) })
	}
}

// mustPodman is `podman run --rm ARGS` that fails the test when it fails.
func mustPodman(t *testing.T, p *e2e.PodmanEnv, args ...string) string {
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
	d := e2e.Docker29(t)
	bothStacks(t, "docker 29", e2e.Glibc, func(t *testing.T, img e2e.Image) string {
		so, se, code, err := d.RunAPI(e2e.DockerRunSpec{Image: img.Ref, Cmd: []string{"sh", "-c", e2e.StackProbe}, CDIDevices: []string{s.Device("mlx5_1")}})
		if err != nil || code != 0 {
			t.Fatalf("exit %d, %v\nstderr: %s", code, err, se)
		}
		return so
	})
}

func TestUserSpaceContainerd(t *testing.T) {
	s := seed002Spec(t)
	c := e2e.Containerd(t)
	bothStacks(t, "ctr", e2e.Glibc, func(t *testing.T, img e2e.Image) string {
		so, se, err := c.Run("--device", s.Device("mlx5_1"), img.Ref, e2e.UniqueID("us-"), "sh", "-c", e2e.StackProbe)
		if err != nil {
			t.Fatalf("%v\n%s", err, se)
		}
		return so
	})
}

// checkCRIStacks runs the own-stack image and a stack-less one in a pod of
// the CRI runtime c, each given mlx5_1 through ContainerConfig.CDIDevices
// (what the device plugin and DRA ask for).
func checkCRIStacks(t *testing.T, engine string, c *e2e.CRIEnv, s *e2e.CDISpec, stackless e2e.Image) {
	pod, podCfg := c.RunPod(t, e2e.UniqueID("us-pod-"))
	bothStacks(t, engine, stackless, func(t *testing.T, img e2e.Image) string {
		out, code := c.RunContainer(t, pod, podCfg, &runtimeapi.ContainerConfig{
			Metadata:   &runtimeapi.ContainerMetadata{Name: e2e.UniqueID("us-")},
			Image:      e2e.CRIImage(img.Ref),
			Command:    []string{"sh", "-c", e2e.StackProbe},
			CDIDevices: []*runtimeapi.CDIDevice{{Name: s.Device("mlx5_1")}},
		})
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		return out
	})
}

func TestUserSpaceCRI(t *testing.T) {
	checkCRIStacks(t, "containerd CRI", e2e.CRI(t), seed002Spec(t), e2e.Lib64)
}

func TestUserSpaceCRIO(t *testing.T) {
	checkCRIStacks(t, "CRI-O", e2e.CRIO(t, e2e.CRIOOptions{}), seed002Spec(t), e2e.Glibc)
}

// The runtime wrapper (engines without CDI) applies the same spec, hook
// included, to a container that asks through RDMA_VISIBLE_DEVICES.
func TestUserSpaceRuntimeWrapper(t *testing.T) {
	s := newRDMASetup(t)
	p := e2e.Podman(t)
	p.Import(t, e2e.OwnStack)
	rt := wrapperRuntime(t, s, s.config)
	bothStacks(t, "runtime wrapper", e2e.Glibc, func(t *testing.T, img e2e.Image) string {
		return mustPodman(t, p, "--runtime", rt, "-e", "RDMA_VISIBLE_DEVICES=all", img.Ref, "sh", "-c", e2e.StackProbe)
	})
}

// In a user-namespaced container the hook (the host's root) lends into a
// mount namespace the container's user namespace owns.
func TestUserSpaceUserNamespaced(t *testing.T) {
	s := usernsHookSetup(t)
	p := e2e.Podman(t)
	p.Import(t, e2e.OwnStack)
	bothStacks(t, "podman --uidmap", e2e.Glibc, func(t *testing.T, img e2e.Image) string {
		so, se, err := e2e.Run(usernsPodman(t, p, s, "mlx5_1", img.Ref, "sh", "-c", e2e.StackProbe))
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
	base := e2e.Podman(t)
	base.Import(t, e2e.OwnStack)
	p := base.WithHooksDir(s.hooksDir(t, `{"always":true}`))
	bothStacks(t, "podman precreate", e2e.Glibc, func(t *testing.T, img e2e.Image) string {
		return mustPodman(t, p, "-e", "RDMA_VISIBLE_DEVICES=all", img.Ref, "sh", "-c", e2e.StackProbe)
	})
}
