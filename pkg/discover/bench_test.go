package discover_test

import (
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

func benchTopologies(b *testing.B) map[string]fixture.Topology {
	seed, err := fixture.LoadBundled("seed002")
	if err != nil {
		b.Fatal(err)
	}
	return map[string]fixture.Topology{"seed002-9hca": seed, "synthetic-64x256": fixture.Synthetic(64, 256)}
}

func buildTree(b *testing.B, topo fixture.Topology) discover.Options {
	tr := fixture.BuildTrees(b, topo, false)
	// Netlink is measured by the whole-process benchmarks in bench/.
	return discover.Options{Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev}, SkipNet: true}
}

func BenchmarkDiscover(b *testing.B) {
	for name, topo := range benchTopologies(b) {
		opts := buildTree(b, topo)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := discover.Discover(opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkNCCLPolicy(b *testing.B) {
	cfg := config.Default().NCCL
	for name, topo := range benchTopologies(b) {
		res, err := discover.Discover(buildTree(b, topo))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				nccl.Compute(res.Node, cfg, nccl.Scope{})
			}
		})
	}
}
