package reliability

// Kubernetes under faults: pods with HCAs created and deleted
// without pause on the real kubelet and control plane while ports flap and
// addresses change (TestKubeChurn), and 50 claims at once on one node
// (TestKubeFiftyClaims). Both run on seed 002's node (e2e.KubeNode) with
// the chart installed as operators do, and compare what the node and the
// agent hold at the end with what they held at the start.
//
//	go test ./test/reliability -run 'TestKubeChurn|TestKubeFiftyClaims' -v -count=1 -timeout 30m
//	RDMA_CDI_SOAK=30m go test ./test/reliability -run '^TestKubeChurn$' -v -count=1 -timeout 60m
//
// Figures are in the "RESULT kube-..." lines.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/dradriver"
	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
	"github.com/rdma-cdi/rdma-cdi/pkg/metricsauth"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

const (
	kubeDriver = "rdma.example.com"
	// agentLabel selects the chart's agent pods.
	agentLabel = "app.kubernetes.io/name=rdma-cdi"
	// bandwidth is the capacity a shareable HCA offers (Gb/s).
	bandwidth = resourceapi.QualifiedName(apis.CapacityBandwidth)
	// podReadyTimeout bounds one pod's create-to-Ready on a loaded 2-core
	// machine; podGoneTimeout its deletion.
	podReadyTimeout = 3 * time.Minute
	podGoneTimeout  = 2 * time.Minute
	// slowStart: a start that took longer is logged with its events.
	slowStart = 30 * time.Second
)

// Seed 002: mlx5_0/eth0 is the management NIC (default route), mlx5_1..8
// on eth1..8 the RoCE HCAs NCCL uses, 100 Gb/s each.
var (
	seedRoCE  = []string{"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8"}
	seedFlaps = [][2]string{{"mlx5_7", "eth7"}, {"mlx5_8", "eth8"}} // ports that go down and up
	seedAddrs = []string{"eth1", "eth2", "eth3", "eth4", "eth5", "eth6"}
)

// soakDuration is the churn's length: $RDMA_CDI_SOAK (`make soak`: 30m),
// else 1 minute, half with each of the agent's modes: 30 s of each mode
// sees every fault several times (ports flap every 6 s, an address moves)
// and some 20 pod starts, and make test's budget is the limit; make soak
// runs it long.
func soakDuration(t *testing.T) time.Duration {
	s := os.Getenv("RDMA_CDI_SOAK")
	if s == "" {
		return time.Minute
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 20*time.Second {
		t.Fatalf("RDMA_CDI_SOAK=%q: want a duration of at least 20s, such as 30m", s)
	}
	return d
}

// kubeCluster is seed 002's node on the real control plane (the same one
// for both tests of this binary), with a client-go client that dials into
// the node's network namespace.
type kubeCluster struct {
	k      *e2e.KubeEnv
	node   *e2e.FixtureNode
	cs     *kubernetes.Clientset
	uverbs map[string]string // uverbsN -> ibdev, from the node's sysfs
}

func newKubeCluster(t *testing.T) *kubeCluster {
	t.Helper()
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{
		FeatureGates: map[string]bool{"DRAExtendedResource": true},
		Images:       []string{e2e.Glibc.DockerArchive(t)},
	})
	cfg, err := clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
	must(t, err)
	cfg.Dial = k.DialContext
	cfg.QPS, cfg.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	c := &kubeCluster{k: k, node: node, cs: cs, uverbs: map[string]string{}}
	ents, err := os.ReadDir(filepath.Join(node.Sys, "class", "infiniband_verbs"))
	must(t, err)
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join(node.Sys, "class", "infiniband_verbs", e.Name(), "ibdev")); err == nil {
			c.uverbs[e.Name()] = strings.TrimSpace(string(b))
		}
	}
	return c
}

// namespace makes a namespace for the test, deleted (and waited for) at
// its end, once its default ServiceAccount exists.
func (c *kubeCluster) namespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := e2e.UniqueID(prefix)
	ctx := context.Background()
	_, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(t, err)
	t.Cleanup(func() {
		fg := metav1.DeletePropagationForeground
		if err := c.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
			t.Errorf("deleting namespace %s: %v", ns, err)
			return
		}
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
			if _, err := c.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("namespace %s still there 3 minutes after its deletion", ns)
				return
			}
		}
	})
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(300 * time.Millisecond) {
		if _, err := c.cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return ns
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespace %s has no default ServiceAccount after a minute", ns)
		}
	}
}

// sliceDevice is one device of our driver's ResourceSlice.
type sliceDevice struct {
	ibdev     string
	capacity  int64 // bandwidth (Gb/s) when shareable, else 1 (one holder)
	shareable bool
}

// waitSlice waits until our driver's slices on the node list want devices,
// and returns them by device name.
func (c *kubeCluster) waitSlice(t *testing.T, want int) map[string]sliceDevice {
	t.Helper()
	ctx := context.Background()
	var got map[string]sliceDevice
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		list, err := c.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		must(t, err)
		got = map[string]sliceDevice{}
		for _, s := range list.Items {
			if s.Spec.Driver != kubeDriver || s.Spec.NodeName == nil || *s.Spec.NodeName != c.k.NodeName {
				continue
			}
			for _, d := range s.Spec.Devices {
				sd := sliceDevice{capacity: 1}
				if a, ok := d.Attributes["ibdev"]; ok && a.StringValue != nil {
					sd.ibdev = *a.StringValue
				}
				if d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations {
					if bw, ok := d.Capacity[bandwidth]; ok {
						sd.shareable, sd.capacity = true, bw.Value.Value()
					}
				}
				got[d.Name] = sd
			}
		}
		if len(got) == want {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("our ResourceSlice lists %d devices, want %d: %v", len(got), want, got)
		}
	}
}

func allShareable(devs map[string]sliceDevice) bool {
	for _, d := range devs {
		if d.ibdev != "mlx5_0" && !d.shareable {
			return false
		}
	}
	return len(devs) > 0
}

// setPort brings an HCA's port and its netdev down or up on the node, as
// the kernel reports a link loss (the fixture's sysfs state and the netdev
// in the node's network namespace).
func (c *kubeCluster) setPort(ibdev, netdev string, up bool) error {
	state, link := "1: DOWN", "down"
	if up {
		state, link = "4: ACTIVE", "up"
	}
	if err := os.WriteFile(filepath.Join(c.node.Sys, "class", "infiniband", ibdev, "ports", "1", "state"), []byte(state+"\n"), 0o644); err != nil {
		return err
	}
	if out, err := c.k.InNode("ip", "link", "set", netdev, link).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set %s %s: %v: %s", netdev, link, err, out)
	}
	return nil
}

func (c *kubeCluster) ipAddr(op, addr, dev string) error {
	if out, err := c.k.InNode("ip", "addr", op, addr, "dev", dev).CombinedOutput(); err != nil {
		return fmt.Errorf("ip addr %s %s dev %s: %v: %s", op, addr, dev, err, out)
	}
	return nil
}

// faultCounts are the faults injected so far.
type faultCounts struct{ flaps, addrChanges atomic.Int64 }

// faults flaps seedFlaps' ports in turn (down 2 s, then up) and moves an
// extra address from one RoCE netdev to the next, every 6 s, until stop is
// closed; then it leaves every port up and removes its address.
func (c *kubeCluster) faults(t *testing.T, stop <-chan struct{}, n *faultCounts) {
	added := ""
	addedDev := ""
	defer func() {
		for _, p := range seedFlaps {
			if err := c.setPort(p[0], p[1], true); err != nil {
				t.Errorf("restoring %s: %v", p[0], err)
			}
		}
		if added != "" {
			if err := c.ipAddr("del", added, addedDev); err != nil {
				t.Errorf("removing the test's address: %v", err)
			}
		}
	}()
	wait := func(d time.Duration) bool {
		select {
		case <-stop:
			return false
		case <-time.After(d):
			return true
		}
	}
	for i := 0; ; i++ {
		p := seedFlaps[i%len(seedFlaps)]
		if err := c.setPort(p[0], p[1], false); err != nil {
			t.Errorf("port flap: %v", err)
			return
		}
		n.flaps.Add(1)
		ok := wait(2 * time.Second)
		if err := c.setPort(p[0], p[1], true); err != nil {
			t.Errorf("port flap: %v", err)
			return
		}
		if !ok {
			return
		}
		if added != "" {
			if err := c.ipAddr("del", added, addedDev); err != nil {
				t.Errorf("address change: %v", err)
				return
			}
			added = ""
			n.addrChanges.Add(1)
		}
		dev, addr := seedAddrs[i%len(seedAddrs)], fmt.Sprintf("10.199.%d.7/24", i%250)
		if err := c.ipAddr("add", addr, dev); err != nil {
			t.Errorf("address change: %v", err)
			return
		}
		added, addedDev = addr, dev
		n.addrChanges.Add(1)
		if !wait(4 * time.Second) {
			return
		}
	}
}

// agentScraper reads the agent's /metrics (127.0.0.1:9477 in the node's
// network namespace) with the token of a service account bound to the
// chart's metrics-reader role, issued for the endpoint's audience, as a
// cluster's Prometheus gets it.
type agentScraper struct{ client *http.Client }

func newAgentScraper(t *testing.T, c *kubeCluster, valid time.Duration) *agentScraper {
	t.Helper()
	ctx := context.Background()
	const name = "reliability-scraper"
	_, err := c.cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = c.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: "default"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: e2e.AgentRelease + "-metrics-reader"},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	secs := int64(max(2*time.Hour, 3*valid) / time.Second)
	tok, err := c.cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs, Audiences: []string{metricsauth.Audience}}}, metav1.CreateOptions{})
	must(t, err)
	rt := transport.NewBearerAuthRoundTripper(tok.Status.Token, &http.Transport{DialContext: c.k.DialContext})
	return &agentScraper{client: &http.Client{Timeout: 15 * time.Second, Transport: rt}}
}

func (s *agentScraper) scrape() ([]metrics.Sample, error) {
	resp, err := s.client.Get("http://127.0.0.1:9477/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("agent /metrics: %s", resp.Status)
	}
	return metrics.ParseScrape(resp.Body)
}

// sum is the sum of the samples of name with labels want.
func sum(samples []metrics.Sample, name string, want map[string]string) float64 {
	v := 0.0
	for _, s := range metrics.Find(samples, name, want) {
		v += s.Value
	}
	return v
}

// agentFigures are the agent process's own figures (Go's and the process
// collector's, registered in pkg/metrics), and its counters of writes.
type agentFigures struct {
	goroutines, fds, rss, heap                  float64
	slicePublishes, lwUpdates, specWrites, gens float64
}

func (s *agentScraper) figures() (agentFigures, error) {
	m, err := s.scrape()
	if err != nil {
		return agentFigures{}, err
	}
	f := agentFigures{
		goroutines: sum(m, "go_goroutines", nil), fds: sum(m, "process_open_fds", nil),
		rss: sum(m, "process_resident_memory_bytes", nil), heap: sum(m, "go_memstats_heap_inuse_bytes", nil),
		slicePublishes: sum(m, "rdma_cdi_resourceslice_publishes_total", nil), lwUpdates: sum(m, "rdma_cdi_listandwatch_updates_total", nil),
		specWrites: sum(m, "rdma_cdi_spec_writes_total", nil), gens: sum(m, "rdma_cdi_generations_total", nil),
	}
	if len(metrics.Find(m, "go_goroutines", nil)) == 0 || len(metrics.Find(m, "process_resident_memory_bytes", nil)) == 0 {
		return f, errors.New("the agent's /metrics has no go_goroutines or process_resident_memory_bytes")
	}
	return f, nil
}

// quietFigures are the agent's figures at rest: goroutines and open files
// as the least of three scrapes a second apart (a scrape's own and a
// passing generation's are not the agent's), the rest from the last.
func (s *agentScraper) quietFigures(t *testing.T) agentFigures {
	t.Helper()
	var out agentFigures
	for i := 0; i < 3; i++ {
		if i > 0 {
			time.Sleep(time.Second)
		}
		f, err := s.figures()
		must(t, err)
		if i > 0 {
			f.goroutines, f.fds = min(f.goroutines, out.goroutines), min(f.fds, out.fds)
		}
		out = f
	}
	return out
}

// apiWrites are the API server's own counts (apiserver_request_total, dry
// runs left out) of the writes that concern the driver.
type apiWrites struct {
	sliceWrites      float64 // ResourceSlices created, updated, patched, deleted: only our driver writes them
	statusApplies    float64 // server-side applies of claims' status: the driver's status entries
	statusApplyFails float64 // of which refused (an error but 404)
	statusApplyGone  float64 // of which for a claim already deleted (404: the driver is done with it)
	otherStatus      float64 // other writes of claims' status: the scheduler's allocations, the controller's reservations
}

func (c *kubeCluster) apiWrites(t *testing.T) apiWrites {
	t.Helper()
	raw, err := c.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	must(t, err)
	samples, err := metrics.ParseScrape(bytes.NewReader(raw))
	must(t, err)
	var w apiWrites
	for _, s := range metrics.Find(samples, "apiserver_request_total", map[string]string{"dry_run": ""}) {
		verb, res := s.Labels["verb"], s.Labels["resource"]
		write := slices.Contains([]string{"POST", "PUT", "PATCH", "DELETE", "APPLY"}, verb)
		switch {
		case res == "resourceslices" && write:
			w.sliceWrites += s.Value
		case res == "resourceclaims" && s.Labels["subresource"] == "status" && verb == "APPLY":
			w.statusApplies += s.Value
			switch code := s.Labels["code"]; {
			case code == "404":
				w.statusApplyGone += s.Value
			case !strings.HasPrefix(code, "2"):
				w.statusApplyFails += s.Value
			}
		case res == "resourceclaims" && s.Labels["subresource"] == "status" && write:
			w.otherStatus += s.Value
		}
	}
	return w
}

func (w apiWrites) minus(o apiWrites) apiWrites {
	return apiWrites{w.sliceWrites - o.sliceWrites, w.statusApplies - o.statusApplies, w.statusApplyFails - o.statusApplyFails,
		w.statusApplyGone - o.statusApplyGone, w.otherStatus - o.otherStatus}
}

// quietWrites are the writes the API server serves in window while no pod
// holds a claim: a claim status apply then is a write the driver keeps
// making with nothing prepared, a retry that cannot succeed.
func (c *kubeCluster) quietWrites(t *testing.T, window time.Duration) apiWrites {
	t.Helper()
	before := c.apiWrites(t)
	time.Sleep(window)
	return c.apiWrites(t).minus(before)
}

// checkQuiet fails the test when the driver wrote claim statuses in quiet.
func (c *kubeCluster) checkQuiet(t *testing.T, quiet apiWrites, window time.Duration) {
	t.Helper()
	if quiet.statusApplies > 0 {
		var lines []string
		for _, l := range strings.Split(c.agentLog(t, 1<<20), "\n") {
			if strings.Contains(l, "trying again") {
				lines = append(lines, l)
			}
		}
		t.Errorf("the driver made %.0f claim status applies (%.0f refused) in the %v after every pod had gone and every entry was cleared; its last retries:\n%s",
			quiet.statusApplies, quiet.statusApplyFails, window, strings.Join(lines[max(0, len(lines)-5):], "\n"))
	}
}

const quietWindow = 15 * time.Second

// nodeFigures are what could leak on the node and in the API.
type nodeFigures struct {
	specs      []string // files in the node's /var/run/cdi and /etc/cdi
	sockets    []string // sockets under the kubelet's plugin dirs and /run/rdma-cdi
	checkpoint int      // claims in the DRA driver's checkpoint (0 when there is none)
	stale      []string // our driver's status entries on claims whose pods are gone
	agentPod   string
	restarts   int
	agent      agentFigures
}

func (c *kubeCluster) specFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{"/var/run/cdi", "/etc/cdi"} {
		ents, err := os.ReadDir(c.k.NodePath(dir))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, e := range ents {
			out = append(out, dir+"/"+e.Name())
		}
	}
	return out
}

func (c *kubeCluster) sockets() []string {
	var out []string
	for _, dir := range []string{"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/device-plugins", "/run/rdma-cdi"} {
		root := c.k.NodePath(dir)
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type()&fs.ModeSocket != 0 {
				out = append(out, dir+strings.TrimPrefix(p, root))
			}
			return nil
		})
	}
	sort.Strings(out)
	return out
}

func (c *kubeCluster) checkpointClaims(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(c.k.NodePath("/var/lib/kubelet/plugins/" + kubeDriver + "/" + dradriver.CheckpointFile))
	if os.IsNotExist(err) {
		return 0
	}
	must(t, err)
	cp, err := dradriver.DecodeCheckpoint(dradriver.CheckpointFile, b)
	if err != nil {
		t.Fatalf("the driver's checkpoint: %v", err)
	}
	return len(cp.Claims)
}

// staleStatuses lists our driver's status.devices entries on claims none
// of whose reserving pods exists any more, as namespace/claim/device.
func (c *kubeCluster) staleStatuses(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	claims, err := c.cs.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	must(t, err)
	var out []string
	for _, cl := range claims.Items {
		live := false
		for _, r := range cl.Status.ReservedFor {
			if r.Resource != "pods" {
				continue
			}
			if p, err := c.cs.CoreV1().Pods(cl.Namespace).Get(ctx, r.Name, metav1.GetOptions{}); err == nil && p.UID == r.UID {
				live = true
			}
		}
		if live {
			continue
		}
		for _, d := range cl.Status.Devices {
			if d.Driver == kubeDriver {
				out = append(out, cl.Namespace+"/"+cl.Name+"/"+d.Device)
			}
		}
	}
	return out
}

func (c *kubeCluster) agentPod(t *testing.T) (string, int) {
	t.Helper()
	pods, err := c.cs.CoreV1().Pods(e2e.AgentNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: agentLabel})
	must(t, err)
	if len(pods.Items) != 1 {
		t.Fatalf("%d agent pods, want 1", len(pods.Items))
	}
	p := pods.Items[0]
	restarts := 0
	for _, s := range p.Status.ContainerStatuses {
		restarts += int(s.RestartCount)
	}
	return p.Name, restarts
}

func (c *kubeCluster) figures(t *testing.T, s *agentScraper) nodeFigures {
	t.Helper()
	f := nodeFigures{specs: c.specFiles(t), sockets: c.sockets(), checkpoint: c.checkpointClaims(t), stale: c.staleStatuses(t)}
	f.agentPod, f.restarts = c.agentPod(t)
	f.agent = s.quietFigures(t)
	return f
}

// settle waits until the namespace has no pod, the driver's checkpoint no
// claim and no claim an entry of ours, and returns how long that took.
func (c *kubeCluster) settle(t *testing.T, ns string) time.Duration {
	t.Helper()
	start := time.Now()
	for deadline := start.Add(2 * time.Minute); ; time.Sleep(time.Second) {
		pods, err := c.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		must(t, err)
		cp, stale := c.checkpointClaims(t), c.staleStatuses(t)
		if len(pods.Items) == 0 && cp == 0 && len(stale) == 0 {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Errorf("not settled 2 minutes after the churn: %d pods, %d claims in the checkpoint, stale status entries %v\nagent:\n%s",
				len(pods.Items), cp, stale, c.agentLog(t, 3000))
			return time.Since(start)
		}
	}
}

// agentLog is the end of the agent's log.
func (c *kubeCluster) agentLog(t *testing.T, n int) string {
	pods := c.k.PodNames(t, e2e.AgentNamespace, agentLabel)
	if len(pods) == 0 {
		return "(no agent pod)"
	}
	for _, container := range []string{"dra", "device-plugin"} {
		if l := c.k.Logs(e2e.AgentNamespace, pods[0], container); !strings.HasPrefix(l, "no container") {
			return tail(l, n)
		}
	}
	return "(no agent log)"
}

// podRec is one pod of the churn as the test sees it: its create and Ready
// times, and where its Ready and its deletion fall in the order of events
// (seq), which the capacity check compares.
type podRec struct {
	name, kind         string
	created, readyAt   time.Time
	scheduledAt        time.Time
	readySeq, delSeq   int64
	pod                *corev1.Pod
	ready, gone, ended chan struct{}
	reason             string
}

// podTracker follows the pods of a namespace through an informer.
type podTracker struct {
	mu   sync.Mutex
	seq  int64
	pods map[string]*podRec
}

func (c *kubeCluster) trackPods(t *testing.T, ns string) *podTracker {
	t.Helper()
	tr := &podTracker{pods: map[string]*podRec{}}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory := informers.NewSharedInformerFactoryWithOptions(c.cs, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { tr.observe(o) },
		UpdateFunc: func(_, o any) { tr.observe(o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				tr.mu.Lock()
				defer tr.mu.Unlock()
				if r := tr.pods[p.Name]; r != nil {
					closeOnce(r.gone)
				}
			}
		},
	})
	must(t, err)
	factory.Start(stop)
	for typ, ok := range factory.WaitForCacheSync(stop) {
		if !ok {
			t.Fatalf("informer %v did not sync", typ)
		}
	}
	return tr
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (tr *podTracker) add(name, kind string) *podRec {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	r := &podRec{name: name, kind: kind, ready: make(chan struct{}), gone: make(chan struct{}), ended: make(chan struct{})}
	tr.pods[name] = r
	return r
}

func (tr *podTracker) observe(o any) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	r := tr.pods[p.Name]
	if r == nil {
		return
	}
	r.pod = p
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionTrue && r.scheduledAt.IsZero() {
			r.scheduledAt = time.Now()
		}
		if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && r.readySeq == 0 {
			tr.seq++
			r.readySeq, r.readyAt = tr.seq, time.Now()
			close(r.ready)
		}
	}
	if (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded) && p.DeletionTimestamp == nil {
		r.reason = fmt.Sprintf("phase %s: %s %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
		closeOnce(r.ended)
	}
}

// markDelete records that the test is about to delete r's pod: from here
// on its devices may go to another pod.
func (tr *podTracker) markDelete(r *podRec) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if r.delSeq == 0 {
		tr.seq++
		r.delSeq = tr.seq
	}
}

func (tr *podTracker) latest(r *podRec) *corev1.Pod {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return r.pod
}

// hold is a share of an HCA a pod held, from its Ready to its deletion.
type hold struct {
	pod, ibdev         string
	consumed, capacity int64
	from, to           int64
}

// overCapacity checks that at no point in the order of events the pods
// holding an HCA consumed more than it has (an exclusive holder consumes
// all of it), and lists the moments that did.
func overCapacity(holds []hold) []string {
	type event struct {
		seq   int64
		delta int64
		h     hold
	}
	byDev := map[string][]event{}
	for _, h := range holds {
		byDev[h.ibdev] = append(byDev[h.ibdev], event{h.from, h.consumed, h}, event{h.to, -h.consumed, h})
	}
	var out []string
	for dev, evs := range byDev {
		sort.Slice(evs, func(i, j int) bool { return evs[i].seq < evs[j].seq })
		var used int64
		live := map[string]int64{}
		for _, e := range evs {
			used += e.delta
			if e.delta > 0 {
				live[e.h.pod] = e.delta
			} else {
				delete(live, e.h.pod)
			}
			if used > e.h.capacity {
				out = append(out, fmt.Sprintf("%s: %d of %d used by %v", dev, used, e.h.capacity, live))
			}
		}
	}
	sort.Strings(out)
	return out
}

// podKind is one kind of churned pod.
type podKind struct {
	name string
	pod  func(ns, name string) *corev1.Pod
	// check returns what the pod holds, from what it sees and what it was
	// allocated, or why that is wrong.
	check func(r *churnRun, rec *podRec, seen []string) ([]hold, error)
}

// rdmaPod is a glibc pod (hostNetwork: the node has no CNI) running until
// deleted, with a claim and resource limits.
func rdmaPod(ns, name string, claim *corev1.PodResourceClaim, limits corev1.ResourceList) *corev1.Pod {
	grace, no := int64(1), false
	ctr := corev1.Container{
		Name: "main", Image: e2e.Glibc.Ref, ImagePullPolicy: corev1.PullNever,
		Command:   []string{"/bin/sh", "-c", "exec sleep 3600"},
		Resources: corev1.ResourceRequirements{Limits: limits},
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			HostNetwork: true, TerminationGracePeriodSeconds: &grace, AutomountServiceAccountToken: &no,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{ctr},
		},
	}
	if claim != nil {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{*claim}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: claim.Name}}
	}
	return p
}

func templatePod(template string) func(ns, name string) *corev1.Pod {
	return func(ns, name string) *corev1.Pod {
		return rdmaPod(ns, name, &corev1.PodResourceClaim{Name: "rdma", ResourceClaimTemplateName: &template}, nil)
	}
}

func claimPod(claim string) func(ns, name string) *corev1.Pod {
	return func(ns, name string) *corev1.Pod {
		return rdmaPod(ns, name, &corev1.PodResourceClaim{Name: "rdma", ResourceClaimName: &claim}, nil)
	}
}

func limitsPod(resourceName string, n int64) func(ns, name string) *corev1.Pod {
	return func(ns, name string) *corev1.Pod {
		return rdmaPod(ns, name, nil, corev1.ResourceList{corev1.ResourceName(resourceName): *resource.NewQuantity(n, resource.DecimalSI)})
	}
}

// hcaRequest asks one device of class.rdma.example.com, selected by cel
// ("" none), and bw Gb/s of its bandwidth (0: none asked, all of it).
func hcaRequest(class, cel string, bw int64) resourceapi.DeviceClaim {
	r := resourceapi.DeviceRequest{Name: "hca", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class + "." + kubeDriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
	}}
	if cel != "" {
		r.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: cel}}}
	}
	if bw > 0 {
		r.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{bandwidth: *resource.NewQuantity(bw, resource.DecimalSI)}}
	}
	return resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{r}}
}

// seenHCAs are the HCAs whose uverbs node is in the pod's /dev/infiniband.
func (c *kubeCluster) seenHCAs(ns, pod string) ([]string, error) {
	so, se, code, err := c.k.ExecInPod(ns, pod, "main", "ls", "/dev/infiniband")
	if err != nil || code != 0 {
		return nil, fmt.Errorf("ls /dev/infiniband in %s: exit %d, %v: %s", pod, code, err, se)
	}
	var out []string
	for _, f := range strings.Fields(so) {
		if strings.HasPrefix(f, "uverbs") {
			ib, ok := c.uverbs[f]
			if !ok {
				return nil, fmt.Errorf("pod %s has %s, which is no HCA of the node", pod, f)
			}
			out = append(out, ib)
		}
	}
	slices.Sort(out)
	return out, nil
}

// claimHolds are the devices of our driver allocated to the pod's claims,
// with the bandwidth each consumes.
func (c *kubeCluster) claimHolds(ns string, p *corev1.Pod, devs map[string]sliceDevice) ([]hold, error) {
	var names []string
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			names = append(names, *s.ResourceClaimName)
		}
	}
	for _, rc := range p.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil {
			names = append(names, *rc.ResourceClaimName)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("pod %s names no claim in its status", p.Name)
	}
	var out []hold
	for _, n := range names {
		cl, err := c.cs.ResourceV1().ResourceClaims(ns).Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if cl.Status.Allocation == nil {
			return nil, fmt.Errorf("claim %s of the Ready pod %s is not allocated", n, p.Name)
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			if r.Driver != kubeDriver {
				continue
			}
			d, ok := devs[r.Device]
			if !ok {
				return nil, fmt.Errorf("claim %s is allocated %s, not in the slice", n, r.Device)
			}
			h := hold{pod: p.Name, ibdev: d.ibdev, consumed: 1, capacity: d.capacity}
			if d.shareable {
				h.consumed = d.capacity // no share: all of it
				if q, ok := r.ConsumedCapacity[bandwidth]; ok {
					h.consumed = q.Value()
				}
			}
			out = append(out, h)
		}
	}
	return out, nil
}

func holdHCAs(hs []hold) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.ibdev)
	}
	slices.Sort(out)
	return out
}

// draCheck: the pod sees exactly the HCAs its claim was allocated.
func draCheck(r *churnRun, rec *podRec, seen []string) ([]hold, error) {
	hs, err := r.c.claimHolds(r.ns, r.tr.latest(rec), r.devs)
	if err != nil {
		return nil, err
	}
	if want := holdHCAs(hs); !slices.Equal(seen, want) {
		return nil, fmt.Errorf("pod %s sees HCAs %v; its claim was allocated %v", rec.name, seen, want)
	}
	return hs, nil
}

// exclusiveCheck: a pod given one exclusive rdma.example.com/hca unit sees
// one RoCE HCA, which it holds alone.
func exclusiveCheck(r *churnRun, rec *podRec, seen []string) ([]hold, error) {
	if len(seen) != 1 || !slices.Contains(seedRoCE, seen[0]) {
		return nil, fmt.Errorf("pod %s with one exclusive unit sees HCAs %v, want one of %v", rec.name, seen, seedRoCE)
	}
	return []hold{{pod: rec.name, ibdev: seen[0], consumed: 1, capacity: 1}}, nil
}

// sharedCheck: a pod given the shared rdma/hca sees the RoCE HCAs NCCL
// would use, the one port down at most left out, never the management NIC.
func sharedCheck(r *churnRun, rec *podRec, seen []string) ([]hold, error) {
	for _, s := range seen {
		if !slices.Contains(seedRoCE, s) {
			return nil, fmt.Errorf("pod %s with rdma/hca sees %v, beyond the RoCE HCAs %v", rec.name, seen, seedRoCE)
		}
	}
	if len(seen) < len(seedRoCE)-1 {
		return nil, fmt.Errorf("pod %s with rdma/hca sees %v, want the RoCE HCAs %v but one port down at most", rec.name, seen, seedRoCE)
	}
	return nil, nil
}

// churnRun is one phase of the churn: its pods and what they showed.
type churnRun struct {
	c    *kubeCluster
	ns   string
	tr   *podTracker
	devs map[string]sliceDevice

	mu        sync.Mutex
	starts    map[string]int
	slowest   map[string]time.Duration
	durations []time.Duration
	failures  []string
	holds     []hold
}

func (r *churnRun) fail(t *testing.T, rec *podRec, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.failures = append(r.failures, rec.name+": "+msg)
	n := len(r.failures)
	r.mu.Unlock()
	if n <= 3 { // the first failures in full
		t.Errorf("pod %s/%s: %s\n%s", r.ns, rec.name, msg, tail(r.c.k.Diagnose(r.ns, rec.name), 6000))
	} else {
		t.Errorf("pod %s/%s: %s", r.ns, rec.name, msg)
	}
}

// cycle creates one pod of kind, waits for it to be Ready, checks its
// devices, keeps it a moment and deletes it, waiting until it is gone.
func (r *churnRun) cycle(t *testing.T, kind podKind, i int, keep time.Duration) {
	ctx := context.Background()
	rec := r.tr.add(fmt.Sprintf("%s-%d", kind.name, i), kind.name)
	rec.created = time.Now()
	if _, err := r.c.cs.CoreV1().Pods(r.ns).Create(ctx, kind.pod(r.ns, rec.name), metav1.CreateOptions{}); err != nil {
		r.fail(t, rec, "create: %v", err)
		return
	}
	defer r.remove(t, rec)
	select {
	case <-rec.ready:
	case <-rec.ended:
		r.fail(t, rec, "ended before Ready: %s", rec.reason)
		return
	case <-time.After(podReadyTimeout):
		r.fail(t, rec, "not Ready %v after its creation", podReadyTimeout)
		return
	}
	took := rec.readyAt.Sub(rec.created)
	r.mu.Lock()
	r.starts[kind.name]++
	r.slowest[kind.name] = max(r.slowest[kind.name], took)
	r.durations = append(r.durations, took)
	r.mu.Unlock()
	if took > slowStart {
		r.tr.mu.Lock()
		scheduled := rec.scheduledAt.Sub(rec.created)
		r.tr.mu.Unlock()
		t.Logf("slow start: pod %s Ready %v after its creation (scheduled after %v); its events:\n%s",
			rec.name, took.Round(10*time.Millisecond), scheduled.Round(10*time.Millisecond), r.c.k.PodEvents(r.ns, rec.name))
	}
	seen, err := r.c.seenHCAs(r.ns, rec.name)
	if err != nil {
		r.fail(t, rec, "%v", err)
		return
	}
	hs, err := kind.check(r, rec, seen)
	if err != nil {
		r.fail(t, rec, "%v", err)
		return
	}
	time.Sleep(keep)
	r.tr.markDelete(rec)
	r.mu.Lock()
	for _, h := range hs {
		h.from, h.to = rec.readySeq, rec.delSeq
		r.holds = append(r.holds, h)
	}
	r.mu.Unlock()
}

func (r *churnRun) remove(t *testing.T, rec *podRec) {
	r.tr.markDelete(rec)
	grace := int64(1)
	err := r.c.cs.CoreV1().Pods(r.ns).Delete(context.Background(), rec.name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		r.fail(t, rec, "delete: %v", err)
		return
	}
	select {
	case <-rec.gone:
	case <-time.After(podGoneTimeout):
		r.fail(t, rec, "still there %v after its deletion", podGoneTimeout)
	}
}

// pct is the q-quantile of sorted durations.
func pct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[int(q*float64(len(d)-1)+0.5)].Round(10 * time.Millisecond)
}

func mib(b float64) string { return fmt.Sprintf("%.1f", b/(1<<20)) }

// phaseResult is what TestKubeChurn sums over its phases.
type phaseResult struct {
	starts    int
	failures  int
	durations []time.Duration
}

// churnPhase installs the agent in mode, churns pods of its kinds for dur
// while ports flap and addresses change, and compares the node's and the
// agent's figures after the churn with those before it.
func churnPhase(t *testing.T, c *kubeCluster, mode string, dur time.Duration) phaseResult {
	installed := time.Now()
	c.k.InstallAgent(t, mode, nil)
	ns := c.namespace(t, "churn-")
	ctx := context.Background()
	r := &churnRun{c: c, ns: ns, starts: map[string]int{}, slowest: map[string]time.Duration{}}
	var kinds []podKind
	switch mode {
	case "dra":
		r.devs = c.waitSlice(t, 9)
		// Shares where the API server keeps consumable capacity (1.36 on),
		// else RoCE claims of a whole HCA.
		shareClass, shareBW, namedBW := "roce", int64(0), int64(0)
		if allShareable(r.devs) {
			shareClass, shareBW, namedBW = "shared", 30, 20
		}
		for name, spec := range map[string]resourceapi.DeviceClaim{"whole": hcaRequest("roce", "", 0), "share": hcaRequest(shareClass, "", shareBW)} {
			_, err := c.cs.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourceapi.ResourceClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: spec}},
			}, metav1.CreateOptions{})
			must(t, err)
		}
		// One claim of its own, used by one pod after another: its status
		// entry must go with each pod.
		_, err := c.cs.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "named"},
			Spec:       resourceapi.ResourceClaimSpec{Devices: hcaRequest(shareClass, "", namedBW)},
		}, metav1.CreateOptions{})
		must(t, err)
		kinds = []podKind{
			{"whole-a", templatePod("whole"), draCheck}, {"whole-b", templatePod("whole"), draCheck},
			{"share", templatePod("share"), draCheck}, {"named", claimPod("named"), draCheck},
		}
	case "device-plugin":
		c.k.WaitNodeAllocatable(t, "rdma/hca", "1000", 2*time.Minute)
		c.k.WaitNodeAllocatable(t, "rdma.example.com/hca", "8", time.Minute)
		kinds = []podKind{
			{"shared", limitsPod("rdma/hca", 1), sharedCheck},
			{"excl-a", limitsPod("rdma.example.com/hca", 1), exclusiveCheck}, {"excl-b", limitsPod("rdma.example.com/hca", 1), exclusiveCheck},
		}
	default:
		t.Fatalf("mode %q", mode)
	}
	r.tr = c.trackPods(t, ns)
	scraper := newAgentScraper(t, c, dur)
	atInstall, err := scraper.figures()
	must(t, err)

	// One pod of each kind first: what the agent sets up once (informers,
	// connections, caches) is in the start figures, not in the growth.
	var wg sync.WaitGroup
	for _, kind := range kinds {
		wg.Add(1)
		go func() { defer wg.Done(); r.cycle(t, kind, 0, time.Second) }()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	c.settle(t, ns)
	before := c.figures(t, scraper)
	apiBefore := c.apiWrites(t)
	setup := time.Since(installed)

	// The churn: each kind's pods one after another, every kind at once,
	// while ports flap and addresses move.
	var faults faultCounts
	stop := make(chan struct{})
	var faultsDone, samplerDone sync.WaitGroup
	faultsDone.Add(1)
	go func() { defer faultsDone.Done(); c.faults(t, stop, &faults) }()
	var rssMax, rssMin float64
	samplerDone.Add(1)
	go func() {
		defer samplerDone.Done()
		for {
			if f, err := scraper.figures(); err == nil {
				rssMax = max(rssMax, f.rss)
				if rssMin == 0 || f.rss < rssMin {
					rssMin = f.rss
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Second):
			}
		}
	}()
	begin := time.Now()
	deadline := begin.Add(dur)
	for _, kind := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; time.Now().Before(deadline); i++ {
				r.cycle(t, kind, i, time.Duration(500+rand.IntN(2500))*time.Millisecond)
			}
		}()
	}
	wg.Wait()
	churned := time.Since(begin)
	close(stop)
	faultsDone.Wait()
	samplerDone.Wait()

	settled := c.settle(t, ns)
	api := c.apiWrites(t).minus(apiBefore)
	quiet := c.quietWrites(t, quietWindow)
	after := c.figures(t, scraper)
	statusRetries := strings.Count(c.agentLog(t, 1<<30), "trying again")

	sort.Slice(r.durations, func(i, j int) bool { return r.durations[i] < r.durations[j] })
	starts := 0
	var kindStarts []string
	for _, k := range kinds {
		starts += r.starts[k.name]
		kindStarts = append(kindStarts, fmt.Sprintf("%s:%d(max %v)", k.name, r.starts[k.name], r.slowest[k.name].Round(10*time.Millisecond)))
	}
	over := overCapacity(r.holds)
	b, a := before.agent, after.agent
	t.Logf("RESULT kube-churn phase=%s churn=%v setup=%v starts=%d failures=%d start_p50=%v start_p95=%v start_max=%v kinds=%s port_flaps=%d addr_changes=%d holds_checked=%d over_capacity=%d",
		mode, churned.Round(time.Second), setup.Round(time.Second), starts, len(r.failures), pct(r.durations, 0.5), pct(r.durations, 0.95), pct(r.durations, 1),
		strings.Join(kindStarts, ","), faults.flaps.Load(), faults.addrChanges.Load(), len(r.holds), len(over))
	t.Logf("RESULT kube-churn phase=%s leaks(start->end) cdi_specs=%d->%d stale_status_entries=%d->%d checkpoint_claims=%d->%d sockets=%d->%d goroutines=%.0f->%.0f open_fds=%.0f->%.0f rss_mib=%s->%s heap_inuse_mib=%s->%s (at_install: goroutines=%.0f rss_mib=%s; during churn rss_mib %s..%s) agent_restarts=%d settle=%v",
		mode, len(before.specs), len(after.specs), len(before.stale), len(after.stale), before.checkpoint, after.checkpoint, len(before.sockets), len(after.sockets),
		b.goroutines, a.goroutines, b.fds, a.fds, mib(b.rss), mib(a.rss), mib(b.heap), mib(a.heap),
		atInstall.goroutines, mib(atInstall.rss), mib(rssMin), mib(rssMax), after.restarts-before.restarts, settled.Round(100*time.Millisecond))
	t.Logf("RESULT kube-churn phase=%s api_writes slice_writes=%.0f claim_status_applies=%.0f (refused %.0f, claim deleted %.0f) other_claim_status_writes=%.0f agent: slice_publishes=%.0f listandwatch_updates=%.0f spec_writes=%.0f generations=%.0f status_retries_logged=%d; in the %v after: claim_status_applies=%.0f (refused %.0f)",
		mode, api.sliceWrites, api.statusApplies, api.statusApplyFails, api.statusApplyGone, api.otherStatus,
		a.slicePublishes-b.slicePublishes, a.lwUpdates-b.lwUpdates, a.specWrites-b.specWrites, a.gens-b.gens, statusRetries,
		quietWindow, quiet.statusApplies, quiet.statusApplyFails)
	c.checkQuiet(t, quiet, quietWindow)

	// No device beyond its capacity, no exclusive device twice.
	for _, o := range over {
		t.Errorf("over capacity: %s", o)
	}
	// Back to the start.
	if !slices.Equal(before.specs, after.specs) {
		t.Errorf("CDI spec files: %v at the start, %v at the end", before.specs, after.specs)
	}
	if !slices.Equal(before.sockets, after.sockets) {
		t.Errorf("sockets: %v at the start, %v at the end", before.sockets, after.sockets)
	}
	if len(after.stale) > 0 || after.checkpoint != 0 {
		t.Errorf("after the churn: status entries of gone pods %v, %d claims in the driver's checkpoint", after.stale, after.checkpoint)
	}
	if after.agentPod != before.agentPod || after.restarts != before.restarts {
		t.Errorf("the agent restarted: pod %s (%d restarts) at the start, %s (%d) at the end\n%s",
			before.agentPod, before.restarts, after.agentPod, after.restarts, c.agentLog(t, 4000))
	}
	// Goroutines and open files back where they were (a scrape's own
	// connection and a passing generation's work are a few either way).
	// Memory is bounded per pod start, not by a floor a short run cannot
	// reach: the Go heap in use may grow by 2 MiB (the runtime's first
	// growth and the caches a churn fills: +0.8 MiB measured after 43
	// starts) plus 16 KiB a start, so a leak of 100 KiB a pod fails from
	// 25 starts on (the 3-minute run makes about 40 a mode); the resident
	// set, which the runtime returns to the OS lazily, by 8 MiB plus 64 KiB
	// a start.
	if a.goroutines > b.goroutines+8 {
		t.Errorf("the agent's goroutines: %.0f at the start, %.0f after %d pods", b.goroutines, a.goroutines, starts)
	}
	if a.fds > b.fds+4 {
		t.Errorf("the agent's open files: %.0f at the start, %.0f after %d pods", b.fds, a.fds, starts)
	}
	if limit := b.heap + 2<<20 + float64(starts)*(16<<10); a.heap > limit {
		t.Errorf("the agent's Go heap in use: %s MiB at the start, %s MiB after %d pods (at most %s)", mib(b.heap), mib(a.heap), starts, mib(limit))
	}
	if limit := b.rss + 8<<20 + float64(starts)*(64<<10); a.rss > limit {
		t.Errorf("the agent's resident set: %s MiB at the start, %s MiB after %d pods (at most %s)", mib(b.rss), mib(a.rss), starts, mib(limit))
	}
	if starts == 0 {
		t.Errorf("no pod started")
	}
	return phaseResult{starts: starts, failures: len(r.failures), durations: r.durations}
}

// TestKubeChurn: pods with HCAs created and deleted continuously on seed
// 002's node, while mlx5_7's and mlx5_8's ports go down and up in turn and
// an extra address moves from one RoCE netdev to the next. The agent runs
// one mode per install, so the churn has two phases on the same node:
// first the chart in mode dra (pods with claims from templates for a whole
// RoCE HCA, two at once; pods with a template's bandwidth share; pods one
// after another on one claim of their own), then in mode device-plugin
// (pods with the shared rdma/hca, and with one exclusive
// rdma.example.com/hca unit, two at once). Every pod must become Ready and
// see exactly the HCAs it was given (its claim's allocation; one HCA for an
// exclusive unit; the RoCE HCAs for rdma/hca); no HCA may be held beyond
// its capacity, nor an exclusive one twice, at any point; and after the
// churn the node's CDI spec files and sockets, the driver's checkpoint,
// the claims' status entries, and the agent's goroutines, open files and
// resident set must be back to their values before it. $RDMA_CDI_SOAK
// (`make soak`: 30m) sets the churn's length, 1 minute otherwise.
func TestKubeChurn(t *testing.T) {
	dur := soakDuration(t)
	c := newKubeCluster(t)
	begin := time.Now()
	var total phaseResult
	for _, mode := range []string{"dra", "device-plugin"} {
		t.Run(mode, func(t *testing.T) {
			r := churnPhase(t, c, mode, dur/2)
			total.starts += r.starts
			total.failures += r.failures
			total.durations = append(total.durations, r.durations...)
		})
	}
	sort.Slice(total.durations, func(i, j int) bool { return total.durations[i] < total.durations[j] })
	t.Logf("RESULT kube-churn total churn=%v run=%v starts=%d failures=%d start_p50=%v start_p95=%v start_max=%v",
		dur, time.Since(begin).Round(time.Second), total.starts, total.failures, pct(total.durations, 0.5), pct(total.durations, 0.95), pct(total.durations, 1))
}

// TestKubeFiftyClaims: 50 ResourceClaims and their 50 pods created at once
// on seed 002's node: 48 shares of 12 Gb/s for mlx5_1..mlx5_6 (100 Gb/s
// each: 8 shares fit on one, so 48 fill all six exactly) and 2 claims of a
// whole HCA among mlx5_7 and mlx5_8. Every pod must become Ready and see
// exactly its claim's HCA; no HCA may be given beyond its bandwidth, and
// the two whole ones must differ; every claim gets its status entry, and
// each loses it when the pods go. The API writes this took are counted by
// the API server (its apiserver_request_total) and the agent
// (rdma_cdi_resourceslice_publishes_total).
func TestKubeFiftyClaims(t *testing.T) {
	c := newKubeCluster(t)
	installed := time.Now()
	c.k.InstallAgent(t, "dra", nil)
	devs := c.waitSlice(t, 9)
	// Consumable capacity is beta, on by default, from 1.36: before it the
	// API server drops it and nothing is shareable; from it, a slice of ours
	// with nothing shareable is a bug, not a reason to skip.
	if !allShareable(devs) {
		if e2e.KubeMinor(t) < 36 {
			t.Skipf("Kubernetes %s keeps no consumable capacity: no HCA is shareable", e2e.KubeVersion())
		}
		t.Fatalf("Kubernetes %s keeps consumable capacity, but the driver's slice offers none: %v", e2e.KubeVersion(), devs)
	}
	ns := c.namespace(t, "fifty-")
	ctx := context.Background()
	tr := c.trackPods(t, ns)
	scraper := newAgentScraper(t, c, 30*time.Minute)
	// Claims of earlier tests must have let go of the HCAs.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		claims, err := c.cs.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
		must(t, err)
		busy := 0
		for _, cl := range claims.Items {
			if cl.Namespace != ns && cl.Status.Allocation != nil {
				busy++
			}
		}
		if busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d claims of other namespaces still allocated", busy)
		}
	}
	apiStart := c.apiWrites(t)
	agentStart, err := scraper.figures()
	must(t, err)
	setup := time.Since(installed)

	const shares, wholes, shareBW = 48, 2, 12
	type item struct {
		name  string
		spec  resourceapi.DeviceClaim
		whole bool
	}
	var items []item
	for i := 0; i < shares; i++ {
		items = append(items, item{fmt.Sprintf("share-%02d", i), hcaRequest("shared", `!(device.attributes["rdma.example.com"].ibdev in ["mlx5_7", "mlx5_8"])`, shareBW), false})
	}
	for i := 0; i < wholes; i++ {
		items = append(items, item{fmt.Sprintf("whole-%d", i), hcaRequest("hca", `device.attributes["rdma.example.com"].ibdev in ["mlx5_7", "mlx5_8"]`, 0), true})
	}
	recs := make([]*podRec, len(items))
	for i, it := range items {
		recs[i] = tr.add(it.name, it.name)
	}
	// At once: every claim, then every pod, each from its own goroutine.
	begin := time.Now()
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.cs.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
				ObjectMeta: metav1.ObjectMeta{Name: it.name}, Spec: resourceapi.ResourceClaimSpec{Devices: it.spec},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Errorf("claim %s: %v", it.name, err)
			}
		}()
	}
	wg.Wait()
	for i, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs[i].created = time.Now()
			if _, err := c.cs.CoreV1().Pods(ns).Create(ctx, claimPod(it.name)(ns, it.name), metav1.CreateOptions{}); err != nil {
				t.Errorf("pod %s: %v", it.name, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var durations []time.Duration
	for _, rec := range recs {
		select {
		case <-rec.ready:
			durations = append(durations, rec.readyAt.Sub(rec.created))
		case <-rec.ended:
			t.Errorf("pod %s ended: %s", rec.name, rec.reason)
		case <-time.After(time.Until(begin.Add(10 * time.Minute))):
			t.Errorf("pod %s not Ready 10 minutes after the creations\n%s", rec.name, tail(c.k.Diagnose(ns, rec.name), 6000))
		}
	}
	allReady := time.Since(begin)
	if t.Failed() {
		t.FailNow()
	}
	sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })

	// What each pod got: its claim's device, seen in its container.
	used := map[string]int64{}
	count := map[string]int{}
	whole := map[string][]string{}
	for i, rec := range recs {
		hs, err := c.claimHolds(ns, tr.latest(rec), devs)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		seen, err := c.seenHCAs(ns, rec.name)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if want := holdHCAs(hs); !slices.Equal(seen, want) {
			t.Errorf("pod %s sees %v; its claim was allocated %v", rec.name, seen, want)
		}
		for _, h := range hs {
			used[h.ibdev] += h.consumed
			count[h.ibdev]++
			if items[i].whole {
				whole[h.ibdev] = append(whole[h.ibdev], rec.name)
				if h.consumed != h.capacity {
					t.Errorf("whole claim %s consumes %d of %s's %d", rec.name, h.consumed, h.ibdev, h.capacity)
				}
			} else if h.consumed != shareBW {
				t.Errorf("share %s consumes %d of %s, asked %d", rec.name, h.consumed, h.ibdev, shareBW)
			}
		}
	}
	var perHCA []string
	for _, d := range devs {
		if u := used[d.ibdev]; u > 0 {
			perHCA = append(perHCA, fmt.Sprintf("%s:%d/%d(%d)", d.ibdev, u, d.capacity, count[d.ibdev]))
			if u > d.capacity {
				t.Errorf("%s given %d Gb/s of %d to %d claims", d.ibdev, u, d.capacity, count[d.ibdev])
			}
		}
	}
	sort.Strings(perHCA)
	for dev, pods := range whole {
		if len(pods) != 1 || count[dev] != 1 {
			t.Errorf("%s, a whole HCA, given to %v and %d claims in all", dev, pods, count[dev])
		}
	}
	if len(whole) != wholes {
		t.Errorf("the %d whole claims got HCAs %v", wholes, whole)
	}

	// Every claim's status gets our entry; the checkpoint holds all.
	entries := func() int {
		claims, err := c.cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		must(t, err)
		n := 0
		for _, cl := range claims.Items {
			for _, d := range cl.Status.Devices {
				if d.Driver == kubeDriver && len(d.Conditions) > 0 && d.Conditions[0].Status == metav1.ConditionTrue {
					n++
				}
			}
		}
		return n
	}
	for deadline := time.Now().Add(2 * time.Minute); entries() != len(items); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d claims have our Ready status entry 2 minutes after their pods were Ready\n%s", entries(), len(items), c.agentLog(t, 4000))
		}
	}
	statusAll := time.Since(begin)
	if cp := c.checkpointClaims(t); cp != len(items) {
		t.Errorf("the driver's checkpoint holds %d claims, want %d", cp, len(items))
	}
	apiHeld := c.apiWrites(t)
	agentHeld, err := scraper.figures()
	must(t, err)

	// Every pod goes at once: every entry goes, the checkpoint empties.
	gone := time.Now()
	grace := int64(1)
	for _, rec := range recs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.cs.CoreV1().Pods(ns).Delete(ctx, rec.name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
				t.Errorf("deleting %s: %v", rec.name, err)
			}
		}()
	}
	wg.Wait()
	for _, rec := range recs {
		select {
		case <-rec.gone:
		case <-time.After(time.Until(gone.Add(5 * time.Minute))):
			t.Errorf("pod %s still there 5 minutes after its deletion", rec.name)
		}
	}
	settled := c.settle(t, ns)
	allGone := time.Since(gone)
	apiEnd := c.apiWrites(t)
	quiet := c.quietWrites(t, quietWindow)
	agentEnd, err := scraper.figures()
	must(t, err)
	set, unset := apiHeld.minus(apiStart), apiEnd.minus(apiHeld)

	t.Logf("RESULT kube-fifty claims=%d (%d shares of %d Gb/s, %d whole) setup=%v all_ready=%v start_p50=%v start_p95=%v start_max=%v all_status_entries=%v per_hca(used/capacity(claims))=%s",
		len(items), shares, shareBW, wholes, setup.Round(time.Second), allReady.Round(100*time.Millisecond), pct(durations, 0.5), pct(durations, 0.95), pct(durations, 1),
		statusAll.Round(100*time.Millisecond), strings.Join(perHCA, ","))
	t.Logf("RESULT kube-fifty api_writes prepare: claim_status_applies=%.0f (refused %.0f) other_claim_status_writes=%.0f slice_writes=%.0f agent_slice_publishes=%.0f; unprepare: claim_status_applies=%.0f (refused %.0f) other_claim_status_writes=%.0f slice_writes=%.0f agent_slice_publishes=%.0f; all_gone=%v settle=%v; in the %v after: claim_status_applies=%.0f (refused %.0f); agent goroutines=%.0f->%.0f->%.0f rss_mib=%s->%s->%s",
		set.statusApplies, set.statusApplyFails, set.otherStatus, set.sliceWrites, agentHeld.slicePublishes-agentStart.slicePublishes,
		unset.statusApplies, unset.statusApplyFails, unset.otherStatus, unset.sliceWrites, agentEnd.slicePublishes-agentHeld.slicePublishes,
		allGone.Round(100*time.Millisecond), settled.Round(100*time.Millisecond), quietWindow, quiet.statusApplies, quiet.statusApplyFails,
		agentStart.goroutines, agentHeld.goroutines, agentEnd.goroutines, mib(agentStart.rss), mib(agentHeld.rss), mib(agentEnd.rss))
	// One write per claim sets its entry. When the pods go, the driver
	// clears the entries, or the controller does as it deallocates the
	// claims; then the driver writes no more.
	if set.statusApplies != float64(len(items)) {
		t.Errorf("claim status applies while preparing: %.0f, want exactly one per claim, %d", set.statusApplies, len(items))
	}
	if set.statusApplyFails > 0 {
		t.Errorf("%.0f claim status applies failed while preparing\n%s", set.statusApplyFails, c.agentLog(t, 4000))
	}
	c.checkQuiet(t, quiet, quietWindow)
}
