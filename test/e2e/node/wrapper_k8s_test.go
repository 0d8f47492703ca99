package node

// The runtime wrapper's request rules by who asks (SECURITY.md, "The
// runtime wrapper"): under Kubernetes a container's own env and annotations
// are no request by default, the devices the kubelet placed are; on a plain
// engine every request counts. The wrapper runs as a RuntimeClass handler
// of containerd 2.4's CRI plugin and of CRI-O 1.34, driven through the CRI
// API as the kubelet drives them, and as a plain runc's runtime; each
// container's config.json is kept as the engine wrote it (before) and as
// runc got it (after).

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/runtimewrap"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// k8sWrapper is the wrapper as a CRI handler's runtime binary: a script
// that keeps a copy of each config.json it is asked to create, under
// before/ID.json, and execs the wrapper with config (the engines pass the
// runtime no environment of the test's). The wrapper's runtime is the
// recorder, which keeps the config runc gets under rec/ID.json.
func (s *rdmaSetup) k8sWrapper(t *testing.T, config string) string {
	t.Helper()
	env := fmt.Sprintf("export %s=%q %s=%q %s=%q", runtimewrap.EnvConfig, config, runtimewrap.EnvSysfsRoot, s.sys, runtimewrap.EnvDevRoot, s.dev)
	return writeRecordingRuntime(t, filepath.Join(s.dir, "k8s-wrapper-"+e2e.UniqueID("")), env, filepath.Join(s.dir, "before"), s.wrapperBinary(t))
}

// acceptingConfig is s.config with [runtime] lines added.
func (s *rdmaSetup) acceptingConfig(t *testing.T, lines string) string {
	t.Helper()
	data, err := os.ReadFile(s.config)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(data), "[runtime]\n", "[runtime]\n"+lines, 1)
	path := filepath.Join(s.dir, "config-"+e2e.UniqueID("")+".toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// configsOf returns the config.json of the container whose env holds mark,
// as its engine wrote it and as runc got it.
func (s *rdmaSetup) configsOf(t *testing.T, mark string) (before, after []byte) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(s.dir, "before", "*.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(data), mark) {
			continue
		}
		after, err := os.ReadFile(filepath.Join(s.dir, "rec", filepath.Base(f)))
		if err != nil {
			t.Fatalf("runc got no config for %s: %v", filepath.Base(f), err)
		}
		return data, after
	}
	t.Fatalf("no config.json with %s reached the wrapper", mark)
	return nil, nil
}

func decodeSpec(t *testing.T, data []byte) *specs.Spec {
	t.Helper()
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatalf("config.json: %v", err)
	}
	return &spec
}

// k8sProbe runs the probe in a container of pod with env and CDI devices,
// as the kubelet asks: env from the pod spec, CDI devices from a device
// plugin's or DRA's allocation. It returns what the probe saw and the
// container's config.json before and after the wrapper.
func (s *rdmaSetup) k8sProbe(t *testing.T, c *e2e.CRIEnv, pod string, podCfg *runtimeapi.PodSandboxConfig, env map[string]string, cdiDevices ...string) (probed, []byte, []byte) {
	t.Helper()
	mark := e2e.UniqueID("mark-")
	envs := []*runtimeapi.KeyValue{{Key: "E2E_MARK", Value: []byte(mark)}}
	for k, v := range env {
		envs = append(envs, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
	}
	var devices []*runtimeapi.CDIDevice
	for _, d := range cdiDevices {
		devices = append(devices, &runtimeapi.CDIDevice{Name: s.vendor + "/hca=" + d})
	}
	out, code := c.RunContainer(t, pod, podCfg, &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: e2e.UniqueID("c-")},
		Image:      e2e.CRIImage(e2e.Glibc.Ref),
		Command:    []string{"sh", "-c", e2e.Probe},
		Envs:       envs,
		CDIDevices: devices,
		Mounts:     []*runtimeapi.Mount{{ContainerPath: "/mlock", HostPath: s.mlock, Readonly: true}},
	})
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	before, after := s.configsOf(t, mark)
	return parseProbe(t, out), before, after
}

// checkUntouched asserts a Kubernetes container's own request got nothing:
// runc started the config.json its engine wrote, byte for byte, and the
// wrapper's log named what it ignored and the switch.
func (s *rdmaSetup) checkUntouched(t *testing.T, p probed, before, after []byte, logged ...string) {
	t.Helper()
	checkNothing(t, p)
	if string(before) != string(after) {
		t.Errorf("config.json changed by the wrapper:\nbefore %s\nafter  %s", before, after)
	}
	log, _ := os.ReadFile(filepath.Join(s.dir, "runtime.log"))
	for _, want := range logged {
		if !strings.Contains(string(log), want) {
			t.Errorf("the wrapper's log does not name %q:\n%s", want, e2e.TailString(string(log), 3000))
		}
	}
}

func TestWrapperKubernetesRequests(t *testing.T) {
	s := newRDMASetup(t)
	accepting := s.acceptingConfig(t, "kubernetes_accept_env = true\nkubernetes_accept_annotations = true\n")
	own := s.vendor + "/devices"

	// containerd 2.4's CRI plugin with the handler of deploy/containerd
	// (BinaryName = the wrapper), letting the pod's <vendor>/* annotations
	// through (pod_annotations) as a site would for RuntimeClass rdma.
	t.Run("containerd", func(t *testing.T) {
		handlers := ""
		for name, config := range map[string]string{"rdma": s.config, "rdma-accept": accepting} {
			handlers += fmt.Sprintf(`
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%s]
  runtime_type = "io.containerd.runc.v2"
  pod_annotations = [%q]
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%s.options]
    BinaryName = %q
    SystemdCgroup = false
`, name, s.vendor+"/*", name, s.k8sWrapper(t, config))
		}
		e := e2e.ContainerdWith(t, e2e.ContainerdOptions{CRI: true, ExtraConfig: e2e.CRIConfig + handlers})
		if err := e.ImportImages(e2e.CRINamespace, e2e.Glibc.DockerArchive(t), e2e.Pause.DockerArchive(t)); err != nil {
			t.Fatal(err)
		}
		c := e2e.NewCRIEnv(t, e.Socket, e.Log)
		pod, podCfg := c.RunPodAnnotated(t, e2e.UniqueID("tenant-"), "rdma", map[string]string{own: "all"})

		t.Run("env all and a pod annotation: nothing, config unchanged", func(t *testing.T) {
			p, before, after := s.k8sProbe(t, c, pod, podCfg, map[string]string{"RDMA_VISIBLE_DEVICES": "all"})
			// What containerd really writes: its CRI annotations, the
			// pod's env, and the pod annotation let through.
			spec := decodeSpec(t, before)
			if _, ok := spec.Annotations["io.kubernetes.cri.sandbox-id"]; !ok || spec.Annotations[own] != "all" || !slices.Contains(spec.Process.Env, "RDMA_VISIBLE_DEVICES=all") {
				t.Fatalf("containerd's config.json: annotations %v, env %v", spec.Annotations, spec.Process.Env)
			}
			s.checkUntouched(t, p, before, after, "containerd's CRI annotation", "env RDMA_VISIBLE_DEVICES (all; accepted with runtime.kubernetes_accept_env = true)",
				"annotation "+own+" (all; accepted with runtime.kubernetes_accept_annotations = true)")
		})
		// A device plugin's or DRA's allocation: the runtime applied the
		// CDI spec; the wrapper adds CAP_IPC_LOCK, memlock and NCCL env,
		// and the env asking for all adds no other HCA.
		t.Run("devices the kubelet placed: CAP_IPC_LOCK and memlock as before", func(t *testing.T) {
			p, _, _ := s.k8sProbe(t, c, pod, podCfg, map[string]string{"RDMA_VISIBLE_DEVICES": "all"}, "mlx5_1")
			s.checkRDMA(t, p, []int{1})
		})
		t.Run("kubernetes_accept_env: the env asks again", func(t *testing.T) {
			pod, podCfg := c.RunPodAnnotated(t, e2e.UniqueID("tenant-"), "rdma-accept", nil)
			p, _, _ := s.k8sProbe(t, c, pod, podCfg, map[string]string{"RDMA_VISIBLE_DEVICES": "mlx5_2,mlx5_3"})
			s.checkRDMA(t, p, []int{2, 3})
		})
	})

	// CRI-O 1.34 with the shipped deploy/crio/10-rdma.conf: it copies the
	// pod's own annotations into every container's config.json.
	t.Run("CRI-O", func(t *testing.T) {
		runcRoot := filepath.Join(s.dir, "runc-root")
		accept := fmt.Sprintf("[crio.runtime.runtimes.rdma-accept]\nruntime_path = %q\nruntime_type = \"oci\"\nruntime_root = %q\n", s.k8sWrapper(t, accepting), runcRoot)
		c := e2e.CRIO(t, e2e.CRIOOptions{DropIns: map[string]string{
			"10-rdma.conf":        e2e.CRIORuntimeHandler(t, s.k8sWrapper(t, s.config), runcRoot, nil),
			"11-rdma-accept.conf": accept,
		}})
		podAnnotations := map[string]string{own: "all", "cdi.k8s.io/rdma": s.vendor + "/hca=mlx5_3"}
		pod, podCfg := c.RunPodAnnotated(t, e2e.UniqueID("tenant-"), "rdma", podAnnotations)

		t.Run("copied pod annotations: nothing, config unchanged", func(t *testing.T) {
			p, before, after := s.k8sProbe(t, c, pod, podCfg, nil)
			// What CRI-O really writes: its own annotations and the pod's,
			// copied.
			spec := decodeSpec(t, before)
			if _, ok := spec.Annotations["io.kubernetes.cri-o.Metadata"]; !ok || spec.Annotations[own] != "all" || spec.Annotations["cdi.k8s.io/rdma"] != podAnnotations["cdi.k8s.io/rdma"] {
				t.Fatalf("CRI-O's config.json: annotations %v", spec.Annotations)
			}
			s.checkUntouched(t, p, before, after, "CRI-O annotation", "annotation "+own+" (all; accepted with runtime.kubernetes_accept_annotations = true)",
				"annotation cdi.k8s.io/rdma (mlx5_3; accepted with runtime.kubernetes_accept_annotations = true)")
		})
		t.Run("env all: nothing, config unchanged", func(t *testing.T) {
			p, before, after := s.k8sProbe(t, c, pod, podCfg, map[string]string{"RDMA_VISIBLE_DEVICES": "all"})
			s.checkUntouched(t, p, before, after, "env RDMA_VISIBLE_DEVICES (all; accepted with runtime.kubernetes_accept_env = true)")
		})
		t.Run("devices the kubelet placed: CAP_IPC_LOCK and memlock as before", func(t *testing.T) {
			p, _, _ := s.k8sProbe(t, c, pod, podCfg, nil, "mlx5_1")
			s.checkRDMA(t, p, []int{1})
		})
		t.Run("kubernetes_accept_annotations: the pod annotation asks again", func(t *testing.T) {
			pod, podCfg := c.RunPodAnnotated(t, e2e.UniqueID("tenant-"), "rdma-accept", map[string]string{own: "mlx5_1,mlx5_2"})
			p, _, _ := s.k8sProbe(t, c, pod, podCfg, nil)
			s.checkRDMA(t, p, []int{1, 2})
		})
	})

	// No CRI annotation: the engine's user asks, as with Docker and podman.
	t.Run("plain runc: the env asks", func(t *testing.T) {
		r := e2e.Runc(t)
		b := r.Bundle(t, e2e.Glibc)
		b.Spec.Process.Args = []string{"sh", "-c", e2e.Probe}
		b.Spec.Process.Env = append(b.Spec.Process.Env, "RDMA_VISIBLE_DEVICES=mlx5_4,mlx5_5")
		b.Spec.Mounts = append(b.Spec.Mounts, specs.Mount{Destination: "/mlock", Source: s.mlock, Type: "bind", Options: []string{"rbind", "ro"}})
		if err := b.Save(); err != nil {
			t.Fatal(err)
		}
		id := e2e.UniqueID("plain-")
		t.Cleanup(func() { _, _, _ = e2e.Run(r.Command("delete", "--force", id)) })
		cmd := exec.Command(s.wrapperBinary(t), "--root", r.Root, "run", "--bundle", b.Dir, id)
		cmd.Env = append(os.Environ(), runtimewrap.EnvConfig+"="+s.config, runtimewrap.EnvSysfsRoot+"="+s.sys, runtimewrap.EnvDevRoot+"="+s.dev)
		out, se, err := e2e.Run(cmd)
		if err != nil {
			t.Fatalf("%v\n%s%s", err, out, se)
		}
		s.checkRDMA(t, parseProbe(t, out), []int{4, 5})
	})
}
