package network

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
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

// churnRounds and churnRoundPods: 40 pods in all, ten at a time. Each
// round reuses the addresses, netdevs and GID slots of the one before,
// and the agent is killed in the middle one (the third); more rounds cost
// `make test` 40 s or more each and show nothing the fourth does not.
const churnRounds, churnRoundPods = 4, 10

// churnPodWait bounds each pod's wait. The scheduler retries a pod it
// found unschedulable at its 5-minute flush when no event requeues it, so
// a pod rejected for a reason this test does not expect fails here
// instead of hiding behind the flush.
const churnPodWait = 3 * time.Minute

// TestKubePodNetworkChurn: 40 pods without hostNetwork, ten at a time on
// seed 002's node (DRA, podNetwork on, the GID kernel writing the GID
// tables): each round three pods get a netdev moved in, three a macvlan of
// a whole HCA, four a macvlan of a 40 Gb/s share of mlx5_7 or mlx5_8.
// Every pod holds exactly one RoCE address, which no other pod holds; in
// the middle round the agent's process is killed (SIGKILL) while the pods
// hold their interfaces, and the restarted one gives them back when they
// go. After the last round the node's namespace (names, MACs, MTUs,
// addresses, routes), the GID tables and the agent's records are exactly
// as before the first.
//
// The share pods are created one at a time, each once the one before is
// bound: kube-scheduler 1.37 counts a share twice while another pod's
// PreBind writes its claim (RELIABILITY.md, "Known upstream issues"), and
// four 40 Gb/s shares fit two 100 Gb/s HCAs only as two and two.
func TestKubePodNetworkChurn(t *testing.T) {
	e2e.NeedsKube(t, 36, "consumable capacity: no HCA is shared")
	node, k := podNetworkDRANode(t, e2e.KubeOptions{})
	before, gidsBefore := nodeNetState(t, k), gidTables(t, node)
	ns := e2e.UniqueID("podnet-churn-")
	// Quoted for YAML: a bare "!" starts a tag.
	const kept, rest = `'device.attributes["rdma.example.com"].ibdev in ["mlx5_7", "mlx5_8"]'`,
		`'!(device.attributes["rdma.example.com"].ibdev in ["mlx5_7", "mlx5_8"])'`
	capacity := "\n            capacity:\n              requests:\n                bandwidth: \"40\""
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+
		e2e.WithClaimConfig(e2e.ClaimTemplate(ns, "move", "roce", rest, ""), "mode: move")+"---\n"+
		e2e.WithClaimConfig(e2e.ClaimTemplate(ns, "sub", "roce", rest, ""), "mode: sub-interface, interfaceName: net1")+"---\n"+
		e2e.ClaimTemplate(ns, "share", "shared", kept, capacity))
	churnPod := func(name, template string) string {
		return strings.Replace(podNetPod(ns, name, template), "  namespace: "+ns+"\n", "  namespace: "+ns+"\n  labels: {churn: \"true\"}\n", 1)
	}

	start := time.Now()
	var roundTimes []time.Duration
	for round := range churnRounds {
		roundStart := time.Now()
		var whole, pods []string
		for _, kind := range []struct {
			template string
			count    int
		}{{"move", 3}, {"sub", 3}} {
			for i := range kind.count {
				name := fmt.Sprintf("r%d-%s-%d", round, kind.template, i)
				pods = append(pods, name)
				whole = append(whole, churnPod(name, kind.template))
			}
		}
		k.Apply(t, strings.Join(whole, "---\n"))
		for i := range 4 {
			name := fmt.Sprintf("r%d-share-%d", round, i)
			pods = append(pods, name)
			k.Apply(t, churnPod(name, "share"))
			waitChurnPod(t, k, ns, name, "PodScheduled")
		}
		if len(pods) != churnRoundPods {
			t.Fatalf("round of %d pods", len(pods))
		}
		held := map[netip.Addr]string{}
		for _, pod := range pods {
			waitChurnPod(t, k, ns, pod, "Ready")
			var roce []netip.Prefix
			for ifname, a := range podAddrs(t, k, ns, pod) {
				if ifname != "lo" && ifname != "eth0" {
					roce = append(roce, netip.MustParsePrefix(a))
				}
			}
			if len(roce) != 1 {
				t.Fatalf("round %d: pod %s holds RoCE addresses %v, want exactly one", round, pod, roce)
			}
			if other, dup := held[roce[0].Addr()]; dup {
				t.Fatalf("round %d: pods %s and %s both hold %s", round, other, pod, roce[0])
			}
			held[roce[0].Addr()] = pod
		}
		if round == churnRounds/2 {
			// The agent dies while every pod holds its interface; the
			// restarted process takes the records over and gives each
			// back at its pod's end.
			e2e.KillAgent(t, k)
		}
		k.MustKubectl(t, "delete", "pod", "-n", ns, "-l", "churn=true", "--wait=true", "--timeout=3m")
		// The next round once the claim controller has deleted this
		// round's claims, so that the next round's shares are not
		// measured against claims on their way out.
		if err := e2e.WaitFor(context.Background(), time.Minute, func() error {
			claims, err := k.Claims(ns)
			if err != nil {
				return err
			}
			if len(claims) > 0 {
				return fmt.Errorf("%d claims left, the first %s", len(claims), claims[0].Name)
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

// waitChurnPod waits at most churnPodWait for the pod's condition. On
// timeout it fails with the pod's description and events (the scheduler's
// rejection) and what every claim of the cluster holds of each HCA.
func waitChurnPod(t *testing.T, k *e2e.KubeEnv, ns, pod, cond string) {
	t.Helper()
	err := e2e.WaitFor(context.Background(), churnPodWait, func() error {
		p, err := k.GetPod(ns, pod)
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == cond && c.Status == "True" {
				return nil
			}
		}
		return fmt.Errorf("not %s (phase %s)", cond, p.Status.Phase)
	})
	if err != nil {
		t.Fatalf("pod %s/%s: %v after %v\n%s\nallocated per HCA (claim: consumed bandwidth):\n%s", ns, pod, err, churnPodWait, k.Diagnose(ns, pod), allocatedPerHCA(t, k))
	}
}

// allocatedPerHCA lists, per allocated device, the claims holding it and
// the bandwidth each consumes ("whole" for an exclusive claim).
func allocatedPerHCA(t *testing.T, k *e2e.KubeEnv) string {
	t.Helper()
	out, _, err := k.Kubectl("get", "resourceclaims", "-A", "-o", "json")
	if err != nil {
		return err.Error()
	}
	var claims struct {
		Items []struct {
			Metadata struct{ Namespace, Name string }
			Status   struct {
				Allocation *struct {
					Devices struct {
						Results []struct {
							Device           string            `json:"device"`
							ConsumedCapacity map[string]string `json:"consumedCapacity"`
						} `json:"results"`
					} `json:"devices"`
				} `json:"allocation"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &claims); err != nil {
		return err.Error()
	}
	perHCA := map[string][]string{}
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			used := cmp.Or(r.ConsumedCapacity["bandwidth"], "whole")
			perHCA[r.Device] = append(perHCA[r.Device], c.Metadata.Namespace+"/"+c.Metadata.Name+": "+used)
		}
	}
	var b strings.Builder
	for _, dev := range slices.Sorted(maps.Keys(perHCA)) {
		fmt.Fprintf(&b, "  %s: %s\n", dev, strings.Join(perHCA[dev], ", "))
	}
	return b.String()
}
