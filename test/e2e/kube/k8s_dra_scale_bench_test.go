package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/dradriver"
	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/watch"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// apiMemory is the API server's resident set and Go heap in use.
type apiMemory struct{ rss, heap float64 }

// apiServerMemory reads both from one scrape of the API server.
func apiServerMemory(tb testing.TB, k *e2e.KubeEnv) apiMemory {
	tb.Helper()
	samples := apiServerScrape(tb, k)
	value := func(name string) float64 {
		found := metrics.Find(samples, name, nil)
		if len(found) != 1 {
			tb.Fatalf("the API server exports %d samples of %s, want 1", len(found), name)
		}
		return found[0].Value
	}
	return apiMemory{rss: value("process_resident_memory_bytes"), heap: value("go_memstats_heap_inuse_bytes")}
}

// simNode is a node without a kubelet whose DRA driver runs in the test
// process: the driver's own code (dradriver.Driver, its kubeletplugin
// helper and ResourceSlice controller) behind the watch's own debounce
// (watch.Loop), fed by simulated events instead of netlink and uevents.
// Its hardware is seed 002's, as discovered from the fixture; a port flip
// changes the port's state in its model.
type simNode struct {
	name        string
	base        model.Node
	events      chan watch.Event
	generations atomic.Int64

	mu   sync.Mutex
	down map[string]bool // ibdev whose ports are DOWN
}

func (s *simNode) model() model.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.base
	n.Devices = slices.Clone(s.base.Devices)
	for i, d := range n.Devices {
		if !s.down[d.Name] {
			continue
		}
		ports := slices.Clone(d.Ports)
		for j := range ports {
			ports[j].State, ports[j].PhysState = "DOWN", "Disabled"
		}
		n.Devices[i].Ports = ports
	}
	return n
}

func (s *simNode) setDown(ibdev string, down bool) {
	s.mu.Lock()
	s.down[ibdev] = down
	s.mu.Unlock()
	s.events <- watch.Event{Source: "uevent", Detail: ibdev + " port state"}
}

// run serves the node's driver until ctx ends.
func (s *simNode) run(ctx context.Context, client kubernetes.Interface, dir string, cfg config.Config, log logrus.FieldLogger) error {
	drv, err := dradriver.New(dradriver.Options{
		Name: apis.Group, NodeName: s.name, Client: client,
		PluginDir: filepath.Join(dir, "plugins"), RegistrarDir: filepath.Join(dir, "registry"),
		Log: log.WithField("node", s.name),
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(drv.RegistrarDir, 0o750); err != nil {
		return err
	}
	loop := &watch.Loop{
		Generate: func(context.Context) (watch.State, error) {
			s.generations.Add(1)
			n := s.model()
			drv.Update(n, cfg)
			return watch.State{Node: n}, nil
		},
		Events:   s.events,
		Debounce: cfg.Watch.Debounce.Duration,
		Rescan:   cfg.Watch.RescanInterval.Duration,
		Log:      log,
	}
	errs := make(chan error, 2)
	go func() { errs <- loop.Run(ctx) }()
	go func() { errs <- drv.Run(ctx) }()
	return errors.Join(<-errs, <-errs)
}

// createSimNode creates a Ready Node object with room for pods; no kubelet
// will ever renew its lease, so the pods scheduled there tolerate the
// taints the node lifecycle controller adds.
func createSimNode(ctx context.Context, c kubernetes.Interface, name string) error {
	_, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{"kubernetes.io/hostname": name, simNodeLabel: "true"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	room := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods: resource.MustParse("110"),
	}
	status, err := json.Marshal(map[string]corev1.NodeStatus{"status": {
		Capacity: room, Allocatable: room,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Simulated",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}},
	}})
	if err != nil {
		return err
	}
	// A patch: the node controllers change the new Node at once.
	_, err = c.CoreV1().Nodes().PatchStatus(ctx, name, status)
	return err
}

const simNodeLabel = "bench.rdma-cdi/simulated"

// wantPools is nil when our driver's slices belong to want pools (nodes).
func wantPools(ctx context.Context, c kubernetes.Interface, want int) error {
	list, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + apis.Group})
	if err != nil {
		return err
	}
	pools := map[string]bool{}
	for _, s := range list.Items {
		pools[s.Spec.Pool.Name] = true
	}
	if len(pools) != want {
		return fmt.Errorf("the slices of %d nodes, want %d", len(pools), want)
	}
	return nil
}

// scalePod asks for one exclusive HCA and tolerates every taint (its node
// has no kubelet: it is scheduled, never run).
func scalePod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{simNodeLabel: "true"},
			Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			ResourceClaims: []corev1.PodResourceClaim{{
				Name: "rdma", ResourceClaimTemplateName: ptr.To("one-hca"),
			}},
			Containers: []corev1.Container{{
				Name: "c", Image: e2e.BB.Ref,
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "rdma"}}},
			}},
		},
	}
}

// BenchmarkKubeDRAScale runs 200 simulated nodes of seed 002's hardware
// (9 HCAs each) against the real API server, beside the real node, then:
//
//   - churn: for a minute every simulated node has one HCA's port go down
//     and come back 5 s later, and an address event every second (which
//     changes nothing the slice shows); the API server counts the slice
//     writes (apiserver_request_total);
//   - schedule: 200 pods, each with a claim for one HCA, are created at
//     once; the real scheduler allocates them, and no two claims get the
//     same device.
//
// It reports the API server's resident memory and Go heap before the nodes,
// with the Node objects alone, with their slices, and with the claims, and
// the time to publish and to schedule.
//
//	go test ./test/e2e/kube -run '^$' -bench BenchmarkKubeDRAScale -benchtime 1x -timeout 30m
func BenchmarkKubeDRAScale(b *testing.B) {
	nodes := 200
	if s := os.Getenv("RDMA_CDI_SCALE_NODES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("RDMA_CDI_SCALE_NODES=%q: want a node count", s)
		}
		nodes = n
	}
	const churn = time.Minute
	fixture := e2e.SharedFixtureNode(b, "seed002")
	k := e2e.DRANode(b, fixture, 9)
	admin := k.Clientset(b)
	res, err := discover.Discover(discover.Options{Roots: model.Roots{Sysfs: fixture.Sys, Dev: fixture.Dev}, SkipNet: true})
	if err != nil {
		b.Fatal(err)
	}
	cfg := config.Default()
	quiet := logrus.New()
	quiet.SetLevel(logrus.ErrorLevel)
	var driverErrors atomic.Int64
	quiet.AddHook(countingHook{&driverErrors})
	quiet.SetOutput(b.Output())

	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		var running sync.WaitGroup
		sims := make([]*simNode, nodes)
		b.Cleanup(func() {
			cancel()
			running.Wait()
			removeSimNodes(b, k, admin)
		})

		memBefore := apiServerMemory(b, k)
		for i := range sims {
			s := &simNode{name: fmt.Sprintf("sim-%03d", i), base: res.Node, events: make(chan watch.Event, 64), down: map[string]bool{}}
			sims[i] = s
			if err := createSimNode(ctx, admin, s.name); err != nil {
				b.Fatalf("node %s: %v", s.name, err)
			}
		}
		time.Sleep(5 * time.Second) // let the API server's caches settle
		memNodes := apiServerMemory(b, k)
		writesBefore := sliceWrites(b, k)
		start := time.Now()
		for _, s := range sims {
			client := k.Clientset(b) // a node's own client and rate limit
			dir := filepath.Join(b.TempDir(), s.name)
			running.Add(1)
			go func() {
				defer running.Done()
				if err := s.run(ctx, client, dir, cfg, quiet); err != nil {
					b.Errorf("node %s: %v", s.name, err)
				}
			}()
		}
		mustWait(b, 5*time.Minute, func() error { return wantPools(ctx, admin, nodes+1) })
		published := time.Since(start)
		publishWrites := sliceWrites(b, k) - writesBefore
		time.Sleep(5 * time.Second)
		memSlices := apiServerMemory(b, k)

		// Churn.
		writesBefore = sliceWrites(b, k)
		var events atomic.Int64
		churnCtx, stopChurn := context.WithTimeout(ctx, churn)
		var churning sync.WaitGroup
		for i, s := range sims {
			churning.Add(1)
			go func() {
				defer churning.Done()
				r := rand.New(rand.NewPCG(uint64(i), 42))
				flipAt := time.Duration(r.Int64N(int64(churn - 10*time.Second)))
				ibdev := s.base.Devices[r.IntN(len(s.base.Devices))].Name
				tick := time.NewTicker(time.Second)
				defer tick.Stop()
				flip := time.After(flipAt)
				var back <-chan time.Time
				for {
					select {
					case <-churnCtx.Done():
						return
					case <-tick.C:
						s.events <- watch.Event{Source: "netlink", Detail: "address changed"}
						events.Add(1)
					case <-flip:
						s.setDown(ibdev, true)
						events.Add(1)
						back = time.After(5 * time.Second)
					case <-back:
						s.setDown(ibdev, false)
						events.Add(1)
					}
				}
			}()
		}
		churning.Wait()
		stopChurn()
		time.Sleep(2 * cfg.Watch.Debounce.Duration) // the last generations' writes
		churnWrites := sliceWrites(b, k) - writesBefore
		var generations int64
		for _, s := range sims {
			generations += s.generations.Load()
		}

		// Scheduling.
		ns := "scale"
		k.MustKubectl(b, "create", "namespace", ns)
		k.Apply(b, e2e.ClaimTemplate(ns, "one-hca", "hca", "", ""))
		schedStart := time.Now()
		for i := range nodes {
			if _, err := admin.CoreV1().Pods(ns).Create(ctx, scalePod(ns, fmt.Sprintf("p-%03d", i)), metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		mustWait(b, 10*time.Minute, func() error {
			pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			bound := 0
			for _, p := range pods.Items {
				if p.Spec.NodeName != "" {
					bound++
				}
			}
			if bound < nodes {
				return fmt.Errorf("%d of %d pods scheduled", bound, nodes)
			}
			return nil
		})
		scheduled := time.Since(schedStart)
		time.Sleep(5 * time.Second)
		memClaims := apiServerMemory(b, k)
		checkNoSharedDevice(b, ctx, admin, ns, nodes)

		mb := func(v float64) float64 { return v / (1 << 20) }
		perNodeMin := float64(nodes) * churn.Minutes()
		b.ReportMetric(float64(nodes), "nodes")
		b.ReportMetric(published.Seconds(), "s-to-publish")
		b.ReportMetric(float64(publishWrites)/float64(nodes), "writes/node-at-start")
		b.ReportMetric(float64(events.Load())/perNodeMin, "events/node/min")
		b.ReportMetric(float64(generations)/perNodeMin, "generations/node/min")
		b.ReportMetric(float64(churnWrites)/perNodeMin, "slice-writes/node/min")
		for _, m := range []struct {
			phase string
			mem   apiMemory
		}{{"before", memBefore}, {"nodes", memNodes}, {"slices", memSlices}, {"claims", memClaims}} {
			b.ReportMetric(mb(m.mem.rss), "apiserver-rss-MiB-"+m.phase)
			b.ReportMetric(mb(m.mem.heap), "apiserver-heap-MiB-"+m.phase)
		}
		b.ReportMetric(scheduled.Seconds(), "s-to-schedule")
		b.ReportMetric(float64(nodes)/scheduled.Seconds(), "pods/s")
		b.ReportMetric(float64(driverErrors.Load()), "driver-errors")
		// Two port changes per node, one write each, and nothing for the
		// address events: more means the debounce or the slice comparison
		// failed.
		if float64(churnWrites) > 2.5*float64(nodes) {
			b.Errorf("%d slice writes for %d nodes with 2 port changes each", churnWrites, nodes)
		}
	}
}

// checkNoSharedDevice checks that the n claims in ns are allocated, each
// on its pod's node, and that no device went to two of them.
func checkNoSharedDevice(tb testing.TB, ctx context.Context, c kubernetes.Interface, ns string, n int) {
	tb.Helper()
	claims, err := c.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	if len(claims.Items) != n {
		tb.Fatalf("%d claims, want %d", len(claims.Items), n)
	}
	holder := map[string]string{}
	for _, cl := range claims.Items {
		if cl.Status.Allocation == nil {
			tb.Fatalf("claim %s is not allocated", cl.Name)
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			id := r.Pool + "/" + r.Device
			if other, ok := holder[id]; ok {
				tb.Errorf("device %s allocated to %s and %s", id, other, cl.Name)
			}
			holder[id] = cl.Name
		}
	}
}

// removeSimNodes deletes the scale namespace and the simulated nodes, and
// waits until the garbage collector has removed their slices (owned by
// their Node), so the shared node is as the other tests expect it.
func removeSimNodes(tb testing.TB, k *e2e.KubeEnv, c kubernetes.Interface) {
	ctx := context.Background()
	zero := int64(0)
	_ = c.CoreV1().Pods("scale").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	_, _, _ = k.Kubectl("delete", "namespace", "scale", "--ignore-not-found", "--wait=false")
	if err := c.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: simNodeLabel + "=true"}); err != nil {
		tb.Errorf("deleting the simulated nodes: %v", err)
		return
	}
	mustWait(tb, 3*time.Minute, func() error { return wantPools(ctx, c, 1) })
}

// mustWait is waitFor failing tb.
func mustWait(tb testing.TB, d time.Duration, ok func() error) {
	tb.Helper()
	if err := e2e.WaitFor(context.Background(), d, ok); err != nil {
		tb.Fatalf("after %v: %v", d, err)
	}
}

// countingHook counts the log entries at error level.
type countingHook struct{ n *atomic.Int64 }

func (h countingHook) Levels() []logrus.Level { return []logrus.Level{logrus.ErrorLevel} }
func (h countingHook) Fire(*logrus.Entry) error {
	h.n.Add(1)
	return nil
}
