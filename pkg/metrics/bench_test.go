package metrics

import (
	"fmt"
	"io"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/hookevents"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

func cpuTime() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScrape is one /metrics scrape of an agent on a synthetic node
// of 256 single-port HCAs (every port's state, rate and counters read from
// the fixture's sysfs), beside the same agent before its first generation
// (no ports: the Go and process collectors alone), the baseline of the same
// run. cpu-ms/scrape is the process's CPU time (every thread, the garbage
// collector included) per scrape.
//
//	go test ./pkg/metrics -run '^$' -bench BenchmarkScrape -benchtime 100x
func BenchmarkScrape(b *testing.B) {
	for _, hcas := range []int{0, 256} {
		b.Run(fmt.Sprintf("hcas=%d", hcas), func(b *testing.B) {
			tr := fixture.BuildTrees(b, fixture.Synthetic(max(hcas, 1), 4), false)
			e := New(Options{Sysfs: tr.Sys, Mode: "watch"})
			if hcas > 0 {
				res, err := discover.Discover(discover.Options{Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev}, SkipNet: true})
				if err != nil {
					b.Fatal(err)
				}
				e.Generation(specgen.Outcome{Node: res.Node}, config.Default(), nil)
			}
			h := e.Handler()
			bytes := 0
			start := cpuTime()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
				bytes = rec.Body.Len()
				_, _ = io.Copy(io.Discard, rec.Body)
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(time.Millisecond)/float64(b.N), "cpu-ms/scrape")
			b.ReportMetric(float64(bytes), "bytes/scrape")
		})
	}
}

// BenchmarkScrapeHolders is one /metrics scrape with the hook holders'
// table at its cap, maxHeldDevices (container, HCA) pairs, all alive, of a
// node of 256 HCAs (their ports not read: BenchmarkScrape has those): as
// 4,096 containers of 2 HCAs (both caps at once) or 32 of 256, with every name at its longest
// (what a flood of reports can make) or of a typical pod's length; and 3
// scrapes at once, the most the server runs. peak-heap-MiB is the highest
// heap (live and not yet swept objects, the table included) sampled while
// the scrapes ran; B/op is per iteration (3 scrapes in scrapes=3).
//
//	go test ./pkg/metrics -run '^$' -bench BenchmarkScrapeHolders -benchtime 10x
func BenchmarkScrapeHolders(b *testing.B) {
	typicalReport := func(i int, devices []string) hookevents.Outcome {
		id := fmt.Sprintf("%064x", i)
		return hookevents.Outcome{Hook: "create-runtime", ContainerID: id, Pid: 1 + i,
			Cgroup:    fmt.Sprintf("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%08x_1b2c_4d5e_8f90_a1b2c3d4e5f6.slice/cri-containerd-%s.scope", i, id),
			Namespace: "ml-research", Pod: fmt.Sprintf("llama-finetune-worker-%d", i), Container: "trainer", Devices: devices}
	}
	node := hcaNames(256)
	const fewest = maxHeldDevices / maxHookHolders
	for _, c := range []struct {
		names             string
		report            func(int, []string) hookevents.Outcome
		containers, hcas  int
		concurrentScrapes int
	}{
		{"longest", floodReport, maxHookHolders, fewest, 1},
		{"longest", floodReport, maxHeldDevices / 256, 256, 1},
		{"longest", floodReport, maxHookHolders, fewest, 3},
		{"typical", typicalReport, maxHookHolders, fewest, 1},
		{"typical", typicalReport, maxHookHolders, fewest, 3},
	} {
		b.Run(fmt.Sprintf("names=%s/containers=%d,hcas=%d/scrapes=%d", c.names, c.containers, c.hcas, c.concurrentScrapes), func(b *testing.B) {
			e := New(Options{Sysfs: b.TempDir(), Alive: alwaysAlive})
			generate(e, node)
			for i := range c.containers {
				e.HookOutcome(c.report(i, node[i%(len(node)-c.hcas+1):][:c.hcas]))
			}
			if n := e.Holders.heldDevices; n != maxHeldDevices {
				b.Fatalf("%d held devices, want the cap %d", n, maxHeldDevices)
			}
			h := e.Handler()
			table := heapAfterGC()
			bytes := 0
			b.ReportAllocs()
			stop := sampleHeapPeak()
			for b.Loop() {
				var wg sync.WaitGroup
				for range c.concurrentScrapes {
					wg.Go(func() { bytes = scrapeDiscarding(h) })
				}
				wg.Wait()
			}
			peak := stop()
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(table)/(1<<20), "heap-before-MiB")
			b.ReportMetric(float64(bytes), "bytes/scrape")
		})
	}
}
