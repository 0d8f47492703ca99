package kube

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// TestKubeDRASharedByBandwidth: mlx5_1 (100 Gb/s on seed 002) shared by
// capacity. Two pods asking 40 Gb/s each share it and both see exactly it
// (its nodes alone in /dev/infiniband, nccl.conf naming it alone); a third
// asking 40 more stays Pending with the scheduler's reason, word for word
// as this release gives it; an exclusive claim (asking no bandwidth: all of
// it) waits until the shares are gone, and then a shared one waits for it.
// Where the release has no consumable capacity no HCA is shareable and the
// shared class matches nothing, which the scheduler reports the same way.
func TestKubeDRASharedByBandwidth(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.DRANode(t, node, 9)
	ns := e2e.UniqueID("dra-share-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+e2e.HCA1Claim(ns, "share40", "shared", "40")+"---\n"+e2e.HCA1Claim(ns, "whole", "hca", ""))
	if e2e.KubeMinor(t) < 36 {
		// No consumable capacity: the API server drops the request's
		// capacity, the driver publishes no HCA as shareable, and the
		// scheduler finds no device for the claim on the one node.
		for _, d := range e2e.SliceDevices(t, k) {
			if e2e.Attr(d, "shareable") != nil || len(d.Capacity) != 0 {
				t.Errorf("device %s is shareable (%v) or has capacity %v on %s", d.Name, e2e.Attr(d, "shareable"), d.Capacity, e2e.KubeVersion())
			}
		}
		k.Apply(t, e2e.ClaimPod(ns, "a", "share40"))
		waitSchedulingFailure(t, k, ns, "a", unallocatableOnOneNode(t))
		var claims resourceapi.ResourceClaimList
		if err := json.Unmarshal([]byte(k.MustKubectl(t, "get", "resourceclaims", "-n", ns, "-o", "json")), &claims); err != nil {
			t.Fatal(err)
		}
		if len(claims.Items) != 1 {
			t.Fatalf("%d claims in %s, want pod a's", len(claims.Items), ns)
		}
		for _, r := range claims.Items[0].Spec.Devices.Requests {
			if r.Exactly == nil || r.Exactly.Capacity != nil {
				t.Errorf("claim %s request %s: %+v; want its capacity dropped on %s", claims.Items[0].Name, r.Name, r.Exactly, e2e.KubeVersion())
			}
		}
		return
	}
	for _, p := range []string{"a", "b"} {
		k.Apply(t, e2e.ClaimPod(ns, p, "share40"))
	}
	for _, p := range []string{"a", "b"} {
		k.WaitPod(t, ns, p, "Ready", 2*time.Minute)
		// Exactly mlx5_1's nodes (uverbs1, its umad and issm) and rdma_cm,
		// and an nccl.conf naming mlx5_1 alone.
		e2e.CheckRDMAPod(t, node, e2e.ProbePod(t, k, ns, p), []string{"mlx5_1"}, "3")
	}
	k.Apply(t, e2e.ClaimPod(ns, "c", "share40"))
	waitSchedulingFailure(t, k, ns, "c", unallocatableOnOneNode(t))
	k.Apply(t, e2e.ClaimPod(ns, "exclusive", "whole"))
	waitSchedulingFailure(t, k, ns, "exclusive", unallocatableOnOneNode(t))

	// The shares go: the exclusive claim takes the HCA (c, still asking,
	// must not get in beside it).
	k.MustKubectl(t, "delete", "pod", "-n", ns, "a", "b", "c", "--wait=true")
	k.WaitPod(t, ns, "exclusive", "Ready", 2*time.Minute)
	k.Apply(t, e2e.ClaimPod(ns, "d", "share40"))
	waitSchedulingFailure(t, k, ns, "d", unallocatableOnOneNode(t))
}

// unallocatableOnOneNode is what the scheduler of the release under test
// says of a pod whose claims no device of the single node can satisfy,
// word for word as each release was seen to say it: 1.35's DRA plugin
// adds its PostFilter's "still not schedulable", which 1.37's does not.
func unallocatableOnOneNode(t *testing.T) string {
	t.Helper()
	const allocate, preempt = "0/1 nodes are available: 1 cannot allocate all claims. ",
		"preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
	switch minor := e2e.KubeMinor(t); minor {
	case 35:
		return allocate + "still not schedulable, " + preempt
	case 37:
		return allocate + preempt
	default:
		t.Fatalf("no scheduler message recorded for Kubernetes %s: run this test on it and add what its scheduler says", e2e.KubeVersion())
		return ""
	}
}

// waitSchedulingFailure waits for the scheduler's FailedScheduling event of
// pod ns/name and requires its message to be exactly want, the pod Pending
// and unscheduled, and its claims unallocated.
func waitSchedulingFailure(t *testing.T, k *e2e.KubeEnv, ns, name, want string) {
	t.Helper()
	var msgs []string
	for deadline := time.Now().Add(time.Minute); len(msgs) == 0; time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: no FailedScheduling event in a minute:\n%s", name, k.Describe(ns, "pod", name))
		}
		var events corev1.EventList
		out := k.MustKubectl(t, "get", "events", "-n", ns, "-o", "json",
			"--field-selector", "involvedObject.kind=Pod,involvedObject.name="+name+",reason=FailedScheduling")
		if err := json.Unmarshal([]byte(out), &events); err != nil {
			t.Fatalf("events: %v\n%s", err, out)
		}
		for _, e := range events.Items {
			msgs = append(msgs, e.Message)
		}
	}
	for _, m := range msgs {
		if m != want {
			t.Errorf("pod %s: the scheduler says\n  %q\nwant\n  %q", name, m, want)
		}
	}
	var pod corev1.Pod
	if err := json.Unmarshal([]byte(k.MustKubectl(t, "get", "pod", "-n", ns, name, "-o", "json")), &pod); err != nil {
		t.Fatal(err)
	}
	if pod.Status.Phase != corev1.PodPending || pod.Spec.NodeName != "" {
		t.Errorf("pod %s: phase %s on node %q; want Pending and unscheduled", name, pod.Status.Phase, pod.Spec.NodeName)
	}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			continue
		}
		var c resourceapi.ResourceClaim
		if err := json.Unmarshal([]byte(k.MustKubectl(t, "get", "resourceclaim", "-n", ns, *s.ResourceClaimName, "-o", "json")), &c); err != nil {
			t.Fatal(err)
		}
		if c.Status.Allocation != nil {
			t.Errorf("claim %s of unschedulable pod %s is allocated: %+v", c.Name, name, c.Status.Allocation)
		}
	}
}
