package resilience

// The DRA driver under faults on the real kubelet: killed (SIGKILL) at each
// point of prepare and unprepare, and replaced while pods hold claims. What
// it must remember across a new process is its checkpoint
// (pkg/dradriver/checkpoint.go), in /var/lib/kubelet/plugins/<driver>/.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/dradriver"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// claimOfPod is the name of the ResourceClaim the pod's claim "rdma" got.
func claimOfPod(t *testing.T, k *e2e.KubeEnv, ns, pod string) string {
	t.Helper()
	name := strings.TrimSpace(k.MustKubectl(t, "get", "pod", "-n", ns, pod, "-o",
		`jsonpath={.status.resourceClaimStatuses[?(@.name=="rdma")].resourceClaimName}`))
	if name == "" {
		t.Fatalf("pod %s/%s has no claim rdma", ns, pod)
	}
	return name
}

// TestKubeDRADriverKilled: the driver is killed (SIGKILL, once, through
// dradriver.CrashEnv) before and after writing its checkpoint, in prepare
// and in unprepare. Each time the kubelet's retry, answered by the
// restarted process, completes the operation: the pod starts with exactly
// its HCA (mlx5_8), the checkpoint holds its claim; after the pod goes the
// checkpoint holds nothing and the HCA goes to the next pod. That the
// driver did die there is checked, not assumed: its restart count.
func TestKubeDRADriverKilled(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.DRANode(t, node, 9)
	ns := e2e.UniqueID("dra-kill-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+e2e.HCA8Claims(ns))
	t.Cleanup(func() { e2e.SetAgentEnv(t, k, dradriver.CrashEnv, "") })
	for _, point := range []string{"prepare-before-checkpoint", "prepare-after-checkpoint", "unprepare-before-checkpoint", "unprepare-after-checkpoint"} {
		t.Run(point, func(t *testing.T) {
			marker := k.NodePath("/var/lib/kubelet/plugins/" + apis.Group + "/.crashed-" + point)
			t.Cleanup(func() { os.Remove(marker) })
			e2e.SetAgentEnv(t, k, dradriver.CrashEnv, point)
			_, before := e2e.AgentRestarts(t, k)

			k.Apply(t, e2e.ClaimPod(ns, "holder", "hca8"))
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("events of holder:\n%s\nkubelet:\n%s\n%s", k.PodEvents(ns, "holder"), lastLines(e2e.GrepLines(k.KubeletLog(), apis.Group), 40), e2e.AgentLogTail(t, k))
				}
			})
			k.WaitPod(t, ns, "holder", "Ready", 3*time.Minute)
			e2e.CheckRDMAPod(t, node, e2e.ProbePod(t, k, ns, "holder"), []string{"mlx5_8"}, "3")
			e2e.WaitCheckpoint(t, k, ns+"/"+claimOfPod(t, k, ns, "holder"))
			k.MustKubectl(t, "delete", "pod", "-n", ns, "holder", "--wait=true", "--timeout=3m")
			e2e.WaitCheckpoint(t, k)

			if _, err := os.Stat(marker); err != nil {
				t.Fatalf("the driver never reached %s: %v", point, err)
			}
			if _, after := e2e.AgentRestarts(t, k); after != before+1 {
				t.Fatalf("the agent restarted %d times at %s, want once", after-before, point)
			}
			// Not held by a forgotten claim: the next pod gets it.
			k.Apply(t, e2e.ClaimPod(ns, "next", "hca8"))
			k.WaitPod(t, ns, "next", "Ready", 2*time.Minute)
			k.MustKubectl(t, "delete", "pod", "-n", ns, "next", "--wait=true", "--timeout=3m")
			e2e.WaitCheckpoint(t, k)
		})
	}
}

// podWithClaim is seed 002's node in mode dra, with a new namespace
// (prefix) holding the claim "hca" (one RoCE HCA) and the Ready pod "user"
// using it.
func podWithClaim(t *testing.T, prefix string) (*e2e.FixtureNode, *e2e.KubeEnv, string) {
	t.Helper()
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.DRANode(t, node, 9)
	ns := e2e.UniqueID(prefix)
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+e2e.StandaloneClaimPod(ns, "hca", "roce.rdma.example.com", "user"))
	k.WaitPod(t, ns, "user", "Ready", 2*time.Minute)
	return node, k, ns
}

// TestKubeDRADriverReplacedWhileHeld: the agent's pod is deleted (the
// DaemonSet starts a new one) while a pod holds a claim: the new process
// takes the claim over from the checkpoint (checkTakenOver).
func TestKubeDRADriverReplacedWhileHeld(t *testing.T) {
	_, k, ns := podWithClaim(t, "dra-replaced-")
	e2e.WaitCheckpoint(t, k, ns+"/hca")
	uid := types.UID(strings.TrimSpace(k.MustKubectl(t, "get", "resourceclaim", "-n", ns, "hca", "-o", "jsonpath={.metadata.uid}")))

	old, _ := e2e.AgentRestarts(t, k)
	k.MustKubectl(t, "delete", "pod", "-n", e2e.AgentNamespace, old, "--wait=true")
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		if pods := k.PodNames(t, e2e.AgentNamespace, e2e.AgentSelector); len(pods) == 1 && pods[0] != old {
			k.WaitPod(t, e2e.AgentNamespace, pods[0], "Ready", 2*time.Minute)
			if log := k.Logs(e2e.AgentNamespace, pods[0], "dra"); !strings.Contains(log, "took over 1 prepared claims") {
				t.Errorf("the new driver did not say it took over the claim %s:\n%s", uid, log)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new agent pod")
		}
	}
	e2e.CheckTakenOver(t, k, ns, "hca", "user", "10.199.1.7/24")
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// countLines counts the lines of s containing sub.
func countLines(s, sub string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// TestKubeDRAAPIServerOutage: the API server is stopped for 60 s while a
// pod holds a claim, another HCA's port goes down (mlx5_8's, or mlx5_7's when
// the claim holds mlx5_8) and an address is added to the
// held HCA's netdev. The driver keeps running (no restart), its retries are
// bounded (the claim status writer's pause doubles from 1 s to 16 s, the
// slice controller has its own backoff; counted in its log and in
// rdma_cdi_claim_status_writes_total), and within 60 s of the API server's
// return the slice shows that HCA unhealthy and the claim's status has the
// address.
func TestKubeDRAAPIServerOutage(t *testing.T) {
	node, k, ns := podWithClaim(t, "dra-outage-")
	d := e2e.WaitDeviceStatus(t, k, ns, "hca", "an entry with networkData", func(d *resourceapi.AllocatedDeviceStatus) bool {
		return d != nil && d.NetworkData != nil
	})
	// The port taken down is another HCA's than the claim's.
	downDev, downIB, downNet := "mlx5-8", "mlx5_8", "eth8"
	if d.Device == downDev {
		downDev, downIB, downNet = "mlx5-7", "mlx5_7", "eth7"
	}
	agent, _ := e2e.AgentRestarts(t, k)
	agentKept := e2e.AgentKeeper(t, k)
	logBefore := k.Logs(e2e.AgentNamespace, agent, "dra")
	failedWritesBefore := failedClaimStatusWrites(t, k)

	apiserver := k.Proc("kube-apiserver")
	apiserver.Stop(10 * time.Second)
	stopped := time.Now()
	t.Cleanup(func() {
		if !apiserver.Running() {
			_ = apiserver.Start()
		}
	})
	e2e.SetFixturePort(t, k, node, downIB, downNet, false)
	t.Cleanup(func() { e2e.SetFixturePort(t, k, node, downIB, downNet, true) })
	address := "10.199.3.7/24"
	if _, se, err := e2e.Run(k.InNode("ip", "addr", "add", address, "dev", d.NetworkData.InterfaceName)); err != nil {
		t.Fatalf("ip addr add: %v\n%s", err, se)
	}
	t.Cleanup(func() { _, _, _ = e2e.Run(k.InNode("ip", "addr", "del", address, "dev", d.NetworkData.InterfaceName)) })
	time.Sleep(60*time.Second - time.Since(stopped))
	if err := apiserver.Start(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	if err := e2e.WaitFor(t.Context(), 90*time.Second, func() error { _, err := k.GetJSON("/readyz"); return err }); err != nil {
		t.Fatalf("the API server did not come back: %v", err)
	}
	t.Logf("API server down %v, ready again %v after its start", back.Sub(stopped).Round(time.Second), time.Since(back).Round(100*time.Millisecond))

	e2e.WaitUnhealthy(t, k, downDev, "NoActivePort")
	sliceAfter := time.Since(back)
	e2e.WaitDeviceStatus(t, k, ns, "hca", "the address added during the outage", func(d *resourceapi.AllocatedDeviceStatus) bool {
		return d != nil && d.NetworkData != nil && slices.Contains(d.NetworkData.IPs, address)
	})
	statusAfter := time.Since(back)
	t.Logf("after the API server's start: the slice shows %s unhealthy in %v, the claim's status the address in %v",
		downDev, sliceAfter.Round(100*time.Millisecond), statusAfter.Round(100*time.Millisecond))
	if sliceAfter > time.Minute || statusAfter > time.Minute {
		t.Errorf("converged in %v (slice) and %v (status), want within 1 minute", sliceAfter, statusAfter)
	}
	if !agentKept("during the outage") {
		t.FailNow()
	}
	outage := strings.TrimPrefix(k.Logs(e2e.AgentNamespace, agent, "dra"), logBefore)
	statusRetries := countLines(outage, "status of claim "+ns+"/hca")
	sliceErrors := countLines(outage, "processing ResourceSlice objects")
	failedWrites := failedClaimStatusWrites(t, k) - failedWritesBefore
	t.Logf("during the outage: %d claim status retries (%v failed writes counted), %d slice sync errors", statusRetries, failedWrites, sliceErrors)
	// The status writer's pauses, 1+2+4+8 s and then 16 s each, and the
	// slice controller's exponential backoff: no busy loop. A fixed 5 s
	// pause would exceed the limit.
	window := time.Since(stopped)
	if limit := 5 + int(window/(16*time.Second)) + 2; statusRetries > limit || sliceErrors > 30 {
		t.Errorf("retries not bounded: %d claim status retries (at most %d), %d slice sync errors in %v\n%s",
			statusRetries, limit, sliceErrors, window.Round(time.Second), lastLines(outage, 40))
	}
	// The address changed while the API server was down: the writer tried,
	// failed and counted it (0 = 0 would prove nothing).
	if statusRetries < 1 || failedWrites < 1 {
		t.Errorf("no failed claim status write during the outage (%d logged, %v counted): the test did not reach the writer's retry path\n%s",
			statusRetries, failedWrites, lastLines(outage, 40))
	}
	if logged := countLines(outage, "status of claim "); failedWrites != float64(logged) {
		t.Errorf("rdma_cdi_claim_status_writes_total{result=\"error\"} rose by %v, the log has %d failed writes", failedWrites, logged)
	}
	// A minute without the API server leaves the kubelet's and the
	// controller manager's watches in client-go's backoff: the kubelet saw
	// the cleanup's pod deletion 53 s after it was made. Restarted, both
	// list at once, and the cleanup waits on no backoff.
	k.Restart(t, "kubelet", nil)
	k.Restart(t, "kube-controller-manager", nil)
}

// failedClaimStatusWrites is the agent's count of failed claim status writes.
func failedClaimStatusWrites(t *testing.T, k *e2e.KubeEnv) float64 {
	t.Helper()
	var n float64
	for _, s := range metrics.Find(e2e.AgentScrape(t, k), "rdma_cdi_claim_status_writes_total", map[string]string{"result": "error"}) {
		n += s.Value
	}
	return n
}

// TestKubeDRAHCAGoneWhileHeld: the PCI function of the HCA a pod holds
// vanishes (hot unplug, a driver unbound): its class entries, its device
// directory and its uverbs node leave the node's sysfs and /dev. The slice
// keeps the device tainted DeviceGone (1.36 on; 1.35 drops taints, so
// there it leaves the slice), the claim's status says Healthy False
// DeviceGone and the pod's status (1.36 on) Unhealthy with the reason; the
// agent keeps serving the other HCAs, without a restart. When the function
// returns, the device is healthy again in all three places. Gone once more,
// and free, it is not given even to a claim that tolerates its taint.
func TestKubeDRAHCAGoneWhileHeld(t *testing.T) {
	node, k, ns := podWithClaim(t, "dra-gone-")
	held := e2e.WaitDeviceStatus(t, k, ns, "hca", "an entry with networkData", func(d *resourceapi.AllocatedDeviceStatus) bool {
		return d != nil && d.NetworkData != nil
	})
	dev, _ := e2e.DeviceByName(e2e.SliceDevices(t, k), held.Device)
	ibdev, _ := e2e.Attr(dev, "ibdev").(string)
	cdiID := apis.Group + "/hca=" + ibdev
	agentKept := e2e.AgentKeeper(t, k)

	replug := unplugHCA(t, k, node, ibdev)
	start := time.Now()
	e2e.WaitUnhealthy(t, k, held.Device, health.CodeGone)
	e2e.WaitDeviceStatus(t, k, ns, "hca", "Healthy False DeviceGone", func(d *resourceapi.AllocatedDeviceStatus) bool {
		return d != nil && hasCondition(d, "Healthy", "False", health.CodeGone) && d.NetworkData == nil
	})
	if e2e.PodHealthShown(t) {
		e2e.WaitResourceHealth(t, k, ns, "user", "claim:", cdiID, "Unhealthy", health.Gone.Reason)
	}
	t.Logf("%s gone: the slice, the claim's status and the pod's health say so within %v", ibdev, time.Since(start).Round(100*time.Millisecond))

	k.Apply(t, e2e.StandaloneClaimPod(ns, "other", "roce.rdma.example.com", "other"))
	k.WaitPod(t, ns, "other", "Ready", 2*time.Minute)
	if other := e2e.WaitDeviceStatus(t, k, ns, "other", "an entry", func(d *resourceapi.AllocatedDeviceStatus) bool { return d != nil }); other.Device == held.Device {
		t.Errorf("a new claim got %s, which is gone", other.Device)
	}

	replug()
	e2e.WaitHealthy(t, k, held.Device)
	e2e.WaitDeviceStatus(t, k, ns, "hca", "Healthy True with networkData again", func(d *resourceapi.AllocatedDeviceStatus) bool {
		return d != nil && hasCondition(d, "Healthy", "True", "Healthy") && d.NetworkData != nil
	})
	if e2e.PodHealthShown(t) {
		e2e.WaitResourceHealth(t, k, ns, "user", "claim:", cdiID, "Healthy", "")
	}
	agentKept("while its HCA was gone")

	// Gone again, and free this time (its pod and claim deleted): a claim
	// that asks for exactly it and tolerates its taint is still never
	// started with it. Where the slice keeps the tainted device (1.36 on)
	// the scheduler may allocate it; the driver's prepare refuses a device
	// that is not on the node now, and the kubelet says so in the pod's
	// events. On 1.35 the device leaves the slice: nothing to allocate.
	k.MustKubectl(t, "delete", "pod", "-n", ns, "user", "--wait=true", "--timeout=2m")
	k.MustKubectl(t, "delete", "resourceclaim", "-n", ns, "hca", "--wait=true", "--timeout=2m")
	replug = unplugHCA(t, k, node, ibdev)
	defer replug()
	e2e.WaitUnhealthy(t, k, held.Device, health.CodeGone)
	tolerating := strings.Replace(e2e.StandaloneClaimPod(ns, "tolerating", "roce.rdma.example.com", "tolerating"),
		"          deviceClassName: roce.rdma.example.com\n",
		"          deviceClassName: roce.rdma.example.com\n"+
			"          selectors: [{cel: {expression: 'device.attributes[\""+apis.Group+"\"].ibdev == \""+ibdev+"\"'}}]\n"+
			"          tolerations: [{key: "+apis.UnhealthyTaintKey(apis.Group)+", operator: Exists, effect: NoSchedule}]\n", 1)
	k.Apply(t, tolerating)
	want := "FailedScheduling"
	if e2e.PodHealthShown(t) {
		want = "is not on this node now"
	}
	e2e.WaitPodEvent(t, k, ns, "tolerating", want)
	if phase := k.MustKubectl(t, "get", "pod", "-n", ns, "tolerating", "-o", "jsonpath={.status.phase}/{.status.containerStatuses[0].ready}"); strings.HasPrefix(phase, "Running/true") {
		t.Errorf("the tolerating pod runs with %s, which is gone", ibdev)
	}
}

// hasCondition tells whether d has a condition of type typ with status and
// reason.
func hasCondition(d *resourceapi.AllocatedDeviceStatus, typ, status, reason string) bool {
	return slices.ContainsFunc(d.Conditions, func(c metav1.Condition) bool {
		return c.Type == typ && string(c.Status) == status && c.Reason == reason
	})
}

// unplugHCA takes ibdev's PCI function out of the fixture node's sysfs and
// /dev, as a hot unplug does: the function's directory under devices/, its
// class/infiniband and class/infiniband_verbs entries and its uverbs node
// move to a stash beside them, and the node hears the uevents the kernel
// sends then (the uverbs device's remove, then the HCA's), as the agent
// would on real hardware. The returned func (also a cleanup) puts them
// back, with the add uevents.
func unplugHCA(t *testing.T, k *e2e.KubeEnv, node *e2e.FixtureNode, ibdev string) (replug func()) {
	t.Helper()
	class := filepath.Join(node.Sys, "class/infiniband", ibdev)
	target, err := filepath.EvalSymlinks(class)
	if err != nil {
		t.Fatalf("%s: %v", class, err)
	}
	function := filepath.Dir(filepath.Dir(target)) // .../0000:3b:00.0/infiniband/<ibdev>
	moves := [][2]string{{function, ""}, {class, ""}}
	// The uevents' devices, as the kernel removes them: uverbs first.
	type device struct{ subsystem, name, devpath string }
	devices := []device{{"infiniband", ibdev, strings.TrimPrefix(target, node.Sys)}}
	verbs, _ := filepath.Glob(filepath.Join(node.Sys, "class/infiniband_verbs/uverbs*"))
	for _, v := range verbs {
		if b, err := os.ReadFile(filepath.Join(v, "ibdev")); err == nil && strings.TrimSpace(string(b)) == ibdev {
			moves = append(moves, [2]string{v, ""}, [2]string{filepath.Join(node.Dev, "infiniband", filepath.Base(v)), ""})
			vt, err := filepath.EvalSymlinks(v)
			if err != nil {
				t.Fatalf("%s: %v", v, err)
			}
			devices = slices.Insert(devices, 0, device{"infiniband_verbs", filepath.Base(v), strings.TrimPrefix(vt, node.Sys)})
		}
	}
	announce := func(action string, devs []device) error {
		for _, d := range devs {
			if err := k.SendUevent(action, d.devpath, d.subsystem, d.name); err != nil {
				return err
			}
		}
		return nil
	}
	if len(moves) != 4 {
		t.Fatalf("%s: no uverbs entry in %s", ibdev, node.Sys)
	}
	stash := filepath.Join(node.Dir, "unplugged-"+ibdev)
	if err := os.MkdirAll(stash, 0o755); err != nil {
		t.Fatal(err)
	}
	// The function's directory goes last: the others are found through it.
	slices.Reverse(moves)
	for i := range moves {
		moves[i][1] = filepath.Join(stash, fmt.Sprint(i))
		if err := os.Rename(moves[i][0], moves[i][1]); err != nil {
			t.Fatalf("unplugging %s: %v", ibdev, err)
		}
	}
	if err := announce("remove", devices); err != nil {
		t.Fatalf("unplugging %s: %v", ibdev, err)
	}
	var once sync.Once
	replug = func() {
		once.Do(func() {
			for i := len(moves) - 1; i >= 0; i-- {
				if err := os.Rename(moves[i][1], moves[i][0]); err != nil {
					t.Errorf("replugging %s: %v", ibdev, err)
				}
			}
			added := slices.Clone(devices) // the HCA first
			slices.Reverse(added)
			if err := announce("add", added); err != nil {
				t.Errorf("replugging %s: %v", ibdev, err)
			}
		})
	}
	t.Cleanup(replug)
	return replug
}

// TestKubeDRAKubeletAndContainerdRestart: while a pod holds a claim, the
// kubelet and then containerd are restarted, and a pod with a claim is
// created while each is down and another after. The running pod keeps its
// container, its claim's status entry and its place in the checkpoint;
// each new pod starts with exactly its claim's HCA; the slice lists the
// same devices (the kubelet deletes the node's slices when it starts, and
// the driver publishes its own again); the agent does not restart.
func TestKubeDRAKubeletAndContainerdRestart(t *testing.T) {
	node, k, ns := podWithClaim(t, "dra-restarts-")
	const class = "roce.rdma.example.com"
	running := e2e.ContainerOf(t, k, ns, "user")
	slice := ourSlices(t, k)
	agentKept := e2e.AgentKeeper(t, k)
	for _, daemon := range []string{"kubelet", "containerd"} {
		during, after := "during-"+daemon, "after-"+daemon
		k.Restart(t, daemon, func() {
			k.Apply(t, e2e.StandaloneClaimPod(ns, during, class, during))
			time.Sleep(5 * time.Second) // scheduled and allocated meanwhile
		})
		k.Apply(t, e2e.StandaloneClaimPod(ns, after, class, after))
		for _, pod := range []string{during, after} {
			k.WaitPod(t, ns, pod, "Ready", 3*time.Minute)
			e2e.CheckRDMAPod(t, node, e2e.ProbePod(t, k, ns, pod), []string{claimHCA(t, k, ns, pod)}, "3")
		}
		if now := ourSlices(t, k); sliceDeviceLists(now) != sliceDeviceLists(slice) {
			t.Errorf("after the %s restart the slices are\n%s\nwere\n%s", daemon, now, slice)
		} else if now != slice {
			var said []string
			for _, line := range strings.Split(k.KubeletLog(), "\n") {
				if strings.Contains(line, "ResourceSlice") {
					said = append(said, line)
				}
			}
			t.Logf("the %s restart replaced the slice (same devices): %s, was %s; the kubelet's log:\n%s",
				daemon, now, slice, strings.Join(said[max(0, len(said)-5):], "\n"))
		}
		slice = ourSlices(t, k)
	}
	e2e.CheckSameContainer(t, k, ns, "user", running)
	e2e.CheckRDMAPod(t, node, e2e.ProbePod(t, k, ns, "user"), []string{claimHCA(t, k, ns, "hca")}, "3")
	if held := e2e.CheckpointClaims(t, k); !slices.Contains(held, ns+"/hca") {
		t.Errorf("the checkpoint lost the running pod's claim: %v", held)
	}
	agentKept("during the kubelet and containerd restarts")
}

// claimHCA is the HCA (ibdev) of the driver's status entry of claim ns/name.
func claimHCA(t *testing.T, k *e2e.KubeEnv, ns, name string) string {
	t.Helper()
	d := e2e.WaitDeviceStatus(t, k, ns, name, "an entry", func(d *resourceapi.AllocatedDeviceStatus) bool { return d != nil })
	var dev resourceapi.Device
	e2e.WaitSlice(t, k, func(devs []resourceapi.Device) bool {
		var ok bool
		dev, ok = e2e.DeviceByName(devs, d.Device)
		return ok
	}, "the device "+d.Device+" of claim "+ns+"/"+name, func() string { return e2e.AgentLogTail(t, k) })
	return e2e.Attr(dev, "ibdev").(string)
}

// ourSlices identifies the driver's ResourceSlices: each one's UID and
// device names. A slice withdrawn and published again has a new UID.
func ourSlices(t *testing.T, k *e2e.KubeEnv) string {
	t.Helper()
	return strings.TrimSpace(k.MustKubectl(t, "get", "resourceslices", "--field-selector", "spec.driver="+apis.Group,
		"-o", `jsonpath={range .items[*]}{.metadata.uid}:{.spec.devices[*].name}{"\n"}{end}`))
}

// TestKubeDRANodeReboot: the node "reboots" while a pod holds a claim
// (RebootNode: every node process killed, /run emptied, the control plane
// kept) with a stale spec in the spec dir, another node's (the ib-sriov
// fixture's). Everything comes back by itself: the agent replaces the
// spec with this node's, the slice lists this node's HCAs, the pod that
// held a claim runs again with its HCA, and a pod created afterwards gets
// one too.
func TestKubeDRANodeReboot(t *testing.T) {
	node, k, ns := podWithClaim(t, "dra-reboot-")
	held := claimHCA(t, k, ns, "hca")
	devicesBefore := ourSliceDevices(t, k)
	other := e2e.SharedFixtureNode(t, "ib-sriov")
	stale, se, err := e2e.RDMACDI(t, append(other.Roots(), "generate", "--output", "-")...)
	if err != nil {
		t.Fatalf("the stale spec: %v\n%s", err, se)
	}
	staleNames := specDeviceNames(t, []byte(stale))
	const specPath = "/var/run/cdi/rdma.example.com-hca.yaml"
	old := e2e.ContainerOf(t, k, ns, "user").ContainerID

	start := time.Now()
	k.RebootNode(t, func() {
		if err := os.MkdirAll(k.NodePath("/var/run/cdi"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(k.NodePath(specPath), []byte(stale), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	booted := time.Now()
	// The API shows the old container Ready until the kubelet has looked:
	// wait for a new one.
	if err := e2e.WaitContainerReplaced(t, k, ns, "user", old, 4*time.Minute); err != nil {
		t.Fatalf("the claim's pod did not run again after the reboot: %v\n%s", err, e2e.AgentLogTail(t, k))
	}
	t.Logf("node back (containerd and the kubelet serving) %v after the power cut; the agent's container started %v and the claim's pod Ready %v after that; the pod's events:\n%s",
		booted.Sub(start).Round(100*time.Millisecond), agentStarted(t, k).Sub(booted).Round(100*time.Millisecond),
		time.Since(booted).Round(100*time.Millisecond), k.PodEvents(ns, "user"))

	want := []string{"all"}
	for _, d := range node.Topo.Devices {
		want = append(want, d.Name)
	}
	slices.Sort(want)
	var got []string
	if e2e.WaitFor(t.Context(), time.Minute, func() error {
		data, err := os.ReadFile(k.NodePath(specPath))
		if err != nil {
			return err
		}
		if got = specDeviceNames(t, data); !slices.Equal(got, want) {
			return errors.New("not this node's spec yet")
		}
		return nil
	}) != nil {
		t.Errorf("the spec after the reboot names %v, want this node's %v (the stale one named %v)", got, want, staleNames)
	}
	if now := ourSliceDevices(t, k); !slices.Equal(now, devicesBefore) {
		t.Errorf("the slice lists %v after the reboot, %v before", now, devicesBefore)
	}
	e2e.CheckRDMAPod(t, node, e2e.ProbePod(t, k, ns, "user"), []string{held}, "3")
	k.Apply(t, e2e.StandaloneClaimPod(ns, "after", "roce.rdma.example.com", "after"))
	k.WaitPod(t, ns, "after", "Ready", 2*time.Minute)
	e2e.CheckRDMAPod(t, node, e2e.ProbePod(t, k, ns, "after"), []string{claimHCA(t, k, ns, "after")}, "3")
}

// agentStarted is when the agent's running container started.
func agentStarted(t *testing.T, k *e2e.KubeEnv) time.Time {
	t.Helper()
	pod, _ := e2e.AgentRestarts(t, k)
	if c := e2e.ContainerOf(t, k, e2e.AgentNamespace, pod); c.State.Running != nil {
		return c.State.Running.StartedAt.Time
	}
	return time.Time{}
}

// specDeviceNames are the sorted device names of a CDI spec.
func specDeviceNames(t *testing.T, data []byte) []string {
	t.Helper()
	var spec cdispecs.Spec
	if err := yaml.Unmarshal(data, &spec); err != nil {
		t.Fatalf("a CDI spec: %v\n%s", err, data)
	}
	var names []string
	for _, d := range spec.Devices {
		names = append(names, d.Name)
	}
	slices.Sort(names)
	return names
}

// sliceDeviceLists drops the UIDs of ourSlices' lines.
func sliceDeviceLists(listed string) string {
	var out []string
	for _, line := range strings.Split(listed, "\n") {
		_, devices, _ := strings.Cut(line, ":")
		out = append(out, devices)
	}
	return strings.Join(out, "\n")
}

// ourSliceDevices are the sorted device names of the driver's slices.
func ourSliceDevices(t *testing.T, k *e2e.KubeEnv) []string {
	t.Helper()
	var names []string
	for _, d := range e2e.SliceDevices(t, k) {
		names = append(names, d.Name)
	}
	slices.Sort(names)
	return names
}
