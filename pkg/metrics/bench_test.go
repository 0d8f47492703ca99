package metrics

import (
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
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
