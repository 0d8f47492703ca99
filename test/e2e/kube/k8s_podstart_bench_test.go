package kube

import (
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
	resourceapi "k8s.io/api/resource/v1"
)

// BenchmarkKubePodStart: the time from a pod's creation (kubectl apply) to
// its container running (the first thing its command does is write the
// clock's nanoseconds, read back afterwards), on seed 002's node with both
// the shipped device plugin and the shipped DRA driver, interleaved round by
// round: a plain pod, a pod with rdma/hca: 1 (shared device plugin), and a
// pod with the one-hca DRA claim. The chart is installed twice, in mode
// device-plugin and in mode dra: both agents write the same spec with the
// same flags, so it stays byte for byte one file (the second serves no
// metrics: the port and the hooks' socket are the node's). Medians per
// case, and each RDMA case's ratio to the plain one, are reported as
// metrics.
//
//	go test ./test/e2e/kube -run '^$' -bench BenchmarkKubePodStart -benchtime 10x
func BenchmarkKubePodStart(b *testing.B) {
	node := e2e.SharedFixtureNode(b, "seed002")
	k := e2e.KubeNode(b, node, e2e.KubeOptions{Images: []string{e2e.Glibc.DockerArchive(b)}})
	k.InstallAgent(b, "device-plugin", nil)
	// One agent per node serves metrics: the node's port and the hooks'
	// socket are the first release's.
	k.HelmInstall(b, "rdma-cdi-dra", "rdma-cdi-dra", e2e.AgentValues(k.RDMACDIImage(b), "dra", map[string]any{"metrics": map[string]any{"enabled": false}}))
	k.WaitPodsOf(b, "rdma-cdi-dra", e2e.AgentSelector, "Ready", 3*time.Minute)
	k.WaitNodeAllocatable(b, e2e.SharedResource, "1000", 2*time.Minute)
	e2e.WaitSlice(b, k, func(d []resourceapi.Device) bool { return len(d) == 9 }, "9 devices", func() string { return "" })
	ns := e2e.UniqueID("podstart-")
	k.Apply(b, e2e.NamespaceManifest(ns)+"---\n"+exampleTemplates(b, ns))

	e2e.TimePodStarts(b, k, ns, []e2e.PodStartCase{
		{Name: "plain", Manifest: func(n string) string { return e2e.GlibcPodManifest(ns, n, "", "") }},
		{Name: "device-plugin", Manifest: func(n string) string { return rdmaPodManifest(ns, n, map[string]int{e2e.SharedResource: 1}, false) }},
		{Name: "dra", Manifest: func(n string) string { return e2e.ClaimPod(ns, n, "one-hca") }},
	})
}
