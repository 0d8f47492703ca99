package hooks

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// BenchmarkHookNCCLConfSeed002 is the nccl-conf hook of a container on the
// seed002 node (9 HCAs, 255-slot GID tables): state, load, discovery,
// netns, merge, write. "all" is --device VENDOR/hca=all; "one" a container
// given mlx5_1 only, for which only that device's GID table is read.
func BenchmarkHookNCCLConfSeed002(b *testing.B) {
	tr := fixture.BuildBundledTrees(b, "seed002", false)
	opts := NCCLConfOptions{NCCL: config.Default().NCCL, Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev}}
	log, _ := testLog()
	var all []specs.LinuxDevice
	for i := range int64(9) {
		all = append(all, uverbs(i))
	}
	for name, devices := range map[string][]specs.LinuxDevice{"all": all, "one": {uverbs(1)}} {
		b.Run(name, func(b *testing.B) {
			bundle := ncclBundle(b, devices...)
			pid := startInNetNS(b, bundle.Rootfs, "10.1.0.6/24")
			benchRun(b, bundle, pid, func(c *Container) error { return WriteNCCLConf(c, opts, log) })
		})
	}
}
