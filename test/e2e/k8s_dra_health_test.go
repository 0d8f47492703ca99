package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/health"
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
	node := SharedFixtureNode(t, "seed002")
	k := draNode(t, node, 9)
	ns := UniqueID("dra-taint-")
	k.Apply(t, namespaceManifest(ns)+"---\n"+hca8Claims(ns))

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
