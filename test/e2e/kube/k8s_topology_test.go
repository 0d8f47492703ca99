package kube

// The device plugin's exclusive resource beside a GPU device plugin on a
// kubelet whose Topology Manager runs single-numa-node, as on GPU nodes
// (GPU-aligned RDMA). The node is the two-socket fixture (RoCE
// HCAs mlx5_1 on NUMA node 0; mlx5_2 and mlx5_3 behind one PCIe root and
// mlx5_4 behind another on NUMA node 1) with its /sys/devices/system/node
// showing two NUMA nodes, one CPU each (KubeOptions.NUMANodes: cadvisor
// would otherwise report this host's one node, and the kubelet would
// ignore the devices' node 1). The GPUs come from test/cmd/fakegpu: four,
// two per NUMA node, named in the container's NVIDIA_VISIBLE_DEVICES.

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

const (
	gpuResource = "nvidia.com/gpu"
	// fakeGPUs is the stand-in's -gpus: ID=NUMA node.
	fakeGPUs = "gpu0=0,gpu1=0,gpu2=1,gpu3=1"
)

// startFakeGPU builds test/cmd/fakegpu, runs it in the node's namespaces
// until the test ends, and waits until the kubelet advertises its GPUs.
func startFakeGPU(t *testing.T, k *e2e.KubeEnv, gpus string, count string) {
	t.Helper()
	k.StartDaemon(t, "fakegpu", e2e.Binary(t, "fakegpu"), "-gpus", gpus)
	proc := k.Proc("fakegpu")
	deadline := time.Now().Add(time.Minute)
	for k.NodeAllocatable(t, gpuResource) != count {
		if !proc.Running() {
			t.Fatalf("fakegpu exited:\n%s", e2e.TailFile(proc.Log, 3000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("node allocatable %s: %q, want %s\nfakegpu:\n%s\n%s", gpuResource, k.NodeAllocatable(t, gpuResource), count,
				e2e.TailFile(proc.Log, 3000), kubeletPluginLog(k))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// gpuNUMA maps the stand-in's GPU IDs to their NUMA nodes.
func gpuNUMA(t *testing.T, spec string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, f := range strings.Split(spec, ",") {
		var n int
		id, numa, _ := strings.Cut(f, "=")
		if _, err := fmt.Sscan(numa, &n); err != nil {
			t.Fatalf("GPU spec %q: %v", spec, err)
		}
		out[id] = n
	}
	return out
}

// hcaNUMA is an HCA's NUMA node in the fixture.
func hcaNUMA(t *testing.T, node *e2e.FixtureNode, hca string) int {
	t.Helper()
	full, err := node.Topo.Complete()
	if err != nil {
		t.Fatal(err)
	}
	d, ok := full.DeviceByName(hca)
	if !ok || d.NUMANode == nil {
		t.Fatalf("fixture %s: no HCA %s with a NUMA node", full.Name, hca)
	}
	return *d.NUMANode
}

// checkAlignedPod checks that pod ns/name got exactly hcas (device nodes
// and nccl.conf), and gpus GPUs (its NVIDIA_VISIBLE_DEVICES), all on NUMA
// node numa; it returns the GPUs.
func checkAlignedPod(t *testing.T, k *e2e.KubeEnv, node *e2e.FixtureNode, ns, pod string, gpus int, hcas []string, numa int) []string {
	t.Helper()
	for _, h := range hcas {
		if n := hcaNUMA(t, node, h); n != numa {
			t.Fatalf("test bug: %s is on NUMA node %d, not %d", h, n, numa)
		}
	}
	e2e.CheckRDMAPod(t, node, e2e.ProbePod(t, k, ns, pod), hcas, "3")
	env := strings.TrimSpace(k.MustExecInPod(t, ns, pod, "main", "/bin/sh", "-c", `echo "$NVIDIA_VISIBLE_DEVICES"`))
	got := strings.Split(env, ",")
	if env == "" {
		got = nil
	}
	byID := gpuNUMA(t, fakeGPUs)
	for _, g := range got {
		if n, ok := byID[g]; !ok {
			t.Errorf("pod %s: unknown GPU %q", pod, g)
		} else if n != numa {
			t.Errorf("pod %s: GPU %s of NUMA node %d beside HCAs %v of NUMA node %d", pod, g, n, hcas, numa)
		}
	}
	if len(got) != gpus {
		t.Errorf("pod %s: NVIDIA_VISIBLE_DEVICES=%q, want %d GPUs", pod, env, gpus)
	}
	t.Logf("pod %s: NUMA node %d, HCAs %v, GPUs %v", pod, numa, hcas, got)
	return got
}

// waitTopologyRefusal waits until the kubelet refuses pod ns/name at
// admission with TopologyAffinityError, after the scheduler bound it to
// the node (it had the resources, just not on one NUMA node).
func waitTopologyRefusal(t *testing.T, k *e2e.KubeEnv, ns, pod string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := k.GetPod(ns, pod)
		if err == nil && p.Status.Phase != "Pending" {
			if p.Status.Phase != "Failed" || p.Status.Reason != "TopologyAffinityError" || p.Spec.NodeName != k.NodeName {
				t.Fatalf("pod %s: phase %s, reason %q, node %q; want Failed with TopologyAffinityError on %s\n%s",
					pod, p.Status.Phase, p.Status.Reason, p.Spec.NodeName, k.NodeName, k.Diagnose(ns, pod))
			}
			t.Logf("pod %s refused: %s: %s", pod, p.Status.Reason, p.Status.Message)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: not refused by the kubelet (last error %v)\n%s", pod, err, k.Diagnose(ns, pod))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// topoHint is a Topology Manager hint as the kubelet logs it: the NUMA
// nodes as a bit mask (node 1 is 2; nil for any) and whether it is preferred.
type topoHint struct {
	NUMANodeAffinity *int
	Preferred        bool
}

func (h topoHint) String() string {
	if h.NUMANodeAffinity == nil {
		return fmt.Sprintf("{any %v}", h.Preferred)
	}
	return fmt.Sprintf("{%b %v}", *h.NUMANodeAffinity, h.Preferred)
}

var (
	hintsLogRE = regexp.MustCompile(`"TopologyHints" hints=(\{.*\}) pod="([^"]+)"`)
	bestLogRE  = regexp.MustCompile(`"Best TopologyHint" bestHint=(\{[^}]*\}) pod="([^"]+)"`)
)

// kubeletHints returns what the kubelet's Topology Manager (pod scope)
// last logged for pod ns/name: the device manager's hints per resource,
// made from the plugins' TopologyInfo, and the merged best hint.
func kubeletHints(t *testing.T, k *e2e.KubeEnv, ns, pod string) (map[string][]topoHint, topoHint) {
	t.Helper()
	var hints map[string][]topoHint
	var best *topoHint
	for _, line := range strings.Split(k.KubeletLog(), "\n") {
		if m := hintsLogRE.FindStringSubmatch(line); m != nil && m[2] == ns+"/"+pod {
			hints = nil
			if err := json.Unmarshal([]byte(m[1]), &hints); err != nil {
				t.Fatalf("kubelet's hints for %s: %v\n%s", pod, err, line)
			}
		}
		if m := bestLogRE.FindStringSubmatch(line); m != nil && m[2] == ns+"/"+pod {
			best = &topoHint{}
			if err := json.Unmarshal([]byte(m[1]), best); err != nil {
				t.Fatalf("kubelet's best hint for %s: %v\n%s", pod, err, line)
			}
		}
	}
	if hints == nil || best == nil {
		t.Fatalf("the kubelet logged no topology hints for pod %s/%s:\n%s", ns, pod, e2e.GrepLines(k.KubeletLog(), "opology"))
	}
	return hints, *best
}

// checkKubeletHint checks that the Topology Manager chose NUMA node numa
// for pod ns/name (-1: refused it, no single node fitting), a node the
// exclusive resource's hints prefer; it returns those hints.
func checkKubeletHint(t *testing.T, k *e2e.KubeEnv, ns, pod string, numa int) []topoHint {
	t.Helper()
	hints, best := kubeletHints(t, k, ns, pod)
	hca := hints[e2e.ExclusiveResource]
	if numa < 0 {
		if best.NUMANodeAffinity != nil || best.Preferred {
			t.Errorf("pod %s: the kubelet's best hint %v, want none preferred (hints %v)", pod, best, hints)
		}
		return hca
	}
	mask := 1 << numa
	if best.NUMANodeAffinity == nil || *best.NUMANodeAffinity != mask || !best.Preferred {
		t.Errorf("pod %s: the kubelet's best hint %v, want NUMA node %d preferred (hints %v)", pod, best, numa, hints)
	}
	if hca != nil && !slices.ContainsFunc(hca, func(h topoHint) bool {
		return h.Preferred && h.NUMANodeAffinity != nil && *h.NUMANodeAffinity == mask
	}) {
		t.Errorf("pod %s: %s's hints %v do not prefer NUMA node %d", pod, e2e.ExclusiveResource, hca, numa)
	}
	return hca
}

// singleNodes are the NUMA nodes that hints prefer alone.
func singleNodes(hints []topoHint) []int {
	var out []int
	for _, h := range hints {
		if h.Preferred && h.NUMANodeAffinity != nil {
			for n := range 64 {
				if *h.NUMANodeAffinity == 1<<n {
					out = append(out, n)
				}
			}
		}
	}
	return out
}

// TestKubeDevicePluginTopologyManager: with a GPU plugin beside it under
// the kubelet's single-numa-node policy (pod scope), the exclusive
// resource's HCAs land on the NUMA node of the pod's GPUs, and within it
// where GetPreferredAllocation puts them (one PCIe root; a lone HCA from
// the smallest root, so a later pair still finds one root whole). Each
// pod's HCAs (device nodes, nccl.conf) and GPUs (NVIDIA_VISIBLE_DEVICES)
// are read in the pod, and the kubelet's logged hints are checked against
// them: the best hint is the pod's NUMA node, one the exclusive resource's
// hints (made from the plugin's TopologyInfo) prefer.
//   - the kubelet runs single-numa-node and knows every NUMA node the
//     plugins report (none ignored as unknown to cadvisor);
//   - gpu: 1 with hca: 4, which no NUMA node holds, is bound by the
//     scheduler and refused by the kubelet with TopologyAffinityError;
//   - gpu: 2 with hca: 2 gets NUMA node 1's GPUs and mlx5_2 + mlx5_3 (one
//     root; the kubelet alone would take any two of mlx5_2..4); then gpu: 1
//     with hca: 2, for which NUMA node 0 has GPUs but one HCA and node 1
//     an HCA but no GPU, is refused though the node has both free; gpu: 2
//     with hca: 1 gets NUMA node 0's GPUs and mlx5_1;
//   - afterwards, on an empty node: gpu: 1 with hca: 1 gets NUMA node 0
//     (the kubelet's lower node among equals) and mlx5_1; the next one NUMA
//     node 1 and mlx5_4, the HCA alone behind its root, not mlx5_2; then
//     gpu: 1 with hca: 2 the pair mlx5_2 + mlx5_3;
//   - the shared rdma/hca, whose units span both NUMA nodes, is admitted
//     beside a GPU and gives every RoCE HCA.
func TestKubeDevicePluginTopologyManager(t *testing.T) {
	node := e2e.NewFixtureNode(t, "two-socket")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{
		Images:        []string{e2e.Glibc.DockerArchive(t)},
		KubeletConfig: "topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n",
		NUMANodes:     2,
	})
	for _, n := range []string{"node0/cpu0", "node1/cpu1"} {
		if _, err := os.Stat(k.NodePath("/sys/devices/system/node/" + n + "/topology/core_id")); err != nil {
			t.Fatalf("the node's /sys/devices/system/node: %v", err)
		}
	}
	startFakeGPU(t, k, fakeGPUs, "4")
	k.InstallAgent(t, "device-plugin", nil)
	k.WaitNodeAllocatable(t, e2e.ExclusiveResource, "4", 2*time.Minute)
	log := k.KubeletLog()
	if !strings.Contains(log, `"Creating topology manager with policy per scope" topologyPolicyName="single-numa-node" topologyScopeName="pod"`) {
		t.Fatalf("the kubelet did not start single-numa-node at pod scope:\n%s", e2e.TailString(log, 6000))
	}

	ns := e2e.UniqueID("topo-")
	k.Apply(t, e2e.NamespaceManifest(ns))
	pod := func(name string, limits map[string]int) string {
		m := rdmaPodManifest(ns, name, limits, false)
		k.Apply(t, m)
		return m
	}

	// admitted waits for pod name, checks what it got on NUMA node numa and
	// the kubelet's choice of that node, and returns the NUMA nodes the
	// exclusive resource's hints preferred alone.
	admitted := func(name string, gpus int, hcas []string, numa int) []int {
		t.Helper()
		k.WaitPod(t, ns, name, "Ready", 2*time.Minute)
		checkAlignedPod(t, k, node, ns, name, gpus, hcas, numa)
		return singleNodes(checkKubeletHint(t, k, ns, name, numa))
	}
	refused := func(name string) []int {
		t.Helper()
		waitTopologyRefusal(t, k, ns, name)
		return singleNodes(checkKubeletHint(t, k, ns, name, -1))
	}

	// Four HCAs with a GPU: the node has them, no NUMA node does.
	toobig := pod("toobig", map[string]int{gpuResource: 1, e2e.ExclusiveResource: 4})
	if n := refused("toobig"); len(n) != 0 {
		t.Errorf("toobig: 4 HCAs preferred on NUMA node %v alone", n)
	}
	k.Delete(t, toobig)

	// Two and two: only NUMA node 1 has two HCAs; of its three, the two
	// behind one root.
	pair := pod("pair", map[string]int{gpuResource: 2, e2e.ExclusiveResource: 2})
	if n := admitted("pair", 2, []string{"mlx5_2", "mlx5_3"}, 1); !slices.Equal(n, []int{1}) {
		t.Errorf("pair: 2 HCAs preferred on NUMA nodes %v alone, want [1]", n)
	}
	// NUMA node 0 has its GPUs and mlx5_1, node 1 mlx5_4 and no GPU.
	stranded := pod("stranded", map[string]int{gpuResource: 1, e2e.ExclusiveResource: 2})
	if n := refused("stranded"); len(n) != 0 {
		t.Errorf("stranded: 2 HCAs preferred on NUMA node %v alone", n)
	}
	k.Delete(t, stranded)
	socket0 := pod("socket0", map[string]int{gpuResource: 2, e2e.ExclusiveResource: 1})
	admitted("socket0", 2, []string{"mlx5_1"}, 0)
	k.Delete(t, pair+"---\n"+socket0)

	// One at a time on an empty node: NUMA node 0 first (the kubelet's
	// lower node among equally narrow hints), then node 1, where
	// GetPreferredAllocation, offered mlx5_2..4, gives the HCA alone
	// behind its root, so that the next pod's pair finds one root whole.
	pod("one-a", map[string]int{gpuResource: 1, e2e.ExclusiveResource: 1})
	admitted("one-a", 1, []string{"mlx5_1"}, 0)
	pod("one-b", map[string]int{gpuResource: 1, e2e.ExclusiveResource: 1})
	if n := admitted("one-b", 1, []string{"mlx5_4"}, 1); !slices.Equal(n, []int{1}) {
		t.Errorf("one-b: an HCA preferred on NUMA nodes %v alone, want [1] (mlx5_1 is held)", n)
	}
	pod("two-c", map[string]int{gpuResource: 1, e2e.ExclusiveResource: 2})
	admitted("two-c", 1, []string{"mlx5_2", "mlx5_3"}, 1)

	// The shared resource's units span both NUMA nodes: admitted beside
	// the last GPU (node 0), with every RoCE HCA.
	pod("shared", map[string]int{gpuResource: 1, e2e.SharedResource: 1})
	k.WaitPod(t, ns, "shared", "Ready", 2*time.Minute)
	e2e.CheckRDMAPod(t, node, e2e.ProbePod(t, k, ns, "shared"), []string{"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"}, "3")
	checkKubeletHint(t, k, ns, "shared", 0)
	if hints, _ := kubeletHints(t, k, ns, "shared"); !slices.Equal(singleNodes(hints[e2e.SharedResource]), []int{0, 1}) {
		t.Errorf("shared: %s's hints %v, want NUMA nodes 0 and 1 each preferred", e2e.SharedResource, hints[e2e.SharedResource])
	}

	if l := k.KubeletLog(); strings.Contains(l, "unknown to cadvisor") {
		t.Errorf("the kubelet ignored NUMA nodes of a device plugin:\n%s", e2e.GrepLines(l, "unknown to cadvisor"))
	}
}
