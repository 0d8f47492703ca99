package specgen_test

import (
	"io"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// BenchmarkGenerate is `rdma-cdi generate --output -` in process (discovery
// with netlink in this namespace, user stack, render, YAML), on the
// 9-HCA seed002 node and synthetic nodes. bench/run.sh times the whole
// process.
func BenchmarkGenerate(b *testing.B) {
	seed, err := fixture.LoadBundled("seed002")
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		topo fixture.Topology
	}{
		{"seed002-9hca", seed},
		{"synthetic-64x4", fixture.Synthetic(64, 4)},
		{"synthetic-64x256", fixture.Synthetic(64, 256)},
	} {
		tr := fixture.BuildTrees(b, tc.topo, false)
		log := logrus.New()
		log.SetOutput(io.Discard)
		g := &specgen.Generator{Config: config.Default(), Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev, Host: "/"},
			HookBinary: "/usr/bin/rdma-cdi", Log: log}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.Generate("-"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
