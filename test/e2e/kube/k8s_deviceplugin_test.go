package kube

// `rdma-cdi device-plugin` on a real kubelet and API server: the shipped
// DaemonSet (deploy/kubernetes/daemonset.yaml, only its image replaced)
// serves rdma/hca (shared) and rdma.example.com/hca (exclusive); pods ask
// for them with resource limits and get, through the kubelet's CDIDevices
// and containerd, exactly their HCAs' nodes, the libraries and the hooks'
// /etc/nccl.conf.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// rdmaPodManifest is a glibc pod (hostNetwork: the node has no CNI) with
// the given resource limits, running until deleted.
func rdmaPodManifest(ns, name string, limits map[string]int, ipcLock bool) string {
	var lim strings.Builder
	for _, r := range slices.Sorted(maps.Keys(limits)) {
		fmt.Fprintf(&lim, "\n          %s: %d", r, limits[r])
	}
	resources := ""
	if lim.Len() > 0 {
		resources = "\n      resources:\n        limits:" + lim.String()
	}
	security := ""
	if ipcLock {
		security = "\n      securityContext:\n        capabilities:\n          add: [\"IPC_LOCK\"]"
	}
	return e2e.GlibcPodManifest(ns, name, "", resources+security)
}

// devicePluginNode starts (or reuses) a node on fixture node, installs the
// chart in mode device-plugin and waits until the kubelet advertises both resources.
func devicePluginNode(t *testing.T, node *e2e.FixtureNode, wantShared, wantExclusive string) *e2e.KubeEnv {
	t.Helper()
	k := e2e.KubeNode(t, node, e2e.KubeOptions{Images: []string{e2e.Glibc.DockerArchive(t)}})
	k.InstallAgent(t, "device-plugin", nil)
	k.WaitNodeAllocatable(t, e2e.SharedResource, wantShared, 2*time.Minute)
	k.WaitNodeAllocatable(t, e2e.ExclusiveResource, wantExclusive, time.Minute)
	return k
}

// exclusiveHCA is the one HCA a pod with one exclusive unit was given, as
// its nccl.conf names it; the probe must show exactly that HCA's nodes.
func exclusiveHCA(t *testing.T, topo *e2e.FixtureNode, out string) string {
	t.Helper()
	m := e2e.NCCLHCA.FindStringSubmatch(e2e.Section(out, "nccl.conf"))
	if m == nil {
		t.Fatalf("no NCCL_IB_HCA in the pod's /etc/nccl.conf:\n%s", out)
	}
	hca, port, _ := strings.Cut(strings.TrimPrefix(m[1], "="), ":")
	if port != "1" || strings.Contains(hca, ",") {
		t.Fatalf("NCCL_IB_HCA=%s: want one HCA's port 1", m[1])
	}
	e2e.CheckRDMAPod(t, topo, out, []string{hca}, "3")
	return hca
}

// memlockRaised: the hook raised the soft limit to the hard one (root here
// lacks CAP_SYS_RESOURCE, so the hard limit cannot rise above containerd's).
func memlockRaised(t *testing.T, out string) {
	t.Helper()
	f := strings.Fields(e2e.Section(out, "limits"))
	if len(f) < 5 || f[3] != f[4] {
		t.Errorf("Max locked memory soft/hard %v: want soft raised to hard", f)
	}
}

// TestKubeDevicePluginSeedPods: seed 002's pod spec (rdma/hca: 1 and
// IPC_LOCK) on its 9-HCA node, twice at once, and a bystander.
func TestKubeDevicePluginSeedPods(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := devicePluginNode(t, node, "1000", "8")
	ns := e2e.UniqueID("seed-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+
		rdmaPodManifest(ns, "trainer-0", map[string]int{e2e.SharedResource: 1}, true)+"---\n"+
		rdmaPodManifest(ns, "trainer-1", map[string]int{e2e.SharedResource: 1}, true)+"---\n"+
		rdmaPodManifest(ns, "bystander", nil, false))
	roce := []string{"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8"}
	for _, pod := range []string{"trainer-0", "trainer-1"} {
		k.WaitPod(t, ns, pod, "Ready", 2*time.Minute)
	}
	for _, pod := range []string{"trainer-0", "trainer-1"} {
		out := e2e.ProbePod(t, k, ns, pod)
		e2e.CheckRDMAPod(t, node, out, roce, "3")
		memlockRaised(t, out)
	}
	k.WaitPod(t, ns, "bystander", "Ready", time.Minute)
	out := e2e.ProbePod(t, k, ns, "bystander")
	if strings.Contains(out, "uverbs") || strings.Contains(out, "NCCL_IB_HCA") {
		t.Errorf("a pod that asked for nothing got RDMA:\n%s", out)
	}
}

// TestKubeDevicePluginExclusiveNUMA: on the two-socket node, a pod asking
// for two exclusive HCAs gets the two on one socket and one PCIe root
// (mlx5_2, mlx5_3), not the first two by name (mlx5_1 on socket 0); a pod
// asking for more than the node has stays Pending with the scheduler's
// reason; a port going down takes its HCA out of the allocatable count,
// and back when it comes up; a held HCA's port going down shows in its
// pod's status (allocatedResourcesStatus, from 1.36) and recovers there.
func TestKubeDevicePluginExclusiveNUMA(t *testing.T) {
	node := e2e.NewFixtureNode(t, "two-socket")
	k := devicePluginNode(t, node, "1000", "4")
	ns := e2e.UniqueID("numa-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+
		rdmaPodManifest(ns, "pair", map[string]int{e2e.ExclusiveResource: 2}, false)+"---\n"+
		rdmaPodManifest(ns, "greedy", map[string]int{e2e.ExclusiveResource: 5}, false))
	k.WaitPod(t, ns, "pair", "Ready", 2*time.Minute)
	e2e.CheckRDMAPod(t, node, e2e.ProbePod(t, k, ns, "pair"), []string{"mlx5_2", "mlx5_3"}, "3")

	waitUnschedulable(t, k, ns, "greedy", "Insufficient "+e2e.ExclusiveResource)

	e2e.SetFixturePort(t, k, node, "mlx5_4", "eth4", false)
	k.WaitNodeAllocatable(t, e2e.ExclusiveResource, "3", time.Minute)
	e2e.SetFixturePort(t, k, node, "mlx5_4", "eth4", true)
	k.WaitNodeAllocatable(t, e2e.ExclusiveResource, "4", time.Minute)

	if !e2e.PodHealthShown(t) {
		return
	}
	e2e.WaitResourceHealth(t, k, ns, "pair", e2e.ExclusiveResource, "mlx5_3", "Healthy", "")
	e2e.SetFixturePort(t, k, node, "mlx5_3", "eth3", false)
	t.Cleanup(func() { e2e.SetFixturePort(t, k, node, "mlx5_3", "eth3", true) })
	e2e.WaitResourceHealth(t, k, ns, "pair", e2e.ExclusiveResource, "mlx5_3", "Unhealthy", "")
	e2e.WaitResourceHealth(t, k, ns, "pair", e2e.ExclusiveResource, "mlx5_2", "Healthy", "")
	e2e.SetFixturePort(t, k, node, "mlx5_3", "eth3", true)
	e2e.WaitResourceHealth(t, k, ns, "pair", e2e.ExclusiveResource, "mlx5_3", "Healthy", "")
}

// readmitRejected waits until pod ns/name, bound while the kubelet was
// down, is admitted by the restarted kubelet. The kubelet may admit it
// before the device plugin has registered again and reject it for good
// (UnexpectedAdmissionError, "no healthy devices present": kubernetes
// issues 125579, 128043, 133382); a naked pod stays Failed, where a
// controller would make a new one. So does the test, once, and the new
// pod must be admitted.
func readmitRejected(t *testing.T, k *e2e.KubeEnv, ns, pod, manifest string) {
	t.Helper()
	var p *e2e.Pod
	if err := e2e.WaitFor(t.Context(), 3*time.Minute, func() error {
		var err error
		if p, err = k.GetPod(ns, pod); err != nil {
			return err
		}
		if p.Status.Phase == "Pending" && p.Status.Reason == "" {
			return fmt.Errorf("pod %s not admitted or rejected yet", pod)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != "Failed" || p.Status.Reason != "UnexpectedAdmissionError" {
		return
	}
	t.Logf("pod %s rejected by the restarted kubelet before the plugin registered again (%s); made again", pod, p.Status.Message)
	k.MustKubectl(t, "delete", "pod", "-n", ns, pod, "--wait=true")
	k.Apply(t, manifest)
}

// waitUnschedulable waits until the scheduler reports pod unschedulable
// for reason, and checks it never started.
func waitUnschedulable(t *testing.T, k *e2e.KubeEnv, ns, pod, reason string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		desc := k.Describe(ns, "pod", pod)
		if strings.Contains(desc, reason) {
			if p, err := k.GetPod(ns, pod); err != nil || p.Status.Phase != "Pending" || p.Spec.NodeName != "" {
				t.Fatalf("pod %s: %+v, %v; want Pending and unscheduled", pod, p, err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: no %q from the scheduler:\n%s", pod, reason, desc)
		}
		time.Sleep(time.Second)
	}
}

// TestKubeDevicePluginRestarts: the kubelet, then containerd, restarts
// while a pod holds an exclusive HCA, and a pod is created while each is
// down; then the plugin's own pod restarts. The running pod keeps its
// container and its devices throughout; after the kubelet's restart the
// plugin registers again and streams both resources to it; each pod
// created during or after a restart gets exactly one HCA that no other
// pod holds (one the restarted kubelet rejects before the plugin has
// registered again is made again, as a controller would:
// readmitRejected); the agent restarts only when its pod is deleted.
func TestKubeDevicePluginRestarts(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := devicePluginNode(t, node, "1000", "8")
	ns := e2e.UniqueID("restart-")
	exclusive := map[string]int{e2e.ExclusiveResource: 1}
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+rdmaPodManifest(ns, "before", exclusive, false))
	k.WaitPod(t, ns, "before", "Ready", 2*time.Minute)
	running := e2e.ContainerOf(t, k, ns, "before")
	holder := map[string]string{exclusiveHCA(t, node, e2e.ProbePod(t, k, ns, "before")): "before"}
	agentKept := e2e.AgentKeeper(t, k)
	for _, daemon := range []string{"kubelet", "containerd"} {
		sent := listAndWatchSends(t, k)
		during, after := "during-"+daemon, "after-"+daemon
		k.Restart(t, daemon, func() {
			k.Apply(t, rdmaPodManifest(ns, during, exclusive, false))
			time.Sleep(5 * time.Second) // scheduled meanwhile
		})
		k.WaitNodeAllocatable(t, e2e.ExclusiveResource, "8", 2*time.Minute)
		if daemon == "kubelet" { // both resources registered again and streamed to the new kubelet
			waitListAndWatchSends(t, k, func(now map[string]float64) bool {
				return now[e2e.SharedResource] > sent[e2e.SharedResource] && now[e2e.ExclusiveResource] > sent[e2e.ExclusiveResource]
			})
		}
		k.Apply(t, rdmaPodManifest(ns, after, exclusive, false))
		if daemon == "kubelet" {
			readmitRejected(t, k, ns, during, rdmaPodManifest(ns, during, exclusive, false))
		}
		for _, pod := range []string{during, after} {
			k.WaitPod(t, ns, pod, "Ready", 3*time.Minute)
			hca := exclusiveHCA(t, node, e2e.ProbePod(t, k, ns, pod))
			if other, held := holder[hca]; held {
				t.Errorf("the exclusive HCA %s went to pod %s while %s held it", hca, pod, other)
			}
			holder[hca] = pod
		}
	}
	e2e.CheckSameContainer(t, k, ns, "before", running)
	if hca := exclusiveHCA(t, node, e2e.ProbePod(t, k, ns, "before")); holder[hca] != "before" {
		t.Errorf("the running pod now sees %s, held by %s", hca, holder[hca])
	}
	agentKept("during the kubelet and containerd restarts")

	old := k.PodNames(t, "rdma-cdi", "app.kubernetes.io/name=rdma-cdi")
	k.MustKubectl(t, "delete", "pod", "-n", "rdma-cdi", "--wait=true", old[0])
	k.WaitPodsOf(t, "rdma-cdi", "app.kubernetes.io/name=rdma-cdi", "Ready", 2*time.Minute)
	if out := e2e.ProbePod(t, k, ns, "before"); !strings.Contains(out, "uverbs") || !strings.Contains(out, "NCCL_IB_HCA") {
		t.Errorf("a running pod lost its devices when the plugin's pod restarted:\n%s", out)
	}
	k.WaitNodeAllocatable(t, e2e.ExclusiveResource, "8", time.Minute)
	// The restarted agent streams both too: a kubelet that had refused a
	// registration of a path it held (1.37) refuses that path for good,
	// keeping the old device list (allocatable unchanged) with no health
	// change ever reaching it.
	waitListAndWatchSends(t, k, func(now map[string]float64) bool { // the new agent's counters
		return now[e2e.SharedResource] >= 1 && now[e2e.ExclusiveResource] >= 1
	})
	k.Apply(t, rdmaPodManifest(ns, "after-plugin", map[string]int{e2e.SharedResource: 1}, false))
	k.WaitPod(t, ns, "after-plugin", "Ready", 2*time.Minute)
	if strings.Contains(k.KubeletLog(), "device plugin already connected") {
		t.Errorf("the kubelet refused a registration of a socket it held:\n%s", kubeletPluginLog(k))
	}
}
