package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// Grey health on the real kubelet: the fixture's counters, rates and PCIe
// link attributes are plain files under its sysfs, written while the agent
// samples them through the same reader it uses on a node.

// greyWindow and greyQuiet are the tests' flap and error windows and
// quiet period: short, with a 1 s interval (chart value config.health), so
// a condition rises and clears in a minute. The quiet period is the longer:
// a condition holds while its events are in the window and clears a quiet
// period after that, so it clears no sooner than greyWindow + greyQuiet
// after its first event, where a tracker without the quiet period would
// clear at greyWindow and one counting it from the last event sooner.
const greyWindow, greyQuiet, greyInterval = 20 * time.Second, 30 * time.Second, time.Second

func greyHealthValues() map[string]any {
	return map[string]any{"config": map[string]any{"health": map[string]any{
		"interval": greyInterval.String(), "flap_window": greyWindow.String(), "flap_threshold": 3, "error_window": greyWindow.String(),
		"quiet_period": greyQuiet.String(),
	}}}
}

// checkHeldForTheQuietPeriod fails when a condition raised by events from
// first on cleared before their window and the quiet period after it
// were over, less one sampling interval (the last sample that saw the
// events in the window may precede the window's end by up to one).
// cleared must be when a wait polling all along first saw it clear.
func checkHeldForTheQuietPeriod(t *testing.T, what string, first, cleared time.Time) {
	t.Helper()
	held := cleared.Sub(first)
	t.Logf("%s cleared %v after its first event", what, held.Round(100*time.Millisecond))
	if held < greyWindow+greyQuiet-greyInterval {
		t.Errorf("%s cleared %v after its first event, before its window (%v) and the quiet period after it (%v) were over",
			what, held.Round(100*time.Millisecond), greyWindow, greyQuiet)
	}
}

// oddButHealthyCounters sets, before the agent's first sample, the
// baselines of counters that must never raise a condition on the busy
// ports: mlx5_3's symbol_error high, to be reset to 0 later
// (resetAndTrickle), and mlx5_4's stuck at a 16-bit counter's ceiling. The
// old values come back at the end of the test.
func oddButHealthyCounters(t *testing.T, node *e2e.FixtureNode) {
	t.Helper()
	for _, c := range []struct{ ibdev, value string }{{"mlx5_3", "1099511627776"}, {"mlx5_4", "65535"}} {
		path := portFile(node, c.ibdev, "counters/"+health.CounterSymbolError)
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(c.value+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.WriteFile(path, old, 0o644) })
	}
}

// resetAndTrickle does, on the busy ports, what a healthy port shows too:
// mlx5_1's link goes down once (below the flap threshold), mlx5_3's
// symbol_error is reset to 0 and counts on from there, and mlx5_2 has a
// trickle of receive errors (4 every 5 s: at most 20 in a window, under
// the threshold of 25) until the test ends.
func resetAndTrickle(t *testing.T, node *e2e.FixtureNode) {
	t.Helper()
	bumpCounter(t, node, "mlx5_1", health.CounterLinkDowned, 1)
	if err := os.WriteFile(portFile(node, "mlx5_3", "counters/"+health.CounterSymbolError), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bumpCounter(t, node, "mlx5_3", health.CounterSymbolError, 10)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	t.Cleanup(func() { cancel(); wg.Wait() })
	trickle := portFile(node, "mlx5_2", "counters/port_rcv_errors")
	go func() {
		defer wg.Done()
		for {
			if err := addToCounter(trickle, 4); err != nil {
				t.Errorf("the error trickle: %v", err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
		}
	}()
}

// portFile is a file of ibdev's port 1 in the fixture's sysfs.
func portFile(node *e2e.FixtureNode, ibdev, rel string) string {
	return filepath.Join(node.Sys, "class/infiniband", ibdev, "ports/1", rel)
}

// bumpCounter adds n to a counter of ibdev's port 1.
func bumpCounter(t testing.TB, node *e2e.FixtureNode, ibdev, counter string, n uint64) {
	t.Helper()
	if err := addToCounter(portFile(node, ibdev, "counters/"+counter), n); err != nil {
		t.Fatal(err)
	}
}

// addToCounter adds n to the counter file at path.
func addToCounter(path string, n uint64) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(strconv.FormatUint(v+n, 10)+"\n"), 0o644)
}

// setRate writes ibdev's port 1 rate, and puts the old one back at the
// end of the test.
func setRate(t *testing.T, node *e2e.FixtureNode, ibdev, rate string) {
	t.Helper()
	path := portFile(node, ibdev, "rate")
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(rate+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(path, old, 0o644) })
}

// busyPorts makes ibdevs' traffic counters race (about 100 Gb/s each, no
// error) until the test ends: a busy healthy port.
func busyPorts(t *testing.T, node *e2e.FixtureNode, ibdevs ...string) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	t.Cleanup(func() { cancel(); wg.Wait() })
	go func() {
		defer wg.Done()
		for v := uint64(1) << 40; ; v += 1_562_500_000 { // 12.5 GB in 4-octet words, a second
			for _, d := range ibdevs {
				for _, c := range []string{"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets"} {
					_ = os.WriteFile(portFile(node, d, "counters/"+c), []byte(strconv.FormatUint(v, 10)+"\n"), 0o644)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
}

// checkNeverRaised fails if the agent's log raised a grey condition on any
// of ibdevs over the whole run.
func checkNeverRaised(t *testing.T, log string, ibdevs ...string) {
	t.Helper()
	for _, d := range ibdevs {
		for _, level := range []health.Level{health.LevelUnhealthy, health.LevelDegraded} {
			if strings.Contains(log, d+" is "+string(level)) {
				t.Errorf("the busy healthy port %s was %s:\n%s", d, level, log[max(0, len(log)-4000):])
			}
		}
	}
}

// flap bumps ibdev's link_downed count times, 1.5 s apart (the agent
// samples every second), and returns when the last one was written.
func flap(t testing.TB, node *e2e.FixtureNode, ibdev string, count int) time.Time {
	for i := 0; i < count; i++ {
		if i > 0 {
			time.Sleep(1500 * time.Millisecond)
		}
		bumpCounter(t, node, ibdev, health.CounterLinkDowned, 1)
	}
	return time.Now()
}

// waitDegraded waits until device is degraded with code (its attribute,
// and where the release keeps taints the degraded taint), or no longer
// degraded when code is "".
func waitDegraded(t testing.TB, k *e2e.KubeEnv, device, code string) {
	t.Helper()
	e2e.WaitSlice(t, k, func(d []resourceapi.Device) bool {
		dev, ok := e2e.DeviceByName(d, device)
		if !ok || e2e.Attr(dev, string(apis.AttrDegraded)) != (code != "") {
			return false
		}
		want := ""
		if code != "" && e2e.TaintsOn(t) {
			want = code + ":NoSchedule"
		}
		return e2e.TaintOf(dev, apis.DegradedTaintKey(apis.Group)) == want
	}, device+" degraded ("+code+")", func() string { return e2e.AgentLogTail(t, k) })
}

// TestKubeDRAGreyHealth: on seed 002's node, with the chart's
// config.health windows shortened, while mlx5_1..4 carry heavy traffic
// without errors: mlx5_6 trains at 2X: it is tainted degraded
// (LinkDegraded); a claim tolerating the degraded taint gets it and its
// pod reads why, a plain claim stays Pending until it trains at 4X again.
// mlx5_8's link flaps three times and mlx5_7 throws a burst of symbol
// errors; both are tainted unhealthy (LinkFlapping, LinkErrors) within the
// detection window, the pod holding mlx5_8 reads the reason in its
// allocatedResourcesStatus, and mlx5_8, watched all along, clears only
// once its window and the quiet period after it are over. The busy ports
// are never tainted, although one goes down once, one has a trickle of
// receive errors, one's symbol_error is reset and one's is stuck at
// 65535.
func TestKubeDRAGreyHealth(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{
		FeatureGates: map[string]bool{"DRAExtendedResource": true},
		Images:       []string{e2e.Glibc.DockerArchive(t)},
	})
	oddButHealthyCounters(t, node)
	pod := k.InstallAgent(t, "dra", greyHealthValues())
	e2e.WaitSlice(t, k, func(s []resourceapi.Device) bool { return len(s) == 9 }, "9 devices", func() string { return k.Logs(e2e.AgentNamespace, pod, "dra") })
	busy := []string{"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"}
	busyPorts(t, node, busy...)
	resetAndTrickle(t, node)

	ns := e2e.UniqueID("dra-grey-")
	mlx56 := `device.attributes["rdma.example.com"].ibdev == "mlx5_6"`
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+e2e.HCA8Claims(ns)+"---\n"+
		e2e.ClaimTemplate(ns, "hca6", "hca", mlx56, "")+"---\n"+
		e2e.ClaimTemplate(ns, "hca6-slow-ok", "hca", mlx56, `
            tolerations:
              - key: rdma.example.com/degraded
                operator: Exists
                effect: NoSchedule`)+"---\n"+
		e2e.ClaimPod(ns, "holder", "hca8-tolerant"))
	k.WaitPod(t, ns, "holder", "Ready", 2*time.Minute)
	id := apis.Group + "/hca=mlx5_8"

	setRate(t, node, "mlx5_6", "50 Gb/sec (2X EDR)")
	waitDegraded(t, k, "mlx5-6", health.CodeLinkDegraded)
	if e2e.TaintsOn(t) {
		k.Apply(t, e2e.ClaimPod(ns, "slow-ok", "hca6-slow-ok")+"---\n"+e2e.ClaimPod(ns, "slow-plain", "hca6"))
		k.WaitPod(t, ns, "slow-ok", "Ready", 2*time.Minute)
		if e2e.PodHealthShown(t) {
			e2e.WaitResourceHealth(t, k, ns, "slow-ok", "claim:", apis.Group+"/hca=mlx5_6", "Healthy", `degraded (LinkDegraded): port 1: rate "50 Gb/sec (2X EDR)"`)
		}
		waitUnschedulable(t, k, ns, "slow-plain", "cannot allocate all claims")
		k.MustKubectl(t, "delete", "pod", "-n", ns, "slow-ok", "--wait=true")
	}

	start := time.Now()
	bumpCounter(t, node, "mlx5_7", health.CounterSymbolError, 5000)
	flap(t, node, "mlx5_8", 3)
	e2e.WaitUnhealthy(t, k, "mlx5-8", health.CodeLinkFlapping)
	e2e.WaitUnhealthy(t, k, "mlx5-7", health.CodeLinkErrors)
	if d := time.Since(start); d > greyWindow {
		t.Errorf("the flaps and the burst were tainted %v after they began, beyond the %v window", d, greyWindow)
	}
	t.Logf("mlx5-8 (3 flaps) and mlx5-7 (5000 symbol errors) tainted %v after the first", time.Since(start).Round(100*time.Millisecond))
	if e2e.PodHealthShown(t) {
		e2e.WaitResourceHealth(t, k, ns, "holder", "claim:", id, "Unhealthy", "went down 3 times in 20s (link_downed")
	}
	e2e.WaitHealthy(t, k, "mlx5-8")
	checkHeldForTheQuietPeriod(t, "mlx5-8's LinkFlapping", start, time.Now())
	e2e.WaitHealthy(t, k, "mlx5-7")
	if e2e.PodHealthShown(t) {
		e2e.WaitResourceHealth(t, k, ns, "holder", "claim:", id, "Healthy", "")
	}

	setRate(t, node, "mlx5_6", "100 Gb/sec (4X EDR)")
	waitDegraded(t, k, "mlx5-6", "")
	if e2e.TaintsOn(t) {
		k.WaitPod(t, ns, "slow-plain", "Ready", 2*time.Minute)
	}
	for _, name := range []string{"mlx5-1", "mlx5-2", "mlx5-3", "mlx5-4"} {
		if dev, ok := e2e.DeviceByName(e2e.SliceDevices(t, k), name); !ok || len(dev.Taints) > 0 {
			t.Errorf("busy healthy %s: %+v", name, dev.Taints)
		}
	}
	checkNeverRaised(t, k.Logs(e2e.AgentNamespace, pod, "dra"), busy...)
}

// TestKubeDevicePluginGreyHealth: the device plugin on seed 002's node,
// with a pod holding all eight exclusive HCAs while mlx5_1..4 carry heavy
// traffic without errors: mlx5_6 trains at 2X, which is logged as degraded
// and leaves it allocatable; mlx5_8's link flaps, which takes its unit out
// of the allocatable count (and shows Unhealthy in the pod's status)
// until, watched all along, its window and the quiet period after it are
// over. The busy ports are never raised, although one goes down once, one
// has a trickle of receive errors, one's symbol_error is reset and one's
// is stuck at 65535.
func TestKubeDevicePluginGreyHealth(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{Images: []string{e2e.Glibc.DockerArchive(t)}})
	oddButHealthyCounters(t, node)
	pod := k.InstallAgent(t, "device-plugin", greyHealthValues())
	k.WaitNodeAllocatable(t, e2e.ExclusiveResource, "8", 2*time.Minute)
	busy := []string{"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"}
	busyPorts(t, node, busy...)
	resetAndTrickle(t, node)
	ns := e2e.UniqueID("dp-grey-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+rdmaPodManifest(ns, "all", map[string]int{e2e.ExclusiveResource: 8}, false))
	k.WaitPod(t, ns, "all", "Ready", 2*time.Minute)

	setRate(t, node, "mlx5_6", "50 Gb/sec (2X EDR)")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(k.Logs(e2e.AgentNamespace, pod, "device-plugin"), "mlx5_6 is degraded") {
		if time.Now().After(deadline) {
			t.Fatalf("mlx5_6 at 2X not logged as degraded:\n%s", e2e.AgentLogTail(t, k))
		}
		time.Sleep(time.Second)
	}
	k.WaitNodeAllocatable(t, e2e.ExclusiveResource, "8", 5*time.Second) // mlx5_6 still offered

	start := time.Now()
	flap(t, node, "mlx5_8", 3)
	k.WaitNodeAllocatable(t, e2e.ExclusiveResource, "7", greyWindow)
	t.Logf("mlx5_8 out of the allocatable count %v after its first flap", time.Since(start).Round(100*time.Millisecond))
	if e2e.PodHealthShown(t) {
		e2e.WaitResourceHealth(t, k, ns, "all", e2e.ExclusiveResource, "mlx5_8", "Unhealthy", "")
	}
	k.WaitNodeAllocatable(t, e2e.ExclusiveResource, "8", 90*time.Second)
	checkHeldForTheQuietPeriod(t, "mlx5_8's LinkFlapping", start, time.Now())
	if e2e.PodHealthShown(t) {
		e2e.WaitResourceHealth(t, k, ns, "all", e2e.ExclusiveResource, "mlx5_8", "Healthy", "")
	}
	checkNeverRaised(t, k.Logs(e2e.AgentNamespace, pod, "device-plugin"), busy...)
}
