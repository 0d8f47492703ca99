package kube

import (
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// TestKubeDRAUnhealthyTaint: mlx5_8's port goes DOWN on seed 002's node.
// Its device gets the taint rdma.example.com/unhealthy=NoActivePort
// (NoSchedule) in the slice; a claim for it stays Pending with the
// scheduler's reason while a claim tolerating the taint gets it; when the
// port comes back the taint clears and the pending pod starts. Where the
// release drops taints (1.35) the device leaves the slice instead.
func TestKubeDRAUnhealthyTaint(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.DRANode(t, node, 9)
	ns := e2e.UniqueID("dra-taint-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+e2e.HCA8Claims(ns))

	e2e.SetFixturePort(t, k, node, "mlx5_8", "eth8", false)
	t.Cleanup(func() { e2e.SetFixturePort(t, k, node, "mlx5_8", "eth8", true) })
	start := time.Now()
	e2e.WaitUnhealthy(t, k, "mlx5-8", health.CodeNoActivePort)
	t.Logf("mlx5-8 unhealthy in the slice %v after its port went down", time.Since(start).Round(100*time.Millisecond))

	k.Apply(t, e2e.ClaimPod(ns, "waits", "hca8"))
	waitUnschedulable(t, k, ns, "waits", "cannot allocate all claims")
	if e2e.TaintsOn(t) {
		k.Apply(t, e2e.ClaimPod(ns, "tolerates", "hca8-tolerant"))
		k.WaitPod(t, ns, "tolerates", "Ready", 2*time.Minute)
		if got := k.MustExecInPod(t, ns, "tolerates", "main", "ls", "/dev/infiniband"); !strings.Contains(got, "uverbs8") {
			t.Fatalf("the tolerating claim's pod lacks mlx5_8's uverbs8: %q", got)
		}
		k.MustKubectl(t, "delete", "pod", "-n", ns, "tolerates", "--wait=true")
	}

	e2e.SetFixturePort(t, k, node, "mlx5_8", "eth8", true)
	e2e.WaitHealthy(t, k, "mlx5-8")
	k.WaitPod(t, ns, "waits", "Ready", 2*time.Minute)
}

// TestKubeDRAHealthInPodStatus: a pod holding mlx5_8 (its claim tolerates
// the unhealthy taint) reads the device's health in its own status: the
// DRA driver's health stream (DRAResourceHealth.NodeWatchResources) tells
// the kubelet, which shows Unhealthy with the reason once the port goes
// down, and Healthy again when it comes back. On 1.35 the kubelet does not
// ask (ResourceHealthStatus is off there): the pod keeps running, its
// status without the field.
func TestKubeDRAHealthInPodStatus(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.DRANode(t, node, 9)
	ns := e2e.UniqueID("dra-podhealth-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+e2e.HCA8Claims(ns)+"---\n"+e2e.ClaimPod(ns, "holder", "hca8-tolerant"))
	k.WaitPod(t, ns, "holder", "Ready", 2*time.Minute)
	// The kubelet names a DRA device in the pod's status by its CDI device.
	id := apis.Group + "/hca=mlx5_8"
	if e2e.PodHealthShown(t) {
		e2e.WaitResourceHealth(t, k, ns, "holder", "claim:", id, "Healthy", "")
	}

	e2e.SetFixturePort(t, k, node, "mlx5_8", "eth8", false)
	t.Cleanup(func() { e2e.SetFixturePort(t, k, node, "mlx5_8", "eth8", true) })
	start := time.Now()
	if e2e.PodHealthShown(t) {
		e2e.WaitResourceHealth(t, k, ns, "holder", "claim:", id, "Unhealthy", "no ACTIVE port")
		t.Logf("the pod's status shows mlx5-8 Unhealthy %v after its port went down", time.Since(start).Round(100*time.Millisecond))
	} else {
		e2e.WaitUnhealthy(t, k, "mlx5-8", health.CodeNoActivePort)
		if p, err := k.GetPod(ns, "holder"); err != nil || p.Status.Phase != "Running" {
			t.Fatalf("holder after its port went down: %+v, %v", p, err)
		}
	}
	e2e.SetFixturePort(t, k, node, "mlx5_8", "eth8", true)
	if e2e.PodHealthShown(t) {
		e2e.WaitResourceHealth(t, k, ns, "holder", "claim:", id, "Healthy", "")
	}
}
