package ociedit

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
)

// specYAML is a CDI spec as rdma-cdi generate writes it: one device per
// HCA with its uverbs/umad/issm nodes, and spec-wide rdma_cm, a library
// mount and an update-ldcache hook.
const specYAML = `cdiVersion: 0.5.0
kind: rdma.example.com/hca
devices:
  - name: mlx5_0
    containerEdits:
      deviceNodes:
        - path: /dev/infiniband/uverbs0
          type: c
          major: 231
          minor: 192
        - path: /dev/infiniband/umad0
          type: c
          major: 231
          minor: 0
  - name: mlx5_1
    containerEdits:
      deviceNodes:
        - path: /dev/infiniband/uverbs1
          type: c
          major: 231
          minor: 193
        - path: /dev/infiniband/umad1
          type: c
          major: 231
          minor: 1
  - name: mlx5_2
    containerEdits:
      deviceNodes:
        - path: /dev/infiniband/uverbs2
          type: c
          major: 231
          minor: 194
containerEdits:
  deviceNodes:
    - path: /dev/infiniband/rdma_cm
      type: c
      major: 10
      minor: 58
  mounts:
    - hostPath: /usr/lib/x86_64-linux-gnu/libibverbs.so.1
      containerPath: /usr/lib/x86_64-linux-gnu/libibverbs.so.1
      options: [ro, nosuid, nodev, bind]
  hooks:
    - hookName: createContainer
      path: /usr/bin/rdma-cdi
      args: [rdma-cdi, hook, update-ldcache]
      env: [PATH=/usr/bin]
`

const otherVendorYAML = `cdiVersion: 0.5.0
kind: vendor.example.com/gpu
devices:
  - name: gpu0
    containerEdits:
      deviceNodes:
        - path: /dev/gpu0
          type: c
          major: 195
          minor: 0
`

func newEditor(t *testing.T, files map[string]string) Editor {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	return Editor{Cache: cache, Vendor: "rdma.example.com", Class: "hca", Memlock: 64 << 20}
}

func defaultEditor(t *testing.T) Editor {
	return newEditor(t, map[string]string{"rdma.yaml": specYAML, "gpu.yaml": otherVendorYAML})
}

// baseSpec is a config as an engine would propose it.
func baseSpec(env ...string) *specs.Spec {
	return &specs.Spec{
		Version: "1.0.2",
		Root:    &specs.Root{Path: "rootfs"},
		Process: &specs.Process{
			Args: []string{"sh"},
			Cwd:  "/",
			Env:  append([]string{"PATH=/bin"}, env...),
			Capabilities: &specs.LinuxCapabilities{
				Bounding:  []string{"CAP_CHOWN", "CAP_KILL"},
				Effective: []string{"CAP_CHOWN", "CAP_KILL"},
				Permitted: []string{"CAP_CHOWN", "CAP_KILL"},
			},
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
		},
		Linux: &specs.Linux{},
	}
}

var ncclVars = []nccl.Var{{Name: "NCCL_IB_DISABLE", Value: "0"}, {Name: "NCCL_IB_HCA", Value: "=mlx5_1:1"}, {Name: "NCCL_SOCKET_IFNAME", Value: "eth0"}}

func devicePaths(s *specs.Spec) []string {
	var out []string
	for _, d := range s.Linux.Devices {
		out = append(out, d.Path)
	}
	slices.Sort(out)
	return out
}

func envOf(s *specs.Spec) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Process.Env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func request(t *testing.T, e Editor, s *specs.Spec) Request {
	t.Helper()
	req, err := e.Request(s)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestParseRequestSyntax(t *testing.T) {
	cases := []struct {
		name        string
		env         []string
		annotations map[string]string
		all         bool
		devices     []string
		sources     int
	}{
		{name: "nothing"},
		{name: "env none", env: []string{"RDMA_VISIBLE_DEVICES=none"}},
		{name: "env void", env: []string{"RDMA_VISIBLE_DEVICES=void"}},
		{name: "env empty", env: []string{"RDMA_VISIBLE_DEVICES="}},
		{name: "env all", env: []string{"RDMA_VISIBLE_DEVICES=all"}, all: true, sources: 1},
		{name: "env list", env: []string{"RDMA_VISIBLE_DEVICES=mlx5_2, mlx5_1"}, devices: []string{"mlx5_1", "mlx5_2"}, sources: 1},
		{name: "env qualified", env: []string{"RDMA_VISIBLE_DEVICES=rdma.example.com/hca=mlx5_1"}, devices: []string{"mlx5_1"}, sources: 1},
		{name: "own annotation", annotations: map[string]string{"rdma.example.com/devices": "mlx5_0"}, devices: []string{"mlx5_0"}, sources: 1},
		{name: "cdi annotation, other vendors ignored", annotations: map[string]string{
			"cdi.k8s.io/net": "rdma.example.com/hca=mlx5_1,vendor.example.com/gpu=gpu0",
			"cdi.k8s.io/gpu": "vendor.example.com/gpu=gpu1",
		}, devices: []string{"mlx5_1"}, sources: 1},
		{name: "only other vendors", annotations: map[string]string{"cdi.k8s.io/gpu": "vendor.example.com/gpu=gpu1"}},
		{name: "unrelated annotation", annotations: map[string]string{"example.com/devices": "mlx5_0"}},
		{name: "union of sources", env: []string{"RDMA_VISIBLE_DEVICES=mlx5_1"},
			annotations: map[string]string{"rdma.example.com/devices": "mlx5_0,mlx5_1", "cdi.k8s.io/x": "rdma.example.com/hca=mlx5_2"},
			devices:     []string{"mlx5_0", "mlx5_1", "mlx5_2"}, sources: 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := baseSpec(c.env...)
			s.Annotations = c.annotations
			req, err := ParseRequest(s, "rdma.example.com", "hca")
			if err != nil {
				t.Fatal(err)
			}
			if req.All != c.all || !slices.Equal(req.Devices, c.devices) || len(req.Sources) != c.sources {
				t.Fatalf("got %+v, want all=%v devices=%v sources=%d", req, c.all, c.devices, c.sources)
			}
			if req.Empty() != (!c.all && len(c.devices) == 0) {
				t.Fatalf("Empty() = %v", req.Empty())
			}
		})
	}
}

func TestParseRequestErrors(t *testing.T) {
	cases := map[string]*specs.Spec{
		`not a rdma.example.com/hca device`: func() *specs.Spec { return baseSpec("RDMA_VISIBLE_DEVICES=vendor.example.com/gpu=gpu0") }(),
		`invalid`:                           func() *specs.Spec { return baseSpec("RDMA_VISIBLE_DEVICES=mlx5_1,bad/name") }(),
		`annotation cdi.k8s.io/x`: func() *specs.Spec {
			s := baseSpec()
			s.Annotations = map[string]string{"cdi.k8s.io/x": "rdma.example.com/hca=bad/name"}
			return s
		}(),
	}
	for want, s := range cases {
		if _, err := ParseRequest(s, "rdma.example.com", "hca"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error containing %q", err, want)
		}
	}
}

func TestEditAllDevices(t *testing.T) {
	e := defaultEditor(t)
	s := baseSpec("RDMA_VISIBLE_DEVICES=all")
	req := request(t, e, s)
	if !slices.Equal(req.Devices, []string{"mlx5_0", "mlx5_1", "mlx5_2"}) {
		t.Fatalf("all expanded to %v", req.Devices)
	}
	changed, err := e.Edit(s, req, ncclVars)
	if err != nil || !changed {
		t.Fatalf("Edit: %v, %v", changed, err)
	}
	want := []string{"/dev/infiniband/rdma_cm", "/dev/infiniband/umad0", "/dev/infiniband/umad1", "/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1", "/dev/infiniband/uverbs2"}
	if got := devicePaths(s); !slices.Equal(got, want) {
		t.Fatalf("devices = %v, want %v", got, want)
	}
	if len(s.Linux.Resources.Devices) != len(want) {
		t.Fatalf("cgroup device rules = %+v", s.Linux.Resources.Devices)
	}
	for _, r := range s.Linux.Resources.Devices {
		if !r.Allow || r.Type != "c" || r.Access != "rwm" {
			t.Fatalf("cgroup rule %+v", r)
		}
	}
	if len(s.Mounts) != 1 || s.Mounts[0].Destination != "/usr/lib/x86_64-linux-gnu/libibverbs.so.1" || !slices.Contains(s.Mounts[0].Options, "ro") {
		t.Fatalf("mounts = %+v", s.Mounts)
	}
	if s.Hooks == nil || len(s.Hooks.CreateContainer) != 1 || s.Hooks.CreateContainer[0].Args[2] != "update-ldcache" {
		t.Fatalf("hooks = %+v", s.Hooks)
	}
	c := s.Process.Capabilities
	for name, set := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "permitted": c.Permitted} {
		if !slices.Contains(set, "CAP_IPC_LOCK") || !slices.Contains(set, "CAP_CHOWN") {
			t.Errorf("%s = %v", name, set)
		}
	}
	if len(c.Ambient) != 0 || len(c.Inheritable) != 0 {
		t.Errorf("root process got ambient/inheritable %v %v", c.Ambient, c.Inheritable)
	}
	if len(s.Process.Rlimits) != 2 || s.Process.Rlimits[1] != (specs.POSIXRlimit{Type: "RLIMIT_MEMLOCK", Hard: 64 << 20, Soft: 64 << 20}) {
		t.Errorf("rlimits = %+v", s.Process.Rlimits)
	}
	env := envOf(s)
	if env["NCCL_IB_HCA"] != "=mlx5_1:1" || env["NCCL_SOCKET_IFNAME"] != "eth0" || env["NCCL_IB_DISABLE"] != "0" || env["RDMA_VISIBLE_DEVICES"] != "all" || env["PATH"] != "/bin" {
		t.Errorf("env = %v", s.Process.Env)
	}
	// The gpu of another vendor was not touched.
	if slices.Contains(devicePaths(s), "/dev/gpu0") {
		t.Error("another vendor's device injected")
	}
}

func TestEditSomeDevicesNonRootUser(t *testing.T) {
	e := defaultEditor(t)
	s := baseSpec()
	s.Process.User = specs.User{UID: 1000, GID: 1000}
	s.Annotations = map[string]string{"cdi.k8s.io/rdma": "rdma.example.com/hca=mlx5_1"}
	req := request(t, e, s)
	if _, err := e.Edit(s, req, nil); err != nil {
		t.Fatal(err)
	}
	want := []string{"/dev/infiniband/rdma_cm", "/dev/infiniband/umad1", "/dev/infiniband/uverbs1"}
	if got := devicePaths(s); !slices.Equal(got, want) {
		t.Fatalf("devices = %v, want %v", got, want)
	}
	c := s.Process.Capabilities
	for name, set := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "permitted": c.Permitted, "ambient": c.Ambient, "inheritable": c.Inheritable} {
		if !slices.Contains(set, "CAP_IPC_LOCK") {
			t.Errorf("%s = %v", name, set)
		}
	}
	// CDI gives a non-root user's device nodes to that user.
	if d := s.Linux.Devices[0]; d.UID == nil || *d.UID != 1000 {
		t.Errorf("device owner = %+v", d)
	}
}

func TestEditNoCapabilitiesNoRlimits(t *testing.T) {
	e := defaultEditor(t)
	s := baseSpec("RDMA_VISIBLE_DEVICES=mlx5_0")
	s.Process.Capabilities, s.Process.Rlimits = nil, nil
	if _, err := e.Edit(s, request(t, e, s), nil); err != nil {
		t.Fatal(err)
	}
	if c := s.Process.Capabilities; c == nil || !slices.Equal(c.Effective, []string{"CAP_IPC_LOCK"}) {
		t.Fatalf("caps = %+v", c)
	}
	if len(s.Process.Rlimits) != 1 || s.Process.Rlimits[0].Type != "RLIMIT_MEMLOCK" {
		t.Fatalf("rlimits = %+v", s.Process.Rlimits)
	}
}

func TestEditUserWins(t *testing.T) {
	e := defaultEditor(t)
	s := baseSpec("RDMA_VISIBLE_DEVICES=mlx5_1", "NCCL_IB_HCA=mlx5_3:1")
	s.Process.Rlimits = append(s.Process.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_MEMLOCK", Hard: 4096, Soft: 1024})
	if _, err := e.Edit(s, request(t, e, s), ncclVars); err != nil {
		t.Fatal(err)
	}
	env := envOf(s)
	if env["NCCL_IB_HCA"] != "mlx5_3:1" || env["NCCL_SOCKET_IFNAME"] != "eth0" {
		t.Fatalf("env = %v", s.Process.Env)
	}
	n := 0
	for _, kv := range s.Process.Env {
		if strings.HasPrefix(kv, "NCCL_IB_HCA=") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("NCCL_IB_HCA set %d times", n)
	}
	var memlock []specs.POSIXRlimit
	for _, r := range s.Process.Rlimits {
		if r.Type == "RLIMIT_MEMLOCK" {
			memlock = append(memlock, r)
		}
	}
	if len(memlock) != 1 || memlock[0].Hard != 4096 || memlock[0].Soft != 1024 {
		t.Fatalf("memlock = %+v", memlock)
	}
}

func TestUnknownDevice(t *testing.T) {
	e := defaultEditor(t)
	s := baseSpec("RDMA_VISIBLE_DEVICES=mlx5_1,mlx5_7")
	_, err := e.Request(s)
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{`"mlx5_7"`, "RDMA_VISIBLE_DEVICES", "known: mlx5_0, mlx5_1, mlx5_2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// Edit called without Request still fails on an unknown name.
	s = baseSpec()
	if _, err := e.Edit(s, Request{Devices: []string{"mlx5_9"}}, nil); err == nil || !strings.Contains(err.Error(), "mlx5_9") {
		t.Fatalf("Edit with unknown device: %v", err)
	}
}

func TestNoDevicesInSpecDirs(t *testing.T) {
	e := newEditor(t, map[string]string{"gpu.yaml": otherVendorYAML, "broken.yaml": "cdiVersion: 9.9.9\nkind: rdma.example.com/hca\n"})
	_, err := e.Request(baseSpec("RDMA_VISIBLE_DEVICES=all"))
	if err == nil || !strings.Contains(err.Error(), "hold no rdma.example.com/hca devices") || !strings.Contains(err.Error(), "broken.yaml") {
		t.Fatalf("got %v", err)
	}
	// Asking for nothing is fine even then.
	if req, err := e.Request(baseSpec()); err != nil || !req.Empty() {
		t.Fatalf("got %+v, %v", req, err)
	}
}

func TestNoRequestUnchangedBytes(t *testing.T) {
	e := defaultEditor(t)
	s := baseSpec("NCCL_IB_HCA=mlx5_3:1")
	s.Annotations = map[string]string{"cdi.k8s.io/gpu": "vendor.example.com/gpu=gpu0"}
	before, _ := json.Marshal(s)
	req := request(t, e, s)
	if !req.Empty() {
		t.Fatalf("request = %+v", req)
	}
	changed, err := e.Edit(s, req, ncclVars)
	if err != nil || changed {
		t.Fatalf("Edit: %v %v", changed, err)
	}
	after, _ := json.Marshal(s)
	if !bytes.Equal(before, after) {
		t.Fatalf("spec changed:\n%s\n%s", before, after)
	}
}

func TestAlreadyInjectedNotDoubled(t *testing.T) {
	e := defaultEditor(t)
	// First pass: what podman --device rdma.example.com/hca=mlx5_1 gives.
	s := baseSpec()
	if _, err := e.Cache.InjectDevices(s, "rdma.example.com/hca=mlx5_1"); err != nil {
		t.Fatal(err)
	}
	devs, mounts, rules := len(s.Linux.Devices), len(s.Mounts), len(s.Linux.Resources.Devices)
	// It counts as a request: the container needs IPC_LOCK too.
	req := request(t, e, s)
	if !slices.Equal(req.Devices, []string{"mlx5_1"}) || !slices.Contains(req.Sources, SourceInjected) {
		t.Fatalf("request = %+v", req)
	}
	s.Process.Env = append(s.Process.Env, "RDMA_VISIBLE_DEVICES=mlx5_1,mlx5_2")
	req = request(t, e, s)
	if _, err := e.Edit(s, req, nil); err != nil {
		t.Fatal(err)
	}
	if len(s.Linux.Devices) != devs+1 || len(s.Mounts) != mounts || len(s.Linux.Resources.Devices) != rules+1 {
		t.Fatalf("devices %v (had %d), mounts %d (had %d), rules %d (had %d)", devicePaths(s), devs, len(s.Mounts), mounts, len(s.Linux.Resources.Devices), rules)
	}
	if len(s.Hooks.CreateContainer) != 1 {
		t.Fatalf("hooks doubled: %+v", s.Hooks.CreateContainer)
	}
	if !slices.Contains(s.Process.Capabilities.Effective, "CAP_IPC_LOCK") {
		t.Fatal("no IPC_LOCK")
	}
	// A second pass (hook and wrapper both configured) changes nothing.
	before, _ := json.Marshal(s)
	changed, err := e.Edit(s, request(t, e, s), ncclVars[:0])
	if err != nil || changed {
		t.Fatalf("second pass: changed=%v err=%v", changed, err)
	}
	if after, _ := json.Marshal(s); !bytes.Equal(before, after) {
		t.Fatal("second pass changed the spec")
	}
}

func TestEncodeKeepsUntouchedBytes(t *testing.T) {
	orig := []byte(`{"ociVersion":"1.0.2","process":{"args":["sh"],"cwd":"/","env":["PATH=/bin","RDMA_VISIBLE_DEVICES=mlx5_0"]},` +
		`"root":{"path":"rootfs"},  "hostname" : "h1",` +
		`"linux":{"namespaces":[{"type":"mount"}]},"x-future":{"keep":[1, 2]}}`)
	var s specs.Spec
	if err := json.Unmarshal(orig, &s); err != nil {
		t.Fatal(err)
	}
	e := defaultEditor(t)
	if _, err := e.Edit(&s, request(t, e, &s), nil); err != nil {
		t.Fatal(err)
	}
	out, err := Encode(orig, &s)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(out, &top); err != nil {
		t.Fatal(err)
	}
	if string(top["x-future"]) != `{"keep":[1, 2]}` || string(top["hostname"]) != `"h1"` {
		t.Fatalf("untouched keys rewritten: %s", out)
	}
	var back specs.Spec
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(devicePaths(&back), "/dev/infiniband/uverbs0") || !slices.Contains(back.Process.Capabilities.Bounding, "CAP_IPC_LOCK") {
		t.Fatalf("edits lost: %s", out)
	}
}
