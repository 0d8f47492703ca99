package network

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// gidTables is every GID slot of the fixture's HCAs with its type and
// netdev, as the GID kernel keeps them: one line per filled slot.
func gidTables(t *testing.T, node *e2e.FixtureNode) []string {
	t.Helper()
	slots, err := filepath.Glob(filepath.Join(node.Sys, "class/infiniband/*/ports/*/gids/*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, slot := range slots {
		port := filepath.Dir(filepath.Dir(slot))
		idx := filepath.Base(slot)
		gid, _ := os.ReadFile(slot)
		typ, _ := os.ReadFile(filepath.Join(port, "gid_attrs/types", idx))
		ndev, _ := os.ReadFile(filepath.Join(port, "gid_attrs/ndevs", idx))
		rel, _ := filepath.Rel(filepath.Join(node.Sys, "class/infiniband"), slot)
		out = append(out, strings.Join([]string{rel, strings.TrimSpace(string(gid)), strings.TrimSpace(string(typ)), strings.TrimSpace(string(ndev))}, " "))
	}
	slices.Sort(out)
	return out
}

// churnRounds and churnRoundPods: 100 pods in all, ten at a time.
const churnRounds, churnRoundPods = 10, 10

// TestKubePodNetworkChurn: 100 pods without hostNetwork, ten at a time on
// seed 002's node (DRA, podNetwork on, the GID kernel writing the GID
// tables): each round three pods get a netdev moved in, three a macvlan of
// a whole HCA, four a macvlan of a 40 Gb/s share of mlx5_7 or mlx5_8.
// Every pod holds its interface with an address no other pod holds; in the
// middle round the agent is killed while the pods hold their interfaces,
// and the new one gives them back when they go. After the last round the
// node's namespace (names, MACs, MTUs, addresses, routes), the GID tables
// and the agent's records are exactly as before the first.
func TestKubePodNetworkChurn(t *testing.T) {
	if e2e.KubeMinor(t) < 36 {
		t.Skipf("Kubernetes %s has no consumable capacity: no HCA is shared", e2e.KubeVersion())
	}
	node, k := podNetworkDRANode(t, e2e.KubeOptions{})
	before, gidsBefore := nodeNetState(t, k), gidTables(t, node)
	ns := e2e.UniqueID("podnet-churn-")
	// Quoted for YAML: a bare "!" starts a tag.
	const kept, rest = `'device.attributes["rdma.example.com"].ibdev in ["mlx5_7", "mlx5_8"]'`,
		`'!(device.attributes["rdma.example.com"].ibdev in ["mlx5_7", "mlx5_8"])'`
	capacity := "\n            capacity:\n              requests:\n                bandwidth: \"40\""
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+
		withNetworkConfig(e2e.ClaimTemplate(ns, "move", "roce", rest, ""), "mode: move")+"---\n"+
		withNetworkConfig(e2e.ClaimTemplate(ns, "sub", "roce", rest, ""), "mode: sub-interface, interfaceName: net1")+"---\n"+
		e2e.ClaimTemplate(ns, "share", "shared", kept, capacity))
	kinds := []struct {
		template string
		count    int
	}{{"move", 3}, {"sub", 3}, {"share", 4}}

	start := time.Now()
	var roundTimes []time.Duration
	for round := range churnRounds {
		roundStart := time.Now()
		var manifests, pods []string
		for _, kind := range kinds {
			for i := range kind.count {
				name := fmt.Sprintf("r%d-%s-%d", round, kind.template, i)
				pods = append(pods, name)
				manifests = append(manifests, strings.Replace(podNetPod(ns, name, kind.template), "  namespace: "+ns+"\n", "  namespace: "+ns+"\n  labels: {churn: \"true\"}\n", 1))
			}
		}
		if len(pods) != churnRoundPods {
			t.Fatalf("round of %d pods", len(pods))
		}
		k.Apply(t, strings.Join(manifests, "---\n"))
		held := map[netip.Addr]string{}
		for _, pod := range pods {
			// Past the scheduler's 5-minute flush of unschedulable pods: a
			// share pod it found short of capacity while the last round's
			// allocations were still in its cache (seen in CI, round 2 and
			// round 9, after the claims were gone) is retried only then.
			k.WaitPod(t, ns, pod, "Ready", 6*time.Minute)
			for ifname, a := range podAddrs(t, k, ns, pod) {
				if ifname == "lo" || ifname == "eth0" {
					continue
				}
				p := netip.MustParsePrefix(a)
				if other, dup := held[p.Addr()]; dup {
					t.Fatalf("round %d: pods %s and %s both hold %s", round, other, pod, p)
				}
				held[p.Addr()] = pod
			}
		}
		if len(held) != churnRoundPods {
			t.Fatalf("round %d: %d RoCE addresses among %d pods, want one each: %v", round, len(held), churnRoundPods, held)
		}
		if round == churnRounds/2 {
			// The agent dies while every pod holds its interface; the new
			// one takes the records over and gives each back at its pod's end.
			k.MustKubectl(t, "delete", "pod", "-n", e2e.AgentNamespace, "-l", e2e.AgentSelector, "--wait=true")
			// No wait for its NRI plugin: a sandbox the runtime starts
			// before the plugin has registered has its containers refused
			// by the hook until the plugin, at its synchronization, has
			// given it its interface (pkg/podnetwork/sandboxlist).
			k.WaitPodsOf(t, e2e.AgentNamespace, e2e.AgentSelector, "Ready", 3*time.Minute)
		}
		k.MustKubectl(t, "delete", "pod", "-n", ns, "-l", "churn=true", "--wait=true", "--timeout=3m")
		// The next round once the claim controller has deleted this
		// round's claims: a pod the scheduler finds short of capacity
		// while they go may wait out its unschedulable backoff (5 min),
		// as seen on a loaded machine.
		if err := e2e.WaitFor(context.Background(), time.Minute, func() error {
			if left := k.MustKubectl(t, "get", "resourceclaims", "-n", ns, "-o", "name"); left != "" {
				return fmt.Errorf("claims left: %s", left)
			}
			return nil
		}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		roundTimes = append(roundTimes, time.Since(roundStart))
	}
	waitNodeNetState(t, k, before)
	waitNoSandboxes(t, k, draNetworkState)
	if got := gidTables(t, node); !slices.Equal(got, gidsBefore) {
		t.Errorf("the GID tables differ from before the churn:\nbefore %v\nafter  %v", gidsBefore, got)
	}
	slices.Sort(roundTimes)
	t.Logf("RESULT podnet-churn: %d pods in %v (rounds of %d: median %v, slowest %v)", churnRounds*churnRoundPods,
		time.Since(start).Round(time.Second), churnRoundPods, roundTimes[len(roundTimes)/2].Round(100*time.Millisecond), roundTimes[len(roundTimes)-1].Round(100*time.Millisecond))
}
