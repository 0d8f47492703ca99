package e2e

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Pod start timing for the Kubernetes benchmarks: cases interleaved per
// round, medians and ratios to the first case.

// PodStartCase is one kind of pod a start benchmark times.
type PodStartCase struct {
	Name     string
	Manifest func(name string) string
}

// TimePodStarts times a pod of each case per round, the order rotating
// every round, and reports each case's median and its ratio to the first
// case's (the baseline).
func TimePodStarts(b *testing.B, k *KubeEnv, ns string, cases []PodStartCase) {
	b.Helper()
	took := make([][]time.Duration, len(cases))
	round := 0
	for b.Loop() {
		for j := range cases {
			i := (round + j) % len(cases)
			c := cases[i]
			took[i] = append(took[i], TimePodStart(b, k, ns, fmt.Sprintf("%s-%d", c.Name, round), c.Manifest))
		}
		round++
	}
	b.StopTimer()
	base := Median(took[0])
	for i, c := range cases {
		m := Median(took[i])
		b.ReportMetric(float64(m.Milliseconds()), c.Name+"-ms")
		if i > 0 {
			b.ReportMetric(float64(m)/float64(base), c.Name+"/"+cases[0].Name)
		}
		b.Logf("%-14s median %v over %d pods: %v", c.Name, m, len(took[i]), took[i])
	}
}

// TimePodStart creates the pod and returns the time until its command ran.
func TimePodStart(b *testing.B, k *KubeEnv, ns, name string, manifest func(string) string) time.Duration {
	b.Helper()
	m := strings.Replace(manifest(name), `"exec sleep 3600"`, `"date +%s%N > /tmp/started; exec sleep 3600"`, 1)
	start := time.Now()
	if _, se, err := Run(k.KubectlCmd([]byte(m), "apply", "-f", "-")); err != nil {
		b.Fatalf("kubectl apply %s: %v\n%s", name, err, se)
	}
	k.WaitPod(b, ns, name, "Ready", 2*time.Minute)
	out := strings.TrimSpace(k.MustExecInPod(b, ns, name, "main", "cat", "/tmp/started"))
	ns64, err := strconv.ParseInt(out, 10, 64)
	if err != nil {
		b.Fatalf("%s: start time %q: %v", name, out, err)
	}
	if _, se, err := Run(k.KubectlCmd(nil, "delete", "pod", "-n", ns, name, "--wait=true")); err != nil {
		b.Fatalf("kubectl delete pod %s: %v\n%s", name, err, se)
	}
	return time.Unix(0, ns64).Sub(start)
}

// Median is the middle of d, sorted (the upper one of an even count).
func Median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
