package hooks

import (
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// BenchmarkHookNCCLConfSeed002 is the nccl-conf hook of a container given
// all 9 HCAs of the seed002 node (255-slot GID tables), as with
// --device VENDOR/hca=all: state, load, discovery, netns, merge, write.
func BenchmarkHookNCCLConfSeed002(b *testing.B) {
	topo, err := fixture.LoadBundled("seed002")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	sys, dev := filepath.Join(dir, "sys"), filepath.Join(dir, "dev")
	must(b, fixture.BuildSysfs(topo, sys))
	must(b, fixture.BuildDev(topo, dev, false))
	var devices []specs.LinuxDevice
	for i := range int64(9) {
		devices = append(devices, uverbs(i))
	}
	bundle := ncclBundle(b, devices...)
	pid := startInNetNS(b, bundle.Rootfs, "10.1.0.6/24")
	opts := NCCLConfOptions{NCCL: config.Default().NCCL, SysfsRoot: sys, DevRoot: dev}
	log, _ := testLog()
	benchRun(b, bundle, pid, func(c *Container) error { return WriteNCCLConf(c, opts, log) })
}
