package kube

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
	"github.com/rdma-cdi/rdma-cdi/pkg/metricsauth"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// perPodRate is the dashboard's join over a short window: each pod's
// share of the data its HCAs receive per second, through
// rdma_cdi_hca_holder_info (the test's Prometheus scrapes every second).
const perPodRate = `sum by (namespace, pod) (
  sum by (device) (rate(rdma_port_data_received_bytes_total[4s]))
  * on (device) group_right max by (device, namespace, pod) (rdma_cdi_hca_holder_info{pod!=""}))`

// TestKubeMetricsPodAttribution: the chart's agent (mode dra, metrics on by
// default) is scraped by Prometheus in the node's network namespace; a pod
// with a claim for one HCA shows as its holder, from the prepared claim and
// from its container's hook (the CRI's pod annotations), naming the HCA the
// claim was allocated and whose nodes alone are in the pod's
// /dev/infiniband; while that HCA's fixture counter moves at 4 MB/s (and no
// other does), the one-line join gives the pod 4 MB/s; the holder goes with
// the pod.
func TestKubeMetricsPodAttribution(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.DRANode(t, node, 9)
	ns := e2e.UniqueID("metrics-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+exampleTemplates(t, ns))
	t.Cleanup(func() { _, _, _ = k.Kubectl("delete", "namespace", ns, "--wait=false") })
	k.Apply(t, e2e.ClaimPod(ns, "trainer", "one-hca"))
	k.WaitPod(t, ns, "trainer", "Ready", 2*time.Minute)

	// What the pod really got: its claim's allocation, and the same HCA's
	// nodes (and no other's) in its /dev/infiniband.
	claimed := podClaimHCAs(t, k, ns, "trainer")
	if len(claimed) != 1 {
		t.Fatalf("the pod's one-hca claim is allocated %v", claimed)
	}
	hca := claimed[0]
	ls := k.MustExecInPod(t, ns, "trainer", "main", "ls", "-l", "/dev/infiniband")
	e2e.CheckNodes(t, "trainer", e2e.ParseLsDev(t, ls), e2e.WantNodes(t, node.Topo, append(e2e.HCANodeNames(t, node, hca), "rdma_cm")...))
	t.Logf("trainer's claim is allocated %s", hca)

	prom := e2e.StartPrometheus(t, "127.0.0.1:19090", []string{"127.0.0.1:9477"}, k.MetricsToken(t), k.InNode, k.DialContext)
	holders := prom.WaitQuery(t, `rdma_cdi_hca_holder_info{namespace="`+ns+`",pod="trainer"}`, time.Minute, func(s []e2e.PromSample) bool {
		sources := map[string]bool{}
		for _, x := range s {
			sources[x.Metric["source"]] = true
		}
		return sources["dra"] && sources["hook"]
	})
	for _, h := range holders {
		if h.Metric["device"] != hca {
			t.Errorf("holder (source %s) names %s; the pod's claim is allocated %s", h.Metric["source"], h.Metric["device"], hca)
		}
		if h.Metric["source"] == "hook" && h.Metric["container"] != "main" {
			t.Errorf("hook holder's container %q, want main", h.Metric["container"])
		}
	}

	// No counter moves yet: nothing to attribute.
	received := `sum(rate(rdma_port_data_received_bytes_total[4s]))`
	prom.WaitQuery(t, received, 30*time.Second, func(s []e2e.PromSample) bool { return len(s) == 1 && s[0].Value == 0 })
	// The held HCA's counter moves at 4 MB/s (moveCounter's slope), and the
	// join gives that rate to the pod, within 12%.
	e2e.MoveCounter(t, node, hca)
	got := prom.WaitQuery(t, perPodRate, 30*time.Second, func(s []e2e.PromSample) bool {
		for _, x := range s {
			if x.Metric["namespace"] == ns && x.Metric["pod"] == "trainer" {
				return x.Value > 3.5e6 && x.Value < 4.5e6
			}
		}
		return false
	})
	t.Logf("trainer receives %v (join of %s's counter)", got, hca)
	prom.WaitQuery(t, `sum(rdma_cdi_hook_containers_total)`, 30*time.Second, func(s []e2e.PromSample) bool { return len(s) == 1 && s[0].Value >= 1 })

	k.MustKubectl(t, "delete", "pod", "-n", ns, "trainer", "--grace-period=1")
	prom.WaitQuery(t, `rdma_cdi_hca_holder_info{namespace="`+ns+`"}`, time.Minute, func(s []e2e.PromSample) bool { return len(s) == 0 })
}

// podClaimHCAs are the ibdevs of our driver's devices allocated to the
// claims of pod ns/name (its status' resourceClaimStatuses), sorted.
func podClaimHCAs(t *testing.T, k *e2e.KubeEnv, ns, name string) []string {
	t.Helper()
	var pod corev1.Pod
	if err := json.Unmarshal([]byte(k.MustKubectl(t, "get", "pod", "-n", ns, name, "-o", "json")), &pod); err != nil {
		t.Fatal(err)
	}
	devs := e2e.SliceDevices(t, k)
	var hcas []string
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			continue
		}
		var c resourceapi.ResourceClaim
		if err := json.Unmarshal([]byte(k.MustKubectl(t, "get", "resourceclaim", "-n", ns, *s.ResourceClaimName, "-o", "json")), &c); err != nil {
			t.Fatal(err)
		}
		if c.Status.Allocation == nil {
			t.Fatalf("claim %s of pod %s is not allocated", c.Name, name)
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != apis.Group {
				continue
			}
			d, ok := e2e.DeviceByName(devs, r.Device)
			if !ok {
				t.Fatalf("claim %s is allocated %s, not in the slice:%s", c.Name, r.Device, e2e.DescribeDevices(devs))
			}
			hcas = append(hcas, e2e.Attr(d, "ibdev").(string))
		}
	}
	slices.Sort(hcas)
	return hcas
}

// listAndWatchSends is the device-plugin agent's count of device lists
// sent to the kubelet, by resource.
func listAndWatchSends(t *testing.T, k *e2e.KubeEnv) map[string]float64 {
	t.Helper()
	sent := map[string]float64{}
	for _, s := range metrics.Find(e2e.AgentScrape(t, k), "rdma_cdi_listandwatch_updates_total", nil) {
		sent[s.Labels["resource"]] = s.Value
	}
	return sent
}

// waitListAndWatchSends waits up to 30 s for the agent's sends to satisfy
// ok, and fails with the kubelet's device plugin log lines when they do not.
func waitListAndWatchSends(t *testing.T, k *e2e.KubeEnv, ok func(map[string]float64) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sent := listAndWatchSends(t, k)
		if ok(sent) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ListAndWatch sends by resource %v\nkubelet:\n%s", sent, kubeletPluginLog(k))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// kubeletPluginLog is the tail of the kubelet's log lines about device plugins.
func kubeletPluginLog(k *e2e.KubeEnv) string {
	var lines []string
	for _, l := range strings.Split(k.KubeletLog(), "\n") {
		if strings.Contains(l, "rdma") || strings.Contains(l, "evice plugin") {
			lines = append(lines, l)
		}
	}
	return e2e.TailString(strings.Join(lines, "\n"), 12000)
}

// TestKubeMetricsDevicePlugin: in mode device-plugin the agent counts the
// device lists it sent the kubelet, and a pod given rdma/hca: 1 (every RoCE
// HCA of the shared resource) shows as the holder of each, named by its
// CRI annotations in its container's hook report.
func TestKubeMetricsDevicePlugin(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := devicePluginNode(t, node, "1000", "8")
	ns := e2e.UniqueID("dp-metrics-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+rdmaPodManifest(ns, "trainer", map[string]int{e2e.SharedResource: 1}, true))
	t.Cleanup(func() { _, _, _ = k.Kubectl("delete", "namespace", ns, "--wait=false") })
	k.WaitPod(t, ns, "trainer", "Ready", 2*time.Minute)
	var held []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := e2e.AgentScrape(t, k)
		if len(metrics.Find(s, "rdma_cdi_agent_info", map[string]string{"mode": "device-plugin"})) != 1 {
			t.Fatal("no rdma_cdi_agent_info{mode=\"device-plugin\"}")
		}
		lw := metrics.Find(s, "rdma_cdi_listandwatch_updates_total", map[string]string{"resource": e2e.SharedResource})
		held = held[:0]
		for _, h := range metrics.Find(s, "rdma_cdi_hca_holder_info", map[string]string{"namespace": ns, "pod": "trainer", "container": "main", "source": "hook"}) {
			held = append(held, h.Labels["device"])
		}
		slices.Sort(held)
		if len(lw) == 1 && lw[0].Value >= 1 && slices.Equal(held, []string{"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8"}) {
			break
		}
		if time.Now().After(deadline) {
			// Seen once in CI: holders but no send counted; what to look at then.
			var agent string
			for _, p := range k.PodNames(t, e2e.AgentNamespace, e2e.AgentSelector) {
				agent += fmt.Sprintf("---- %s:\n%s\n", p, e2e.TailString(k.Logs(e2e.AgentNamespace, p, "device-plugin"), 3000))
			}
			t.Fatalf("ListAndWatch sends %v (all resources: %v); the pod holds %v, want mlx5_1..mlx5_8\nagents:\n%s\nkubelet:\n%s",
				lw, metrics.Find(s, "rdma_cdi_listandwatch_updates_total", nil), held, agent, kubeletPluginLog(k))
		}
		time.Sleep(time.Second)
	}
}

// TestKubeMetricsAuth: the chart's agent serves /metrics only to a token
// whose user may get it. From another network namespace on the node (a
// pod's, as any tenant has: a veth to the node, no host network), a request
// to the node's address without a token, or with a token of an account
// without the right, gets no holder data (401, 403); the probes answer
// anyone; the metrics-reader role's token reads the holders.
func TestKubeMetricsAuth(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{})
	if k.NodeIP == "" {
		t.Fatal("the fixture node has no IPv4 address")
	}
	k.InstallAgent(t, "device-plugin", nil)
	k.Apply(t, `apiVersion: v1
kind: ServiceAccount
metadata: {name: metrics-nobody, namespace: default}
`)
	nobody := strings.TrimSpace(k.MustKubectl(t, "create", "token", "metrics-nobody", "-n", "default", "--duration=10m", "--audience="+metricsauth.Audience))

	// The tenant's network namespace: a veth to the node, routed to it.
	netns := e2e.UniqueID("tn") // also the veth's name: at most 15 bytes
	setup := fmt.Sprintf(`set -e
ip netns add %[1]s
ip link add %[1]s type veth peer name eth0 netns %[1]s
ip addr add 169.254.77.1/30 dev %[1]s
ip link set %[1]s up
ip -n %[1]s addr add 169.254.77.2/30 dev eth0
ip -n %[1]s link set eth0 up
ip -n %[1]s link set lo up
ip -n %[1]s route add default via 169.254.77.1`, netns)
	if out, err := k.InNode("sh", "-c", setup).CombinedOutput(); err != nil {
		t.Fatalf("tenant network namespace: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = k.InNode("sh", "-c", "ip link del "+netns+"; ip netns del "+netns).Run() })
	get := func(path, token string) (int, string) {
		args := []string{"netns", "exec", netns, "curl", "-s", "-m", "10", "-w", "\n%{http_code}", "http://" + net.JoinHostPort(k.NodeIP, "9477") + path}
		if token != "" {
			args = append(args, "-H", "Authorization: Bearer "+token)
		}
		out, err := k.InNode("ip", args...).Output()
		if err != nil {
			t.Fatalf("curl %s from the tenant's namespace: %v\n%s", path, err, out)
		}
		// curl -w puts the status on the last line.
		i := strings.LastIndex(string(out), "\n")
		n, _ := strconv.Atoi(string(out[i+1:]))
		return n, string(out[:max(i, 0)])
	}
	for name, c := range map[string]struct {
		token string
		want  int
	}{"no token": {"", http.StatusUnauthorized}, "a bad token": {"not-a-token", http.StatusUnauthorized}, "a token without the right": {nobody, http.StatusForbidden}} {
		code, body := get("/metrics", c.token)
		if code != c.want || strings.Contains(body, "rdma_cdi_hca_holder_info") || strings.Contains(body, "rdma_port_") {
			t.Errorf("/metrics with %s: %d, want %d; body:\n%s", name, code, c.want, e2e.TailString(body, 2000))
		}
	}
	for _, probe := range []string{"/healthz", "/readyz"} {
		if code, body := get(probe, ""); code != http.StatusOK {
			t.Errorf("%s without a token: %d %s", probe, code, body)
		}
	}
	code, body := get("/metrics", k.MetricsToken(t))
	if code != http.StatusOK || !strings.Contains(body, "rdma_port_state_id") {
		t.Fatalf("/metrics with the metrics-reader's token: %d\n%s", code, e2e.TailString(body, 2000))
	}
}

// TestKubeProbesOutliveAMetricsFlood: every one of the metrics endpoint's
// 64 connection slots held by keep-alive clients on the node's network
// (what pods can open), 8 from each of 8 addresses (one address holds no
// more: its ninth is closed unanswered), each asking every 10 s so that
// none is closed as idle, for longer than the liveness probe's three
// failures (3 x 20 s). The kubelet's probes have their own listener on the
// node's loopback, so the agent is never restarted; that the flood did
// fill the endpoint is checked, not assumed: a ninth address's connection
// is closed unanswered.
func TestKubeProbesOutliveAMetricsFlood(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{})
	k.InstallAgent(t, "device-plugin", nil)
	kept := e2e.AgentKeeper(t, k)
	const slots, perSource, refresh, hold = 64, 8, 10 * time.Second, 75 * time.Second
	source := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 0, byte(1 + i/perSource)}) }
	ask := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	refused := func(src netip.Addr, what string) {
		if c, err := k.DialFrom(t.Context(), src, "tcp", "127.0.0.1:9477"); err == nil {
			if err := ask(c); err == nil {
				t.Fatalf("a connection from %s answered: %s", src, what)
			}
			c.Close()
		}
	}
	for i := range slots {
		c, err := k.DialFrom(t.Context(), source(i), "tcp", "127.0.0.1:9477")
		if err == nil {
			err = ask(c)
		}
		if err != nil {
			t.Fatalf("flood connection %d of %d, from %s: %v", i+1, slots, source(i), err)
		}
		conns = append(conns, c)
		if i == perSource-1 {
			refused(source(i), fmt.Sprintf("one address held more than its %d connections", perSource))
		}
	}
	refused(source(slots), "the flood did not fill the metrics endpoint")
	for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(refresh) {
		for i, c := range conns {
			if err := ask(c); err != nil {
				kept("while the metrics endpoint was full") // the likely cause
				t.Fatalf("flood connection %d closed: %v", i+1, err)
			}
		}
	}
	kept("while the metrics endpoint was full")
}

// TestKubeMetricsRenewedTokenInAFlood: while clients flood /metrics with
// tokens never seen (each a TokenReview, paced to 10 a second), a scraper
// whose token the kubelet just renewed is served: the renewal is signed by
// the cluster's issuer (the agent reads /openid/v1/jwks as any service
// account may) for a user allowed before, so it waits in the lane kept for
// known tokens instead of being paced with the flood.
func TestKubeMetricsRenewedTokenInAFlood(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{})
	agent := k.InstallAgent(t, "device-plugin", nil)
	// The scraper and the flood come from different addresses, as
	// Prometheus and a pod do: one address holds at most 8 connections
	// (TestOneSourceHoldsAtMostItsShare), so the flood's 16 workers come
	// from two.
	clientFrom := func(src netip.Addr) *http.Client {
		dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			return k.DialFrom(ctx, src, network, addr)
		}
		return &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 32}}
	}
	scraper := clientFrom(netip.MustParseAddr("127.0.0.1"))
	floods := []*http.Client{clientFrom(netip.MustParseAddr("127.0.0.2")), clientFrom(netip.MustParseAddr("127.0.0.3"))}
	get := func(client *http.Client, token string) int {
		req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:9477/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if code := get(scraper, k.MetricsToken(t)); code != http.StatusOK {
		t.Fatalf("/metrics with the scraper's token: %d", code)
	}
	renewed := k.RenewedMetricsToken(t)

	var paced atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if get(floods[w%2], e2e.RandomJWT(fmt.Sprintf("flood-%d-%d", w, i))) == http.StatusServiceUnavailable {
					paced.Add(1)
				}
			}
		})
	}
	time.Sleep(3 * time.Second) // the flood spends the pacing budget
	code := get(scraper, renewed)
	close(stop)
	wg.Wait()
	if paced.Load() == 0 {
		t.Fatal("no flood request got 503: the flood did not reach the pacing")
	}
	if code != http.StatusOK {
		t.Errorf("/metrics with the renewed token during the flood: %d, want 200 (%d flood requests got 503)\nthe agent's log:\n%s",
			code, paced.Load(), e2e.TailString(k.Logs(e2e.AgentNamespace, agent, "device-plugin"), 3000))
	}
}
