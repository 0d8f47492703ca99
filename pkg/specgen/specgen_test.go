package specgen_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

func generator(t *testing.T, topology string) (*specgen.Generator, *test.Hook) {
	t.Helper()
	tr := fixture.BuildBundledTrees(t, topology, false)
	dir, sys, dev := tr.Dir, tr.Sys, tr.Dev
	log, hook := test.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	cfg := config.Default()
	cfg.CDI.SpecDir = filepath.Join(dir, "cdi")
	cfg.CDI.InjectLibraries = false // the host's stack is pkg/hostlibs' concern
	return &specgen.Generator{
		Config: cfg, Roots: model.Roots{Sysfs: sys, Dev: dev, Host: "/"},
		HookBinary: "/usr/local/bin/rdma-cdi", HookArgs: []string{"--sysfs-root=" + sys}, Log: log,
	}, hook
}

func TestGenerateWritesOnlyOnChange(t *testing.T) {
	g, _ := generator(t, "seed002")
	out, err := g.Generate("")
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(g.Config.CDI.SpecDir, "rdma.example.com-hca.yaml")
	if out.Path != want || !out.Changed || len(out.Spec.Devices) != 10 {
		t.Fatalf("first run: path %s changed %v devices %d", out.Path, out.Changed, len(out.Spec.Devices))
	}
	// Which HCA the host's default route excludes depends on this machine's
	// netdev names; the fixture tests in pkg/discover pin that down.
	if hca, _ := out.NCCL.Get("NCCL_IB_HCA"); !strings.Contains(hca, "mlx5_1:1,mlx5_2:1") {
		t.Errorf("NCCL_IB_HCA = %q", hca)
	}
	fi, err := os.Stat(want)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("spec file: %v mode %v", err, fi.Mode())
	}
	again, err := g.Generate("")
	if err != nil || again.Changed {
		t.Fatalf("second run must not rewrite an unchanged spec: changed %v err %v", again.Changed, err)
	}
	if string(again.Data) != string(out.Data) {
		t.Fatal("rendering is not deterministic")
	}
	for _, hook := range out.Spec.ContainerEdits.Hooks {
		if hook.Path != "/usr/local/bin/rdma-cdi" || len(hook.Env) != 1 || !strings.Contains(strings.Join(hook.Args, " "), "--sysfs-root=") {
			t.Errorf("hook %+v: want the host binary, an explicit env and the roots", hook)
		}
	}
}

func TestGenerateToStdoutWritesNothing(t *testing.T) {
	g, _ := generator(t, "seed002")
	out, err := g.Generate("-")
	if err != nil || out.Changed || len(out.Data) == 0 {
		t.Fatalf("changed %v err %v data %d", out.Changed, err, len(out.Data))
	}
	if _, err := os.Stat(g.Config.CDI.SpecDir); !os.IsNotExist(err) {
		t.Fatalf("--output - must not create the spec dir: %v", err)
	}
}

func TestNoDevicesRemovesStaleSpecOnlyWhenAsked(t *testing.T) {
	g, _ := generator(t, "no-rdma")
	stale := filepath.Join(g.Config.CDI.SpecDir, "rdma.example.com-hca.yaml")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := g.Generate("")
	if err != nil || out.Spec != nil || out.Removed {
		t.Fatalf("spec %v removed %v err %v", out.Spec, out.Removed, err)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatal("without RemoveStale the earlier spec stays")
	}
	g.RemoveStale = true
	if out, err = g.Generate(""); err != nil || !out.Removed {
		t.Fatalf("removed %v err %v", out.Removed, err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatal("stale spec not removed")
	}
}

func TestCDIEnvDelivery(t *testing.T) {
	g, _ := generator(t, "seed002")
	g.Config.NCCL.Delivery = "cdi-env"
	out, err := g.Generate("-")
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Join(out.Spec.ContainerEdits.Env, " ")
	if !strings.Contains(env, "NCCL_IB_GID_INDEX=3") || !strings.Contains(env, "NCCL_IB_HCA=") {
		t.Fatalf("cdi-env delivery: env %q", env)
	}
	for _, hook := range out.Spec.ContainerEdits.Hooks {
		if strings.Contains(strings.Join(hook.Args, " "), "nccl-conf") {
			t.Fatal("cdi-env delivery must not also write nccl.conf")
		}
	}
}

func TestGenerateErrorsKeepThePreviousSpec(t *testing.T) {
	g, _ := generator(t, "seed002")
	if _, err := g.Generate(""); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(g.Config.CDI.SpecDir, "rdma.example.com-hca.yaml"))
	g.Config.CDI.MaxVersion = "0.3.0" // a fixture dev root needs hostPath (0.5.0)
	if _, err := g.Generate(""); err == nil || !strings.Contains(err.Error(), "0.3.0") {
		t.Fatalf("want the version cap error, got %v", err)
	}
	after, _ := os.ReadFile(filepath.Join(g.Config.CDI.SpecDir, "rdma.example.com-hca.yaml"))
	if string(after) != string(before) {
		t.Fatal("a failed generation changed the spec")
	}
	g.Roots.Sysfs = filepath.Join(t.TempDir(), "gone")
	if _, err := g.Generate(""); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("missing sysfs root: %v", err)
	}
}

func TestRepeatedWarningsAreLoggedOnce(t *testing.T) {
	g, hook := generator(t, "seed002") // no mknod: the device-node warning
	for i := 0; i < 3; i++ {
		if _, err := g.Generate("-"); err != nil {
			t.Fatal(err)
		}
	}
	warnings := map[string]int{}
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel {
			warnings[e.Message]++
		}
	}
	if len(warnings) == 0 {
		t.Fatal("the fixture without device nodes must warn")
	}
	for msg, n := range warnings {
		if n != 1 {
			t.Errorf("%d times at warning level: %s", n, msg)
		}
	}
}
