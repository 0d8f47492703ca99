package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
)

// perPodTraffic is the dashboard's join: each pod's share of the data its
// HCAs received, through rdma_cdi_hca_holder_info.
const perPodTraffic = `sum by (namespace, pod) (
  sum by (device) (rdma_port_data_received_bytes_total)
  * on (device) group_right max by (device, namespace, pod) (rdma_cdi_hca_holder_info))`

// TestKubeMetricsPodAttribution: the chart's agent (mode dra, metrics on by
// default) is scraped by Prometheus in the node's network namespace; a pod
// with a claim for one HCA shows as its holder, from the prepared claim and
// from its container's hook (the CRI's pod annotations), and the one-line
// join gives the pod's traffic; the holder goes with the pod.
func TestKubeMetricsPodAttribution(t *testing.T) {
	node := SharedFixtureNode(t, "seed002")
	k := draNode(t, node, 9)
	ns := UniqueID("metrics-")
	k.Apply(t, namespaceManifest(ns)+"---\n"+exampleTemplates(t, ns))
	t.Cleanup(func() { _, _, _ = k.Kubectl("delete", "namespace", ns, "--wait=false") })
	k.Apply(t, claimPod(ns, "trainer", "one-hca"))
	k.WaitPod(t, ns, "trainer", "Ready", 2*time.Minute)

	prom := StartPrometheus(t, "127.0.0.1:19090", []string{"127.0.0.1:9477"}, k.InNode, k.DialContext)
	holders := prom.WaitQuery(t, `rdma_cdi_hca_holder_info{namespace="`+ns+`",pod="trainer"}`, time.Minute, func(s []PromSample) bool {
		sources := map[string]bool{}
		for _, x := range s {
			sources[x.Metric["source"]] = true
		}
		return sources["dra"] && sources["hook"]
	})
	device := holders[0].Metric["device"]
	for _, h := range holders {
		if h.Metric["device"] != device {
			t.Errorf("the pod holds %s and %s; its claim is for one HCA", device, h.Metric["device"])
		}
		if h.Metric["source"] == "hook" && h.Metric["container"] != "main" {
			t.Errorf("hook holder's container %q, want main", h.Metric["container"])
		}
	}
	t.Logf("trainer holds %s", device)
	prom.WaitQuery(t, perPodTraffic, 30*time.Second, func(s []PromSample) bool {
		for _, x := range s {
			if x.Metric["namespace"] == ns && x.Metric["pod"] == "trainer" {
				return true
			}
		}
		return false
	})
	prom.WaitQuery(t, `sum(rdma_cdi_hook_containers_total)`, 30*time.Second, func(s []PromSample) bool { return len(s) == 1 && s[0].Value >= 1 })

	k.MustKubectl(t, "delete", "pod", "-n", ns, "trainer", "--grace-period=1")
	prom.WaitQuery(t, `rdma_cdi_hca_holder_info{namespace="`+ns+`"}`, time.Minute, func(s []PromSample) bool { return len(s) == 0 })
}

// agentScrape reads the node agent's /metrics (127.0.0.1:9477 in the node's
// network namespace, where the chart's agent listens).
func agentScrape(t *testing.T, k *KubeEnv) []metrics.Sample {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: k.DialContext}}
	return scrapeWith(t, client, "http://127.0.0.1:9477/metrics")
}

// listAndWatchSends is the device-plugin agent's count of device lists
// sent to the kubelet, by resource.
func listAndWatchSends(t *testing.T, k *KubeEnv) map[string]float64 {
	t.Helper()
	sent := map[string]float64{}
	for _, s := range metrics.Find(agentScrape(t, k), "rdma_cdi_listandwatch_updates_total", nil) {
		sent[s.Labels["resource"]] = s.Value
	}
	return sent
}

// waitListAndWatchSends waits up to 30 s for the agent's sends to satisfy
// ok, and fails with the kubelet's device plugin log lines when they do not.
func waitListAndWatchSends(t *testing.T, k *KubeEnv, ok func(map[string]float64) bool) {
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
func kubeletPluginLog(k *KubeEnv) string {
	var lines []string
	for _, l := range strings.Split(k.KubeletLog(), "\n") {
		if strings.Contains(l, "rdma") || strings.Contains(l, "evice plugin") {
			lines = append(lines, l)
		}
	}
	return tailString(strings.Join(lines, "\n"), 12000)
}

// TestKubeMetricsDevicePlugin: in mode device-plugin the agent counts the
// device lists it sent the kubelet, and a pod given rdma/hca: 1 (every RoCE
// HCA of the shared resource) shows as the holder of each, named by its
// CRI annotations in its container's hook report.
func TestKubeMetricsDevicePlugin(t *testing.T) {
	node := SharedFixtureNode(t, "seed002")
	k := devicePluginNode(t, node, "1000", "8")
	ns := UniqueID("dp-metrics-")
	k.Apply(t, namespaceManifest(ns)+"---\n"+rdmaPodManifest(ns, "trainer", map[string]int{sharedResource: 1}, true))
	t.Cleanup(func() { _, _, _ = k.Kubectl("delete", "namespace", ns, "--wait=false") })
	k.WaitPod(t, ns, "trainer", "Ready", 2*time.Minute)
	var held []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := agentScrape(t, k)
		if len(metrics.Find(s, "rdma_cdi_agent_info", map[string]string{"mode": "device-plugin"})) != 1 {
			t.Fatal("no rdma_cdi_agent_info{mode=\"device-plugin\"}")
		}
		lw := metrics.Find(s, "rdma_cdi_listandwatch_updates_total", map[string]string{"resource": sharedResource})
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
			for _, p := range k.PodNames(t, AgentNamespace, agentSelector) {
				agent += fmt.Sprintf("---- %s:\n%s\n", p, tailString(k.Logs(AgentNamespace, p, "device-plugin"), 3000))
			}
			t.Fatalf("ListAndWatch sends %v (all resources: %v); the pod holds %v, want mlx5_1..mlx5_8\nagents:\n%s\nkubelet:\n%s",
				lw, metrics.Find(s, "rdma_cdi_listandwatch_updates_total", nil), held, agent, kubeletPluginLog(k))
		}
		time.Sleep(time.Second)
	}
}
