package kube

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// apiServerScrape is the API server's own /metrics.
func apiServerScrape(tb testing.TB, k *e2e.KubeEnv) []metrics.Sample {
	tb.Helper()
	samples, err := metrics.ParseScrape(strings.NewReader(k.MustKubectl(tb, "get", "--raw", "/metrics")))
	if err != nil {
		tb.Fatalf("the API server's /metrics: %v", err)
	}
	return samples
}

// sliceWrites sums the API server's own apiserver_request_total for
// writes (POST, PUT, PATCH, DELETE) of ResourceSlices, dry runs left out.
func sliceWrites(tb testing.TB, k *e2e.KubeEnv) int {
	tb.Helper()
	total := 0
	for _, s := range metrics.Find(apiServerScrape(tb, k), "apiserver_request_total", map[string]string{"resource": "resourceslices", "dry_run": ""}) {
		if slices.Contains([]string{"POST", "PUT", "PATCH", "DELETE"}, s.Labels["verb"]) {
			total += int(s.Value)
		}
	}
	return total
}

// BenchmarkKubeSliceWriteStorm storms seed 002's node for 10 s in cycles:
// mlx5_7's port flips (DOWN, then ACTIVE: each flip changes its device in
// the slice, taint included) with a burst of 1,000 netlink address events
// on eth2, then 600 ms of quiet, just past the 500 ms debounce window. It
// counts the ResourceSlice writes the API server served meanwhile (its own
// apiserver_request_total). The watch generates once per debounce window
// of quiet (or after 10 windows of a storm that never goes quiet) and the
// driver writes at most once per generation: about one write per cycle,
// however many events it had, and never more than one per window.
//
//	go test ./test/e2e/kube -run '^$' -bench BenchmarkKubeSliceWriteStorm -benchtime 1x
func BenchmarkKubeSliceWriteStorm(b *testing.B) {
	node := e2e.SharedFixtureNode(b, "seed002")
	k := e2e.DRANode(b, node, 9)
	const storm = 10 * time.Second
	for b.Loop() {
		before := sliceWrites(b, k)
		batch := k.InNode("ip", "-batch", "-")
		in, err := batch.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		batch.Stdout, batch.Stderr = io.Discard, io.Discard
		if err := batch.Start(); err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriter(in)
		state := node.Sys + "/class/infiniband/mlx5_7/ports/1/state"
		events, portFlips := 0, 0
		start := time.Now()
		for i := 0; time.Since(start) < storm; portFlips++ {
			// A burst of 1,000 address events and one port change, then
			// quiet just past the debounce window.
			s, link := "1: DOWN", "down"
			if portFlips%2 == 1 {
				s, link = "4: ACTIVE", "up"
			}
			if err := os.WriteFile(state, []byte(s+"\n"), 0o644); err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(w, "link set eth7 %s\n", link)
			for burst := 0; burst < 500; burst, i = burst+1, i+1 {
				fmt.Fprintf(w, "addr add 10.250.%d.%d/32 dev eth2\naddr del 10.250.%d.%d/32 dev eth2\n", i/250%250, i%250+1, i/250%250, i%250+1)
			}
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
			events += 1001
			time.Sleep(600 * time.Millisecond)
		}
		elapsed := time.Since(start)
		if portFlips%2 == 1 { // leave the port up
			_ = os.WriteFile(state, []byte("4: ACTIVE\n"), 0o644)
			fmt.Fprintln(w, "link set eth7 up")
		}
		_ = w.Flush()
		in.Close()
		_ = batch.Wait()
		e2e.WaitHealthy(b, k, "mlx5-7")
		time.Sleep(2 * time.Second) // the last generation's write
		writes := sliceWrites(b, k) - before
		windows := elapsed.Seconds() / 0.5
		b.ReportMetric(float64(events), "events")
		b.ReportMetric(float64(portFlips), "port-flips")
		b.ReportMetric(float64(writes), "slice-writes")
		b.ReportMetric(float64(writes)/windows, "writes/debounce-window")
		if float64(writes) > windows+3 {
			b.Errorf("%d slice writes in %v (%d events): more than one per 500 ms debounce window", writes, elapsed.Round(time.Millisecond), events)
		}
	}
}
