package ociedit

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// containerdCRI are the annotations containerd 2.x's CRI plugin writes into
// every container's config.json (internal/cri/annotations,
// DefaultCRIAnnotations); a pod's own annotations reach it only where the
// runtime handler's pod_annotations lets them through.
func containerdCRI(more map[string]string) map[string]string {
	a := map[string]string{
		"io.kubernetes.cri.container-type":    "container",
		"io.kubernetes.cri.sandbox-id":        "4f2a",
		"io.kubernetes.cri.sandbox-namespace": "tenant",
		"io.kubernetes.cri.sandbox-uid":       "0c3e8a8e-5a3c-4a5c-9b1e-1f2d3c4b5a69",
		"io.kubernetes.cri.sandbox-name":      "trainer",
		"io.kubernetes.cri.container-name":    "nccl",
		"io.kubernetes.cri.image-name":        "nvcr.io/nvidia/pytorch:24.05-py3",
	}
	maps.Copy(a, more)
	return a
}

// crio are the annotations CRI-O 1.34 writes (SpecAddAnnotations): its
// own, then the pod's annotations copied (pod), as a tenant wrote them.
func crio(pod map[string]string) map[string]string {
	a := map[string]string{
		"io.container.manager":               "cri-o",
		"io.kubernetes.cri-o.Annotations":    `{"io.kubernetes.container.hash":"9a1b"}`,
		"io.kubernetes.cri-o.ContainerID":    "7d1c",
		"io.kubernetes.cri-o.ContainerType":  "container",
		"io.kubernetes.cri-o.Created":        "2026-05-01T10:00:00Z",
		"io.kubernetes.cri-o.Labels":         `{"io.kubernetes.pod.name":"trainer"}`,
		"io.kubernetes.cri-o.LogPath":        "/var/log/pods/tenant_trainer_0c3e/nccl/0.log",
		"io.kubernetes.cri-o.Metadata":       `{"name":"nccl"}`,
		"io.kubernetes.cri-o.Name":           "k8s_nccl_trainer_tenant_0c3e_0",
		"io.kubernetes.cri-o.SandboxID":      "4f2a",
		"io.kubernetes.cri-o.SandboxName":    "k8s_trainer_tenant_0c3e_0",
		"io.kubernetes.cri-o.TTY":            "false",
		"io.kubernetes.container.hash":       "9a1b",
		"io.kubernetes.pod.name":             "trainer",
		"io.kubernetes.pod.namespace":        "tenant",
		"io.kubernetes.pod.terminationGrace": "30",
	}
	maps.Copy(a, pod)
	return a
}

// podmanInPod are the annotations podman 4.3 writes for a container of a
// pod (seen in its precreate input): CRI-O's ContainerType and SandboxID
// among them, for Kata. podman is a plain engine.
func podmanInPod(more map[string]string) map[string]string {
	a := map[string]string{
		"io.container.manager":              "libpod",
		"io.kubernetes.cri-o.ContainerType": "container",
		"io.kubernetes.cri-o.Created":       "2026-05-01T10:00:00Z",
		"io.kubernetes.cri-o.SandboxID":     "d376cfd0fdc5",
		"io.kubernetes.cri-o.TTY":           "false",
		"io.podman.annotations.autoremove":  "TRUE",
	}
	maps.Copy(a, more)
	return a
}

// The finding: a Kubernetes container asking through its env or a copied
// pod annotation got every HCA and CAP_IPC_LOCK. Under Kubernetes, by
// default, only devices placed by the kubelet's allocation count.
func TestKubernetesEnvAndAnnotationRequestsIgnored(t *testing.T) {
	e := defaultEditor(t)
	for name, s := range map[string]*specs.Spec{
		"containerd, env all": func() *specs.Spec {
			s := baseSpec("RDMA_VISIBLE_DEVICES=all")
			s.Annotations = containerdCRI(nil)
			return s
		}(),
		"containerd, env names and a passed-through pod annotation": func() *specs.Spec {
			s := baseSpec("RDMA_VISIBLE_DEVICES=mlx5_0,mlx5_1")
			s.Annotations = containerdCRI(map[string]string{"rdma.example.com/devices": "all"})
			return s
		}(),
		"CRI-O, copied pod annotations": func() *specs.Spec {
			s := baseSpec()
			s.Annotations = crio(map[string]string{
				"rdma.example.com/devices": "all",
				"cdi.k8s.io/rdma":          "rdma.example.com/hca=mlx5_1,rdma.example.com/hca=mlx5_2",
			})
			return s
		}(),
		"CRI-O, env all": func() *specs.Spec {
			s := baseSpec("RDMA_VISIBLE_DEVICES=all")
			s.Annotations = crio(nil)
			return s
		}(),
		"an ignored request with an unknown name fails nothing": func() *specs.Spec {
			s := baseSpec("RDMA_VISIBLE_DEVICES=mlx5_42,bad/name")
			s.Annotations = containerdCRI(nil)
			return s
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			req, err := e.Request(s)
			if err != nil {
				t.Fatalf("an ignored request failed the start: %v", err)
			}
			if !req.Empty() {
				t.Fatalf("a Kubernetes container's own request was served: %+v", req)
			}
			changed, err := e.Edit(s, req, ncclVars)
			if err != nil || changed {
				t.Fatalf("Edit: changed=%v, %v", changed, err)
			}
		})
	}
}

// Devices the kubelet placed (a device plugin's or DRA's CDI devices, or
// the annotations fallback's device nodes) still get what CDI cannot
// express; an env request beside them adds nothing.
func TestKubernetesInjectedDevicesStillServed(t *testing.T) {
	e := defaultEditor(t)
	s := baseSpec("RDMA_VISIBLE_DEVICES=all")
	s.Annotations = containerdCRI(nil)
	if _, err := e.Cache.InjectDevices(s, "rdma.example.com/hca=mlx5_1"); err != nil {
		t.Fatal(err)
	}
	req, err := e.Request(s)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(req.Devices, []string{"mlx5_1"}) || !slices.Equal(req.Sources, []string{SourceInjected}) {
		t.Fatalf("request = %+v, want mlx5_1 from %s alone", req, SourceInjected)
	}
	devices := len(s.Linux.Devices)
	if _, err := e.Edit(s, req, ncclVars); err != nil {
		t.Fatal(err)
	}
	if len(s.Linux.Devices) != devices {
		t.Fatalf("devices %v: more than the kubelet placed", devicePaths(s))
	}
	if !slices.Contains(s.Process.Capabilities.Effective, CapIPCLock) || !slices.ContainsFunc(s.Process.Rlimits, func(r specs.POSIXRlimit) bool { return r.Type == RlimitMemlock }) {
		t.Fatalf("placed devices lost CAP_IPC_LOCK or memlock: %+v", s.Process)
	}
	if envOf(s)["NCCL_IB_HCA"] != "=mlx5_1:1" {
		t.Fatalf("env = %v", s.Process.Env)
	}
}

// A plain engine's user is root-equivalent: podman's pod containers carry
// CRI-O's ContainerType and SandboxID (for Kata) and still ask by env.
func TestPlainEngineRequestsServed(t *testing.T) {
	e := defaultEditor(t)
	for name, ann := range map[string]map[string]string{
		"docker":         nil,
		"podman":         {"io.container.manager": "libpod", "io.kubernetes.cri-o.Created": "x", "io.kubernetes.cri-o.TTY": "false"},
		"podman, in pod": podmanInPod(nil),
	} {
		t.Run(name, func(t *testing.T) {
			s := baseSpec("RDMA_VISIBLE_DEVICES=mlx5_0,mlx5_2")
			s.Annotations = ann
			req, err := e.Request(s)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(req.Devices, []string{"mlx5_0", "mlx5_2"}) {
				t.Fatalf("request = %+v", req)
			}
		})
	}
	s := baseSpec()
	s.Annotations = podmanInPod(map[string]string{"cdi.k8s.io/x": "rdma.example.com/hca=mlx5_1"})
	if req := request(t, e, s); !slices.Equal(req.Devices, []string{"mlx5_1"}) || !strings.HasPrefix(req.Sources[0], "annotation ") {
		t.Fatalf("podman annotation request = %+v", req)
	}
}

func TestDetectAsker(t *testing.T) {
	cases := []struct {
		name     string
		ann      map[string]string
		mounts   []specs.Mount
		evidence string // "" for a plain engine
	}{
		{name: "docker"},
		{name: "podman", ann: map[string]string{"io.container.manager": "libpod", "io.kubernetes.cri-o.Created": "x", "io.kubernetes.cri-o.TTY": "false"}},
		{name: "podman, in pod", ann: podmanInPod(nil)},
		{name: "containerd CRI", ann: containerdCRI(nil), evidence: "containerd's CRI annotation io.kubernetes.cri.sandbox-id"},
		{name: "containerd 1.4", ann: map[string]string{"io.kubernetes.cri.container-type": "sandbox"}, evidence: "io.kubernetes.cri.container-type"},
		// A pod may overwrite a value (CRI-O copies its annotations in);
		// it cannot remove the key.
		{name: "containerd CRI, value emptied", ann: map[string]string{"io.kubernetes.cri.sandbox-id": ""}, evidence: "io.kubernetes.cri.sandbox-id"},
		{name: "CRI-O", ann: crio(nil), evidence: "CRI-O annotation"},
		{name: "CRI-O sandbox", ann: map[string]string{"io.kubernetes.cri-o.ContainerType": "sandbox", "io.kubernetes.cri-o.Labels": "{}"}, evidence: "CRI-O annotation io.kubernetes.cri-o.Labels"},
		{name: "cri-dockerd: the kubelet's termination log", mounts: []specs.Mount{
			{Destination: "/dev/termination-log", Source: "/var/lib/kubelet/pods/0c3e8a8e-5a3c-4a5c-9b1e-1f2d3c4b5a69/containers/nccl/8e2f1a3b"},
		}, evidence: "mount of the kubelet's"},
		{name: "cri-dockerd: a static pod's hosts file", mounts: []specs.Mount{
			{Destination: "/etc/hosts", Source: "/var/lib/kubelet/pods/6f1ed9a1c2d34b5e8f9a0b1c2d3e4f50/etc-hosts"},
		}, evidence: "etc-hosts"},
		{name: "a bind mount that only looks alike", mounts: []specs.Mount{
			{Destination: "/data", Source: "/srv/pods/team-a/containers"},
			{Destination: "/etc/hosts", Source: "/etc/hosts"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := DetectAsker(&specs.Spec{Annotations: c.ann, Mounts: c.mounts})
			if a.Kubernetes != (c.evidence != "") || !strings.Contains(a.Evidence, c.evidence) {
				t.Fatalf("DetectAsker = %+v, want evidence %q", a, c.evidence)
			}
		})
	}
}

// Decide is the pure policy: the spec and the switches in, the accepted
// request, who asked and what was ignored out.
func TestDecide(t *testing.T) {
	k8s := func(env string, ann map[string]string) *specs.Spec {
		s := baseSpec(env)
		s.Annotations = crio(ann)
		return s
	}
	own := map[string]string{"rdma.example.com/devices": "mlx5_0", "cdi.k8s.io/net": "rdma.example.com/hca=mlx5_2,vendor.example.com/gpu=gpu0"}
	cases := []struct {
		name     string
		spec     *specs.Spec
		policy   Policy
		devices  []string
		all      bool
		ignored  []string // sources
		switches []string
	}{
		{name: "kubernetes, defaults", spec: k8s("RDMA_VISIBLE_DEVICES=all", own),
			ignored:  []string{"env RDMA_VISIBLE_DEVICES", "annotation cdi.k8s.io/net", "annotation rdma.example.com/devices"},
			switches: []string{SwitchEnv, SwitchAnnotations, SwitchAnnotations}},
		{name: "kubernetes, env accepted", spec: k8s("RDMA_VISIBLE_DEVICES=mlx5_1", own), policy: Policy{KubernetesAcceptEnv: true},
			devices: []string{"mlx5_1"}, ignored: []string{"annotation cdi.k8s.io/net", "annotation rdma.example.com/devices"},
			switches: []string{SwitchAnnotations, SwitchAnnotations}},
		{name: "kubernetes, annotations accepted", spec: k8s("RDMA_VISIBLE_DEVICES=all", own), policy: Policy{KubernetesAcceptAnnotations: true},
			devices: []string{"mlx5_0", "mlx5_2"}, ignored: []string{"env RDMA_VISIBLE_DEVICES"}, switches: []string{SwitchEnv}},
		{name: "kubernetes, both accepted", spec: k8s("RDMA_VISIBLE_DEVICES=all", own), policy: Policy{true, true},
			all: true, devices: []string{"mlx5_0", "mlx5_2"}},
		{name: "kubernetes, nothing asked", spec: k8s("RDMA_VISIBLE_DEVICES=none", map[string]string{"cdi.k8s.io/gpu": "vendor.example.com/gpu=gpu0"})},
		{name: "plain engine, switches off", spec: func() *specs.Spec {
			s := baseSpec("RDMA_VISIBLE_DEVICES=mlx5_1")
			s.Annotations = podmanInPod(own)
			return s
		}(), devices: []string{"mlx5_0", "mlx5_1", "mlx5_2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := Decide(c.spec, "rdma.example.com", "hca", c.policy)
			if err != nil {
				t.Fatal(err)
			}
			if d.Request.All != c.all || !slices.Equal(d.Request.Devices, c.devices) {
				t.Fatalf("request = %+v, want all=%v devices=%v", d.Request, c.all, c.devices)
			}
			var sources, switches []string
			for _, ig := range d.Ignored {
				sources, switches = append(sources, ig.Source), append(switches, ig.Switch)
			}
			if !slices.Equal(sources, c.ignored) || !slices.Equal(switches, c.switches) {
				t.Fatalf("ignored %+v, want %v with %v", d.Ignored, c.ignored, c.switches)
			}
		})
	}
	// What each ignored source asked for is kept, for the log line.
	d, _ := Decide(k8s("RDMA_VISIBLE_DEVICES=mlx5_2,mlx5_1,bad/name", own), "rdma.example.com", "hca", Policy{})
	if ig := d.Ignored[0]; !slices.Equal(ig.Devices, []string{"mlx5_1", "mlx5_2"}) || ig.All || !ig.Unreadable {
		t.Fatalf("env ignored as %+v", ig)
	}
}

// Under Kubernetes with the switches on, the request is exactly what a
// plain engine's would be; with them off, only the injected devices.
func TestDecideSwitchesOnIsParseRequest(t *testing.T) {
	s := baseSpec("RDMA_VISIBLE_DEVICES=mlx5_1,rdma.example.com/hca=mlx5_2")
	s.Annotations = containerdCRI(map[string]string{"rdma.example.com/devices": "all", "cdi.k8s.io/x": "rdma.example.com/hca=mlx5_0"})
	want, err := ParseRequest(s, "rdma.example.com", "hca")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Decide(s, "rdma.example.com", "hca", Policy{KubernetesAcceptEnv: true, KubernetesAcceptAnnotations: true})
	if err != nil || !slices.Equal(d.Request.Devices, want.Devices) || d.Request.All != want.All || !slices.Equal(d.Request.Sources, want.Sources) || len(d.Ignored) != 0 {
		t.Fatalf("Decide = %+v, %v; want %+v", d, err, want)
	}
}

// The annotations fallback of the device plugin: the kubelet places the
// device nodes and passes the same names in a cdi.k8s.io annotation. The
// nodes count; the annotation asked for nothing more, so no warning.
func TestKubernetesAnnotationsFallbackNotReported(t *testing.T) {
	e := defaultEditor(t)
	s := baseSpec()
	s.Annotations = crio(map[string]string{"cdi.k8s.io/rdma-cdi_rdma-hca": "rdma.example.com/hca=mlx5_0,rdma.example.com/hca=mlx5_1"})
	for _, p := range []string{"/dev/infiniband/uverbs0", "/dev/infiniband/umad0", "/dev/infiniband/uverbs1", "/dev/infiniband/umad1", "/dev/infiniband/rdma_cm"} {
		s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: p, Type: "c"})
	}
	req := request(t, e, s)
	if !slices.Equal(req.Devices, []string{"mlx5_0", "mlx5_1"}) || len(req.Ignored) != 0 || req.IgnoredMessage() != "" {
		t.Fatalf("request = %+v, message %q", req, req.IgnoredMessage())
	}
	// Asking for one more than was placed is reported.
	s.Annotations["rdma.example.com/devices"] = "mlx5_1,mlx5_2"
	req = request(t, e, s)
	if !slices.Equal(req.Devices, []string{"mlx5_0", "mlx5_1"}) || len(req.Ignored) != 1 || req.Ignored[0].Source != "annotation rdma.example.com/devices" {
		t.Fatalf("request = %+v", req)
	}
}

// The log line names who asked, each ignored source with what it asked
// for, and its switch; whatever a pod writes, it stays short.
func TestIgnoredMessage(t *testing.T) {
	e := defaultEditor(t)
	s := baseSpec("RDMA_VISIBLE_DEVICES=all")
	s.Annotations = containerdCRI(map[string]string{"rdma.example.com/devices": "mlx5_1,mlx5_2"})
	msg := request(t, e, s).IgnoredMessage()
	for _, want := range []string{
		"Kubernetes container (containerd's CRI annotation io.kubernetes.cri.sandbox-id)",
		"env RDMA_VISIBLE_DEVICES (all; accepted with runtime.kubernetes_accept_env = true)",
		"annotation rdma.example.com/devices (mlx5_1, mlx5_2; accepted with runtime.kubernetes_accept_annotations = true)",
		"device plugin, DRA claim",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if msg := request(t, e, baseSpec("RDMA_VISIBLE_DEVICES=all")).IgnoredMessage(); msg != "" {
		t.Errorf("plain engine: message %q", msg)
	}

	var names []string
	for i := range 1 << 15 {
		names = append(names, fmt.Sprintf("mlx5_%d", i))
	}
	huge := baseSpec("RDMA_VISIBLE_DEVICES=" + strings.Join(names, ","))
	huge.Annotations = crio(nil)
	for i := range 1000 {
		huge.Annotations["cdi.k8s.io/"+strings.Repeat("k", 200)+string(rune('a'+i%26))+strings.Repeat("z", i)] = "rdma.example.com/hca=mlx5_1"
	}
	req, err := e.Request(huge)
	if err != nil || !req.Empty() {
		t.Fatalf("huge ignored request: %+v, %v", req.Sources, err)
	}
	if msg := req.IgnoredMessage(); len(msg) > 4096 || !strings.Contains(msg, "more sources") || !strings.Contains(msg, "and 32760 more") {
		t.Fatalf("message of %d bytes: %.1000s", len(msg), msg)
	}
}
