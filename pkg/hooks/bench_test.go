package hooks

import (
	"context"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
)

// realisticState is what runc hands a hook: a podman-sized state with
// annotations.
func realisticState(b *testBundle, pid int) string {
	return `{"ociVersion":"1.0.2-dev","id":"4f1c2b9e8a7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170f6e5d4c","status":"creating","pid":` +
		strconv.Itoa(pid) + `,"bundle":"` + b.Dir + `","annotations":{"io.container.manager":"libpod","io.podman.annotations.autoremove":"TRUE",` +
		`"org.opencontainers.image.stopSignal":"15","cdi.k8s.io/rdma-cdi":"rdma.example.com/hca=mlx5_1"}}`
}

func benchRun(b *testing.B, bundle *testBundle, pid int, fn func(*Container) error) {
	state := realisticState(bundle, pid)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		st, err := ReadState(strings.NewReader(state))
		if err != nil {
			b.Fatal(err)
		}
		c, err := Load(st)
		if err != nil {
			b.Fatal(err)
		}
		if err := fn(c); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

func BenchmarkReadStateAndLoad(b *testing.B) {
	bundle := newBundle(b)
	p := startInRoot(b, bundle.Rootfs)
	benchRun(b, bundle, p.Process.Pid, func(*Container) error { return nil })
}

func BenchmarkHookUpdateLDCache(b *testing.B) {
	needLdconfig(b)
	bundle, _ := glibcBundle(b)
	p := startInRoot(b, bundle.Rootfs)
	log, _ := testLog()
	opts := LDCacheOptions{Folders: []string{"/opt/rdma/lib"}}
	benchRun(b, bundle, p.Process.Pid, func(c *Container) error { return UpdateLDCache(context.Background(), c, opts, log) })
}

func BenchmarkHookNCCLConf(b *testing.B) {
	bundle := ncclBundle(b, uverbs(0), uverbs(1))
	bundle.write(b, "etc/nccl.conf", "NCCL_DEBUG=INFO\n")
	pid := startInNetNS(b, bundle.Rootfs, "10.1.0.6/24")
	opts := ncclOpts(b)
	log, _ := testLog()
	benchRun(b, bundle, pid, func(c *Container) error { return WriteNCCLConf(c, opts, log) })
}

func BenchmarkHookMemlock(b *testing.B) {
	needRoot(b)
	bundle := newBundle(b)
	bundle.Spec.Process.Rlimits = []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Soft: 1024, Hard: 1024}}
	bundle.save(b)
	p := startInRoot(b, bundle.Rootfs)
	log, _ := testLog()
	benchRun(b, bundle, p.Process.Pid, func(c *Container) error { return Memlock(c, config.Unlimited, log) })
}
