package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// hca1Claim is a claim template for mlx5_1 alone from class, asking for
// bandwidth Gb/s of it ("" asks for none: the default, all of it).
func hca1Claim(ns, name, class, bandwidth string) string {
	capacity := ""
	if bandwidth != "" {
		capacity = fmt.Sprintf("\n            capacity:\n              requests:\n                bandwidth: %q", bandwidth)
	}
	return claimTemplate(ns, name, class, `device.attributes["rdma.example.com"].ibdev == "mlx5_1"`, capacity)
}

// TestKubeDRASharedByBandwidth: mlx5_1 (100 Gb/s on seed 002) shared by
// capacity. Two pods asking 40 Gb/s each share it and both see it; a third
// asking 40 more stays Pending with the scheduler's reason; an exclusive
// claim (asking no bandwidth: all of it) waits until the shares are gone,
// and then a shared one waits for it. Where the release has no consumable
// capacity the shared class matches nothing.
func TestKubeDRASharedByBandwidth(t *testing.T) {
	node := SharedFixtureNode(t, "seed002")
	k := draNode(t, node, 9)
	ns := UniqueID("dra-share-")
	k.Apply(t, namespaceManifest(ns)+"---\n"+hca1Claim(ns, "share40", "shared", "40")+"---\n"+hca1Claim(ns, "whole", "hca", ""))
	if kubeMinor(t) < 36 {
		k.Apply(t, claimPod(ns, "a", "share40"))
		waitUnschedulable(t, k, ns, "a", "cannot allocate all claims")
		return
	}
	for _, p := range []string{"a", "b"} {
		k.Apply(t, claimPod(ns, p, "share40"))
	}
	for _, p := range []string{"a", "b"} {
		k.WaitPod(t, ns, p, "Ready", 2*time.Minute)
		if got := k.MustExecInPod(t, ns, p, "main", "ls", "/dev/infiniband"); !strings.Contains(got, "uverbs1") {
			t.Fatalf("pod %s sharing mlx5_1 lacks uverbs1: %q", p, got)
		}
		if conf := k.MustExecInPod(t, ns, p, "main", "cat", "/etc/nccl.conf"); !strings.Contains(conf, "NCCL_IB_HCA=mlx5_1:1") {
			t.Errorf("pod %s's nccl.conf:\n%s", p, conf)
		}
	}
	k.Apply(t, claimPod(ns, "c", "share40"))
	waitUnschedulable(t, k, ns, "c", "cannot allocate all claims")
	k.Apply(t, claimPod(ns, "exclusive", "whole"))
	waitUnschedulable(t, k, ns, "exclusive", "cannot allocate all claims")

	// The shares go: the exclusive claim takes the HCA (c, still asking,
	// must not get in beside it).
	k.MustKubectl(t, "delete", "pod", "-n", ns, "a", "b", "c", "--wait=true")
	k.WaitPod(t, ns, "exclusive", "Ready", 2*time.Minute)
	k.Apply(t, claimPod(ns, "d", "share40"))
	waitUnschedulable(t, k, ns, "d", "cannot allocate all claims")
}
