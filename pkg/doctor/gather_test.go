package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// fixtureNode builds a bundled fixture's sysfs and dev trees.
func fixtureNode(t *testing.T, name string) (sys, dev string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for mknod")
	}
	tr := fixture.BuildBundledTrees(t, name, true)
	return tr.Sys, tr.Dev
}

// fakeEngines answers LookPath and Run as if the given engines were
// installed with the given `--version` output.
func fakeEngines(versions map[string]string) (func(string) (string, error), func(context.Context, string, ...string) (string, error)) {
	look := func(bin string) (string, error) {
		if _, ok := versions[bin]; ok {
			return "/usr/bin/" + bin, nil
		}
		return "", errors.New("not found")
	}
	run := func(_ context.Context, name string, args ...string) (string, error) {
		bin := filepath.Base(name)
		if out, ok := versions[bin]; ok && len(args) == 1 && args[0] == "--version" {
			return out, nil
		}
		return "", fmt.Errorf("unexpected command %s %v", name, args)
	}
	return look, run
}

func fakeProc(t *testing.T, procs map[int][2]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, p := range procs {
		dir := filepath.Join(root, fmt.Sprint(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "comm"), []byte(p[0]+"\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "limits"), []byte("Limit Soft Hard Units\nMax locked memory         "+p[1]+"  bytes\n"), 0o644)
	}
	os.MkdirAll(filepath.Join(root, "self"), 0o755)
	return root
}

func TestGatherOnFixture(t *testing.T) {
	sys, dev := fixtureNode(t, "seed004")
	host := t.TempDir()
	os.MkdirAll(filepath.Join(host, "etc/docker"), 0o755)
	os.WriteFile(filepath.Join(host, "etc/docker/daemon.json"), []byte(`{"features":{"cdi":true}}`), 0o644)
	specDir := t.TempDir()
	cfg := config.Default()
	specPath := filepath.Join(specDir, "rdma.example.com-hca.yaml")
	spec := "cdiVersion: 0.5.0\nkind: rdma.example.com/hca\ndevices:\n- name: mlx5_0\n  containerEdits:\n    deviceNodes:\n    - path: /dev/infiniband/uverbs0\n"
	if err := os.WriteFile(specPath, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	look, run := fakeEngines(map[string]string{
		"dockerd": "Docker version 25.0.3, build f417435\n",
		"podman":  "podman version 4.3.1\n",
		"crio":    "crio version 1.24.6\nVersion:  1.24.6\nGitCommit: abc\n",
	})
	proc := fakeProc(t, map[int][2]string{
		100: {"dockerd", "8388608 8388608"},
		200: {"bash", "65536 65536"},
		300: {"containerd", "unlimited unlimited"},
	})
	f := Gather(context.Background(), Options{
		Roots: model.Roots{Sysfs: sys, Dev: dev, Host: host}, ProcRoot: proc, Config: cfg, SpecPath: specPath,
		Render:   func() ([]byte, error) { return []byte(spec), nil },
		LookPath: look, Run: run,
	})
	if f.DiscoverErr != "" || len(f.Node.Devices) != 10 {
		t.Fatalf("discovery: %q, %d devices", f.DiscoverErr, len(f.Node.Devices))
	}
	n := f.DevNodes["/dev/infiniband/uverbs3"]
	if !n.Exists || !n.Char || n.Major != 231 || n.Minor != 195 || n.HostPath != filepath.Join(dev, "infiniband/uverbs3") {
		t.Fatalf("uverbs3 node: %+v", n)
	}
	if len(f.Services) != 2 || f.Services[0].Name != "dockerd" || f.Services[0].Soft != 8<<20 || f.Services[1].Hard != config.Unlimited {
		t.Fatalf("services %+v", f.Services)
	}
	if len(f.Engines) != 3 || f.Engines[0].Version != "25.0.3" || f.Engines[0].CDIConfig == nil || !*f.Engines[0].CDIConfig ||
		f.Engines[1].Name != "crio" || f.Engines[1].Version != "1.24.6" || f.Engines[2].Version != "4.3.1" {
		t.Fatalf("engines %+v", f.Engines)
	}
	if !f.Spec.Exists || f.Spec.Version != "0.5.0" || len(f.Spec.LoadErrors) != 0 || strings.Join(f.Spec.Devices, ",") != "rdma.example.com/hca=mlx5_0" {
		t.Fatalf("spec %+v", f.Spec)
	}

	results := Check(f)
	lines := map[string]string{}
	for _, r := range results {
		lines[r.Name] = r.String()
	}
	for name, want := range map[string]string{
		"rdma-devices":     "PASS rdma-devices: 10 device(s), active ports: mlx5_0:1,",
		"uverbs-nodes":     "PASS uverbs-nodes: " + filepath.Join(dev, "infiniband/uverbs0") + " 231:192,",
		"rdma-netns-mode":  "PASS rdma-netns-mode: shared",
		"rdma-core":        "FAIL rdma-core: libibverbs.so.1 not found",
		"memlock":          "WARN memlock: containers inherit a low memlock from dockerd (pid 100) 8MiB/8MiB",
		"cdi-docker":       "PASS cdi-docker: docker 25.0.3: CDI set to true in " + filepath.Join(host, "etc/docker/daemon.json"),
		"cdi-crio":         "FAIL cdi-crio: crio 1.24.6 reads cdiVersion <= 0.3.0 but " + specPath + " is 0.5.0",
		"cdi-podman":       "PASS cdi-podman: podman 4.3.1: CDI on by default; reads cdiVersion <= 0.5.0, spec is 0.5.0",
		"cdi-spec":         "PASS cdi-spec: " + specPath + " (cdiVersion 0.5.0): rdma.example.com/hca=mlx5_0",
		"cdi-spec-current": "PASS cdi-spec-current:",
	} {
		if !strings.HasPrefix(lines[name], want) {
			t.Errorf("%s:\n got %s\nwant %s...", name, lines[name], want)
		}
	}

	// A node rewired behind the spec's back: uverbs3 renumbered, uverbs5 gone.
	os.Remove(filepath.Join(dev, "infiniband/uverbs5"))
	f = Gather(context.Background(), Options{Roots: model.Roots{Sysfs: sys, Dev: dev, Host: host}, ProcRoot: proc, Config: cfg, SpecPath: specPath,
		Render: func() ([]byte, error) { return []byte(spec + "# new\n"), nil }, LookPath: look, Run: run})
	for _, r := range Check(f) {
		switch r.Name {
		case "uverbs-nodes":
			if r.Status != Fail || !strings.Contains(r.Detail, "mlx5_5: "+filepath.Join(dev, "infiniband/uverbs5")+" missing (sysfs says 231:197)") {
				t.Errorf("after removing uverbs5: %s", r)
			}
		case "cdi-spec-current":
			if r.Status != Fail || !strings.Contains(r.Detail, "stale") {
				t.Errorf("after a render change: %s", r)
			}
		}
	}
}

func TestGatherInvalidSpec(t *testing.T) {
	specDir := t.TempDir()
	specPath := filepath.Join(specDir, "rdma.example.com-hca.yaml")
	os.WriteFile(specPath, []byte("cdiVersion: 0.5.0\nkind: rdma.example.com/hca\ndevices:\n- name: mlx5_0\n  bogusField: 1\n"), 0o644)
	look, run := fakeEngines(nil)
	f := Gather(context.Background(), Options{Roots: model.Roots{Sysfs: t.TempDir(), Dev: t.TempDir(), Host: t.TempDir()}, ProcRoot: t.TempDir(),
		Config: config.Default(), SpecPath: specPath, LookPath: look, Run: run})
	r := find(Check(f), "cdi-spec")[0]
	if r.Status != Fail || !strings.Contains(r.Detail, "rejected by the CDI library") {
		t.Fatalf("invalid spec: %s", r)
	}
	if r := find(Check(f), "rdma-devices")[0]; r.Status != Fail {
		t.Fatalf("empty sysfs: %s", r)
	}
}
