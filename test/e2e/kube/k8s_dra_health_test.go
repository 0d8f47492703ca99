package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// hca8Claims are claim templates for mlx5_8 alone: plain, and tolerating
// the driver's unhealthy taint.
func hca8Claims(ns string) string {
	mlx58 := `device.attributes["rdma.example.com"].ibdev == "mlx5_8"`
	return claimTemplate(ns, "hca8", "hca", mlx58, "") + "---\n" + claimTemplate(ns, "hca8-tolerant", "hca", mlx58, `
            tolerations:
              - key: rdma.example.com/unhealthy
                operator: Exists
                effect: NoSchedule`)
}

// TestKubeDRAUnhealthyTaint: mlx5_8's port goes DOWN on seed 002's node.
// Its device gets the taint rdma.example.com/unhealthy=NoActivePort
// (NoSchedule) in the slice; a claim for it stays Pending with the
// scheduler's reason while a claim tolerating the taint gets it; when the
// port comes back the taint clears and the pending pod starts. Where the
// release drops taints (1.35) the device leaves the slice instead.
func TestKubeDRAUnhealthyTaint(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := draNode(t, node, 9)
	ns := e2e.UniqueID("dra-taint-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+hca8Claims(ns))

	setFixturePort(t, k, node, "mlx5_8", "eth8", false)
	t.Cleanup(func() { setFixturePort(t, k, node, "mlx5_8", "eth8", true) })
	start := time.Now()
	waitUnhealthy(t, k, "mlx5-8", health.CodeNoActivePort)
	t.Logf("mlx5-8 unhealthy in the slice %v after its port went down", time.Since(start).Round(100*time.Millisecond))

	k.Apply(t, claimPod(ns, "waits", "hca8"))
	waitUnschedulable(t, k, ns, "waits", "cannot allocate all claims")
	if taintsOn(t) {
		k.Apply(t, claimPod(ns, "tolerates", "hca8-tolerant"))
		k.WaitPod(t, ns, "tolerates", "Ready", 2*time.Minute)
		if got := k.MustExecInPod(t, ns, "tolerates", "main", "ls", "/dev/infiniband"); !strings.Contains(got, "uverbs8") {
			t.Fatalf("the tolerating claim's pod lacks mlx5_8's uverbs8: %q", got)
		}
		k.MustKubectl(t, "delete", "pod", "-n", ns, "tolerates", "--wait=true")
	}

	setFixturePort(t, k, node, "mlx5_8", "eth8", true)
	waitHealthy(t, k, "mlx5-8")
	k.WaitPod(t, ns, "waits", "Ready", 2*time.Minute)
}

// podHealthShown reports whether the kubelet puts device health in pods'
// status (allocatedResourcesStatus): the ResourceHealthStatus gate, beta
// and on by default from 1.36, alpha and off before.
func podHealthShown(t testing.TB) bool { return kubeMinor(t) >= 36 }

// waitResourceHealth waits until pod's first container reports, under a
// resource status whose name has the prefix resource, the device id with
// health (and a message containing message, when not "").
func waitResourceHealth(t testing.TB, k *e2e.KubeEnv, ns, pod, resource, id, health, message string) {
	t.Helper()
	cs := k.Clientset(t)
	var last string
	err := e2e.WaitFor(context.Background(), 90*time.Second, func() error {
		p, err := cs.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(p.Status.ContainerStatuses) == 0 {
			return fmt.Errorf("no container status yet")
		}
		b, _ := json.Marshal(p.Status.ContainerStatuses[0].AllocatedResourcesStatus)
		last = string(b)
		for _, rs := range p.Status.ContainerStatuses[0].AllocatedResourcesStatus {
			if !strings.HasPrefix(string(rs.Name), resource) {
				continue
			}
			for _, h := range rs.Resources {
				if string(h.ResourceID) == id && string(h.Health) == health && (message == "" || strings.Contains(ptr.Deref(h.Message, ""), message)) {
					return nil
				}
			}
		}
		return fmt.Errorf("no %s %s", id, health)
	})
	if err != nil {
		t.Fatalf("pod %s/%s: %v; want %s of %s* %s (message %q); allocatedResourcesStatus: %s", ns, pod, err, id, resource, health, message, last)
	}
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
	k := draNode(t, node, 9)
	ns := e2e.UniqueID("dra-podhealth-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+hca8Claims(ns)+"---\n"+claimPod(ns, "holder", "hca8-tolerant"))
	k.WaitPod(t, ns, "holder", "Ready", 2*time.Minute)
	// The kubelet names a DRA device in the pod's status by its CDI device.
	id := apis.Group + "/hca=mlx5_8"
	if podHealthShown(t) {
		waitResourceHealth(t, k, ns, "holder", "claim:", id, "Healthy", "")
	}

	setFixturePort(t, k, node, "mlx5_8", "eth8", false)
	t.Cleanup(func() { setFixturePort(t, k, node, "mlx5_8", "eth8", true) })
	start := time.Now()
	if podHealthShown(t) {
		waitResourceHealth(t, k, ns, "holder", "claim:", id, "Unhealthy", "no ACTIVE port")
		t.Logf("the pod's status shows mlx5-8 Unhealthy %v after its port went down", time.Since(start).Round(100*time.Millisecond))
	} else {
		waitUnhealthy(t, k, "mlx5-8", health.CodeNoActivePort)
		if p, err := k.GetPod(ns, "holder"); err != nil || p.Status.Phase != "Running" {
			t.Fatalf("holder after its port went down: %+v, %v", p, err)
		}
	}
	setFixturePort(t, k, node, "mlx5_8", "eth8", true)
	if podHealthShown(t) {
		waitResourceHealth(t, k, ns, "holder", "claim:", id, "Healthy", "")
	}
}
