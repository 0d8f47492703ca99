package metrics

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	runtimemetrics "runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/hookevents"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
)

func alwaysAlive(hookevents.Init) bool { return true }

// hcaNames are n HCA names, mlx5_0 on.
func hcaNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("mlx5_%d", i)
	}
	return names
}

// generate records a good generation of a node of the named HCAs (no
// ports: nothing to read at a scrape).
func generate(e *Exporter, names []string) {
	var node model.Node
	for _, n := range names {
		node.Devices = append(node.Devices, model.Device{Name: n})
	}
	e.Generation(specgen.Outcome{Node: node}, config.Default(), nil)
}

func hooked(id string, devices ...string) hookevents.Outcome {
	return hookevents.Outcome{Hook: "create-runtime", ContainerID: id, Pid: 1, Devices: devices}
}

// heldBy is each hook holder as container=device, sorted.
func heldBy(t *testing.T, e *Exporter) []string {
	t.Helper()
	var got []string
	for _, h := range Find(scrape(t, e), "rdma_cdi_hca_holder_info", map[string]string{"source": SourceHook}) {
		got = append(got, h.Labels["container_id"]+"="+h.Labels["device"])
	}
	slices.Sort(got)
	return got
}

// refused reads the refusals' counter without a scrape (one of 16,384
// holders takes a while).
func refused(t *testing.T, e *Exporter) float64 {
	t.Helper()
	var m dto.Metric
	if err := e.holdersRefused.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestHookDevicesAreTheNodes: a report holds the node's HCAs it names, each
// once; names the node lacks are dropped, and a report left with none
// holds nothing (its container's earlier report included).
func TestHookDevicesAreTheNodes(t *testing.T) {
	e := New(Options{Sysfs: t.TempDir(), Alive: alwaysAlive})
	generate(e, hcaNames(4))
	e.HookOutcome(hooked("c1", "mlx5_1", "ib_fake", "mlx5_1", "mlx5_2"))
	e.HookOutcome(hooked("c2", "mlx5_9", "../mlx5_1"))
	if got, want := heldBy(t, e), []string{"c1=mlx5_1", "c1=mlx5_2"}; !slices.Equal(got, want) {
		t.Errorf("held %v, want %v", got, want)
	}
	e.HookOutcome(hooked("c1", "ib_fake"))
	if got := heldBy(t, e); len(got) != 0 {
		t.Errorf("after c1's report of no HCA of the node: held %v", got)
	}
	if got := refused(t, e); got != 0 {
		t.Errorf("refused %v: dropping names is not refusing a container", got)
	}
	if n := e.Holders.heldDevices; n != 0 {
		t.Errorf("%d held devices counted, want 0", n)
	}
}

// TestReportsBeforeTheFirstGeneration: before the node is discovered a
// report's devices cannot be checked and are held; the first generation
// drops what is not the node's, and later reports are checked.
func TestReportsBeforeTheFirstGeneration(t *testing.T) {
	e := New(Options{Sysfs: t.TempDir(), Alive: alwaysAlive})
	e.HookOutcome(hooked("c1", "mlx5_1", "ghost"))
	e.HookOutcome(hooked("c2", "ghost"))
	if got, want := heldBy(t, e), []string{"c1=ghost", "c1=mlx5_1", "c2=ghost"}; !slices.Equal(got, want) {
		t.Errorf("before the first generation: held %v, want %v", got, want)
	}
	generate(e, hcaNames(4))
	e.HookOutcome(hooked("c3", "ghost", "mlx5_2"))
	if got, want := heldBy(t, e), []string{"c1=mlx5_1", "c3=mlx5_2"}; !slices.Equal(got, want) {
		t.Errorf("after it: held %v, want %v", got, want)
	}
	// A later generation without mlx5_1 (a reset in progress) ends no holder.
	generate(e, []string{"mlx5_2"})
	if got, want := heldBy(t, e), []string{"c1=mlx5_1", "c3=mlx5_2"}; !slices.Equal(got, want) {
		t.Errorf("after a generation without mlx5_1: held %v, want %v", got, want)
	}
	if n := e.Holders.heldDevices; n != 2 {
		t.Errorf("%d held devices counted, want 2", n)
	}
}

// TestHeldDevicesAreCapped: the (container, HCA) pairs are capped, not only
// the containers: a report that would pass the cap is refused whole and
// counted; one that holds fewer than before makes room; so does a
// container whose init is gone.
func TestHeldDevicesAreCapped(t *testing.T) {
	var mu sync.Mutex
	gone := map[int]bool{}
	e := New(Options{Sysfs: t.TempDir(), Alive: func(init hookevents.Init) bool {
		mu.Lock()
		defer mu.Unlock()
		return !gone[init.Pid]
	}})
	all := hcaNames(256)
	generate(e, all)
	full := maxHeldDevices / len(all)
	for i := range full {
		o := hooked(fmt.Sprint("c", i), all...)
		o.Pid = 1000 + i
		e.HookOutcome(o)
	}
	if n := e.Holders.heldDevices; n != maxHeldDevices {
		t.Fatalf("%d held devices, want the cap %d", n, maxHeldDevices)
	}
	e.HookOutcome(hooked("one-more", "mlx5_0"))
	if got := refused(t, e); got != 1 {
		t.Errorf("refused %v past the cap, want 1", got)
	}
	// c0 now holds one HCA: 255 pairs free.
	e.HookOutcome(hooked("c0", "mlx5_0"))
	e.HookOutcome(hooked("c-255", all[:255]...))
	e.HookOutcome(hooked("c-1", "mlx5_0"))
	if got := refused(t, e); got != 2 {
		t.Errorf("refused %v, want 2 (c-255 fits, c-1 does not)", got)
	}
	// c1's init is gone: the next refusal looks for containers gone (the
	// last look is made over a second old), and c1's 256 pairs make room.
	mu.Lock()
	gone[1001] = true
	mu.Unlock()
	e.Holders.mu.Lock()
	e.Holders.lastFullPrune = time.Time{}
	e.Holders.mu.Unlock()
	e.HookOutcome(hooked("after-c1", all...))
	if got := refused(t, e); got != 2 {
		t.Errorf("refused %v, want still 2", got)
	}
	held := heldBy(t, e)
	if len(held) != maxHeldDevices || slices.Contains(held, "c1=mlx5_0") || !slices.Contains(held, "after-c1=mlx5_255") {
		t.Errorf("%d holders, c1 held %v, after-c1 held %v", len(held), slices.Contains(held, "c1=mlx5_0"), slices.Contains(held, "after-c1=mlx5_255"))
	}
}

// heapAfterGC is the live heap. Two collections: the first moves what
// sync.Pools hold (a scrape's buffers) to their victim caches, the second
// frees it.
func heapAfterGC() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// sampleHeapPeak samples the heap's objects (live and not yet swept) every
// 100µs through runtime/metrics, which stops no goroutine, until the
// returned function is called; that returns the highest sample.
func sampleHeapPeak() (stop func() uint64) {
	sample := []runtimemetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	done, result := make(chan struct{}), make(chan uint64)
	go func() {
		var peak uint64
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			runtimemetrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-done:
				result <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		return <-result
	}
}

// discardResponse is a ResponseWriter that keeps nothing of the body, as
// the server's own streams it: a recorder's buffer would be counted as the
// scrape's memory.
type discardResponse struct {
	header http.Header
	n      int
}

func (d *discardResponse) Header() http.Header         { return d.header }
func (d *discardResponse) WriteHeader(int)             {}
func (d *discardResponse) Write(b []byte) (int, error) { d.n += len(b); return len(b), nil }

// scrapeDiscarding runs one /metrics scrape and returns the body's size.
func scrapeDiscarding(h http.Handler) int {
	w := &discardResponse{header: http.Header{}}
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return w.n
}

// longest is a name of IsName's longest, unique to i.
func longest(prefix string, i int) string {
	s := fmt.Sprintf("%s%08x", prefix, i)
	return strings.Repeat("n", 253-len(s)) + s
}

// floodReport is container i's report, every name at its longest and
// allocated anew, as each decoded datagram's are.
func floodReport(i int, devices []string) hookevents.Outcome {
	cgroup := fmt.Sprintf("/kubepods.slice/%08x/", i)
	return hookevents.Outcome{Hook: "create-runtime", ContainerID: longest("id", i), Pid: 1 + i,
		Cgroup: cgroup + strings.Repeat("c", 1024-len(cgroup)), Namespace: longest("ns", i), Pod: longest("pod", i),
		Container: longest("ctr", i), Devices: devices}
}

// Bounds of TestHolderFloodIsBounded: the heap the table keeps at either
// cap (measured: under 10 MiB), and the heap's peak during one scrape of
// it (measured: under 50 MiB; repeated scrapes, about 100), half the
// chart's 256 Mi limit.
const (
	maxFloodHeap       = 24 << 20
	maxFloodScrapePeak = 128 << 20
)

// TestHolderFloodIsBounded floods the agent with as many reports as it
// tracks containers, each naming the most devices a report may (256), with
// every name at its longest: random device names before the node is known
// and after, all the node's HCAs (256 each), and as few of them as fill
// both caps at once (maxHeldDevices / maxHookHolders each, so that every
// container's names are kept). The heap the table keeps stays under
// maxFloodHeap, and one scrape of it under maxFloodScrapePeak.
func TestHolderFloodIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood of 4,096 reports of 256 devices")
	}
	node := hcaNames(256)
	rng := rand.New(rand.NewPCG(1, 2))
	randomNames := func(int) []string {
		names := make([]string, 256)
		for j := range names {
			names[j] = longest(fmt.Sprint("dev", rng.Uint32()), j)
		}
		return names
	}
	nodeHCAs := func(n int) func(int) []string {
		return func(i int) []string {
			names := make([]string, n)
			for j := range names {
				names[j] = strings.Clone(node[(i+j)%len(node)])
			}
			return names
		}
	}
	for _, c := range []struct {
		name string
		// before floods before the first generation, after after it.
		before, after func(int) []string
		wantPairs     int
	}{
		{name: "unknown names before the node is known", before: randomNames, wantPairs: 0},
		{name: "unknown names", after: randomNames, wantPairs: 0},
		{name: "every HCA", after: nodeHCAs(256), wantPairs: maxHeldDevices},
		{name: "both caps", after: nodeHCAs(maxHeldDevices / maxHookHolders), wantPairs: maxHeldDevices},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := New(Options{Sysfs: t.TempDir(), Alive: alwaysAlive})
			base := heapAfterGC()
			flood := func(devices func(int) []string) {
				for i := range maxHookHolders {
					e.HookOutcome(floodReport(i, devices(i)))
				}
			}
			if c.before != nil {
				flood(c.before)
				if n := e.Holders.heldDevices; n != maxHeldDevices {
					t.Errorf("before the node is known: %d held devices, want the cap %d", n, maxHeldDevices)
				}
				checkBounded(t, e, base, "before the node is known")
			}
			generate(e, node)
			if c.after != nil {
				flood(c.after)
			}
			if n := e.Holders.heldDevices; n != c.wantPairs {
				t.Errorf("%d held devices, want %d", n, c.wantPairs)
			}
			checkBounded(t, e, base, "after the flood")
		})
	}
}

// checkBounded checks the heap e's table keeps (since base) and the heap's
// peak during one scrape of it.
func checkBounded(t *testing.T, e *Exporter, base int64, when string) {
	t.Helper()
	grown := heapAfterGC() - base
	if grown > maxFloodHeap {
		t.Errorf("%s: the heap grew %.1f MiB, more than %d MiB", when, float64(grown)/(1<<20), maxFloodHeap>>20)
	}
	stop := sampleHeapPeak()
	size := scrapeDiscarding(e.Handler())
	peak := stop()
	if peak > maxFloodScrapePeak {
		t.Errorf("%s: one scrape peaked at %.1f MiB of heap, more than %d MiB", when, float64(peak)/(1<<20), maxFloodScrapePeak>>20)
	}
	t.Logf("%s: %d pairs of %d containers keep %.1f MiB of heap; a scrape of %.1f MiB peaked at %.1f MiB",
		when, e.Holders.heldDevices, len(e.Holders.hooked), float64(grown)/(1<<20), float64(size)/(1<<20), float64(peak)/(1<<20))
}
