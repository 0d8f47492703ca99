package watch_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus/hooks/test"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
	"github.com/rdma-cdi/rdma-cdi/pkg/watch"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// runService runs a Service on a bundled fixture until its spec exists,
// stops it, and returns the spec's path.
func runService(t *testing.T, removeOnExit bool) string {
	t.Helper()
	tr := fixture.BuildBundledTrees(t, "seed002", false)
	log, _ := test.NewNullLogger()
	cfg := config.Default()
	cfg.CDI.SpecDir = filepath.Join(tr.Dir, "cdi")
	cfg.CDI.InjectLibraries = false
	svc := &watch.Service{
		Config: cfg,
		NewGenerator: func(cfg config.Config) (*specgen.Generator, error) {
			return &specgen.Generator{Config: cfg, Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev, Host: "/"},
				HookBinary: "/usr/local/bin/rdma-cdi-hook", Log: log}, nil
		},
		NoNetlink: true, NoUevents: true, RemoveOnExit: removeOnExit, Log: log,
	}
	spec := filepath.Join(cfg.CDI.SpecDir, "rdma.example.com-hca.yaml")
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(spec); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the service never wrote the spec")
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return spec
}

func TestServiceRemoveOnExit(t *testing.T) {
	if _, err := os.Stat(runService(t, true)); !os.IsNotExist(err) {
		t.Fatalf("spec still there after a stop with RemoveOnExit: %v", err)
	}
}

func TestServiceKeepsTheSpecByDefault(t *testing.T) {
	if _, err := os.Stat(runService(t, false)); err != nil {
		t.Fatalf("spec gone after a plain stop: %v", err)
	}
}
