package kube

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	k.WaitNodeAllocatable(b, sharedResource, "1000", 2*time.Minute)
	waitSlice(b, k, func(d []resourceapi.Device) bool { return len(d) == 9 }, "9 devices", func() string { return "" })
	ns := e2e.UniqueID("podstart-")
	k.Apply(b, e2e.NamespaceManifest(ns)+"---\n"+exampleTemplates(b, ns))

	timePodStarts(b, k, ns, []podStartCase{
		{"plain", func(n string) string { return glibcPodManifest(ns, n, "", "") }},
		{"device-plugin", func(n string) string { return rdmaPodManifest(ns, n, map[string]int{sharedResource: 1}, false) }},
		{"dra", func(n string) string { return claimPod(ns, n, "one-hca") }},
	})
}

// podStartCase is one kind of pod a start benchmark times.
type podStartCase struct {
	name     string
	manifest func(name string) string
}

// timePodStarts times a pod of each case per round, the order rotating
// every round, and reports each case's median and its ratio to the first
// case's (the baseline).
func timePodStarts(b *testing.B, k *e2e.KubeEnv, ns string, cases []podStartCase) {
	b.Helper()
	took := make([][]time.Duration, len(cases))
	round := 0
	for b.Loop() {
		for j := range cases {
			i := (round + j) % len(cases)
			c := cases[i]
			took[i] = append(took[i], timePodStart(b, k, ns, fmt.Sprintf("%s-%d", c.name, round), c.manifest))
		}
		round++
	}
	b.StopTimer()
	base := median(took[0])
	for i, c := range cases {
		m := median(took[i])
		b.ReportMetric(float64(m.Milliseconds()), c.name+"-ms")
		if i > 0 {
			b.ReportMetric(float64(m)/float64(base), c.name+"/"+cases[0].name)
		}
		b.Logf("%-14s median %v over %d pods: %v", c.name, m, len(took[i]), took[i])
	}
}

// timePodStart creates the pod and returns the time until its command ran.
func timePodStart(b *testing.B, k *e2e.KubeEnv, ns, name string, manifest func(string) string) time.Duration {
	b.Helper()
	m := strings.Replace(manifest(name), `"exec sleep 3600"`, `"date +%s%N > /tmp/started; exec sleep 3600"`, 1)
	start := time.Now()
	if _, se, err := e2e.Run(k.KubectlCmd([]byte(m), "apply", "-f", "-")); err != nil {
		b.Fatalf("kubectl apply %s: %v\n%s", name, err, se)
	}
	k.WaitPod(b, ns, name, "Ready", 2*time.Minute)
	out := strings.TrimSpace(k.MustExecInPod(b, ns, name, "main", "cat", "/tmp/started"))
	ns64, err := strconv.ParseInt(out, 10, 64)
	if err != nil {
		b.Fatalf("%s: start time %q: %v", name, out, err)
	}
	if _, se, err := e2e.Run(k.KubectlCmd(nil, "delete", "pod", "-n", ns, name, "--wait=true")); err != nil {
		b.Fatalf("kubectl delete pod %s: %v\n%s", name, err, se)
	}
	return time.Unix(0, ns64).Sub(start)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
