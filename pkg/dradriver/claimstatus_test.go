package dradriver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/attach"
)

func statusNode() model.Node {
	node := testNode()
	for i := range node.Devices { // healthy: each has its uverbs node
		node.Devices[i].Verbs = &model.CharDevice{Path: fmt.Sprintf("/dev/infiniband/uverbs%d", i), Major: 231, Minor: uint32(192 + i)}
	}
	node.NetDevs = []model.NetDev{{Name: "eth1", HWAddr: "b8:ce:f6:00:00:01", Addrs: []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24")}}}
	return node
}

func TestDeviceStatuses(t *testing.T) {
	node := statusNode()
	inv := BuildInventory(node, config.Default().NCCL, nil)
	since := metav1.NewTime(time.Unix(1795587663, 0))
	tracked := TrackHealth(nil, inv, metav1.NewTime(since.Add(-time.Hour)))
	c := claim("u1", result("hca", testDriver, "mlx5-1"), result("gpu", "gpu.example.com", "gpu-0"), result("hca", testDriver, "mlx5-ib0"))
	got := DeviceStatuses(c, testDriver, inv, tracked, node, config.Default().NCCL, since, nil)
	if len(got) != 2 {
		t.Fatalf("statuses %+v: want our two devices", got)
	}
	roce := got[0]
	if roce.Driver != testDriver || roce.Pool != "node-a" || roce.Device != "mlx5-1" {
		t.Errorf("entry %s/%s/%s", roce.Driver, roce.Pool, roce.Device)
	}
	// Healthy since before the prepare: both conditions date from it.
	if want := []string{"Ready True Prepared", "Healthy True Healthy"}; !slices.Equal(conditions(roce, since), want) {
		t.Errorf("conditions %+v, want %q at %v", roce.Conditions, want, since)
	}
	nd := roce.NetworkData
	if nd == nil || nd.InterfaceName != "eth1" || len(nd.IPs) != 1 || nd.IPs[0] != "10.1.0.5/24" || nd.HardwareAddress != "b8:ce:f6:00:00:01" {
		t.Errorf("networkData %+v", nd)
	}
	var data map[string]string
	if roce.Data == nil || json.Unmarshal(roce.Data.Raw, &data) != nil || data["NCCL_IB_HCA"] != "mlx5_1:1" || data["NCCL_IB_GID_INDEX"] != "5" {
		t.Errorf("data %s", roce.Data.Raw)
	}
	// InfiniBand: no netdev, no RoCE GID index.
	if ib := got[1]; ib.NetworkData != nil || ib.Device != "mlx5-ib0" {
		t.Errorf("IB entry %+v", ib)
	}
	// A device gone from the node keeps its entry, unhealthy since it went,
	// with neither netdev nor NCCL settings.
	node.Devices = node.Devices[:2]
	inv = BuildInventory(node, config.Default().NCCL, nil)
	wentAt := metav1.NewTime(since.Add(time.Minute))
	tracked = TrackHealth(tracked, inv, wentAt)
	got = DeviceStatuses(c, testDriver, inv, tracked, node, config.Default().NCCL, since, nil)
	if len(got) != 2 || got[1].Device != "mlx5-ib0" || got[1].NetworkData != nil || got[1].Data != nil {
		t.Fatalf("statuses with mlx5-ib0 gone %+v", got)
	}
	if want := []string{"Ready True Prepared", "Healthy False DeviceGone"}; !slices.Equal(conditions(got[1], wentAt), want) {
		t.Errorf("conditions of the gone device %+v, want %q", got[1].Conditions, want)
	}
	// One the driver never saw (gone before a restart): gone since the prepare.
	got = DeviceStatuses(c, testDriver, inv, nil, node, config.Default().NCCL, since, nil)
	if want := []string{"Ready True Prepared", "Healthy False DeviceGone"}; !slices.Equal(conditions(got[1], since), want) {
		t.Errorf("conditions of a device never seen %+v, want %q", got[1].Conditions, want)
	}
}

// conditions is "Type Status Reason" of each of s's conditions; one whose
// Healthy transition is not at is marked.
func conditions(s resourceapi.AllocatedDeviceStatus, at metav1.Time) []string {
	var out []string
	for _, c := range s.Conditions {
		line := fmt.Sprintf("%s %s %s", c.Type, c.Status, c.Reason)
		if c.Type == "Healthy" && !c.LastTransitionTime.Equal(&at) {
			line += " since " + c.LastTransitionTime.String()
		}
		out = append(out, line)
	}
	return out
}

// TrackHealth keeps an unchanged device's start and dates a change.
func TestTrackHealth(t *testing.T) {
	node := statusNode()
	t0, t1, t2 := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0)), metav1.NewTime(time.Unix(300, 0))
	h := TrackHealth(nil, BuildInventory(node, config.Default().NCCL, nil), t0)
	node.Devices[1].Ports[0].State = "DOWN"
	h = TrackHealth(h, BuildInventory(node, config.Default().NCCL, nil), t1)
	if got := h["mlx5-1"]; got.Problem.Code != "NoActivePort" || !got.Since.Equal(&t1) {
		t.Errorf("mlx5-1 after its port went down: %+v", got)
	}
	if got := h["mlx5-ib0"]; !got.Problem.Healthy() || !got.Since.Equal(&t0) {
		t.Errorf("mlx5-ib0, unchanged: %+v", got)
	}
	node.Devices = node.Devices[:2]
	h = TrackHealth(h, BuildInventory(node, config.Default().NCCL, nil), t2)
	if got := h["mlx5-ib0"]; got.Problem.Code != "DeviceGone" || !got.Since.Equal(&t2) {
		t.Errorf("mlx5-ib0 gone: %+v", got)
	}
	if got := h["mlx5-1"]; !got.Since.Equal(&t1) {
		t.Errorf("mlx5-1, unchanged since t1: %+v", got)
	}
}

// A grey condition reaches the Healthy condition: an Unhealthy one as
// False with its code, a Degraded one as True with its code and message,
// each dated from when it was raised.
func TestHealthyConditionGrey(t *testing.T) {
	node := statusNode()
	t0, t1 := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0))
	inv := BuildInventory(node, config.Default().NCCL, nil)
	h := TrackHealth(nil, inv, t0)
	grey := map[string][]health.Condition{
		"mlx5_1":   {{Device: "mlx5_1", Port: 1, Level: health.LevelUnhealthy, Code: health.CodeLinkErrors, Reason: "port 1: symbol_error rose by 4000 in 5m0s (now 4000; threshold 3000)"}},
		"mlx5_ib0": {{Device: "mlx5_ib0", Level: health.LevelDegraded, Code: health.CodePCIeDegraded, Reason: "PCIe link at 16 GT/s x8"}},
	}
	h = TrackHealth(h, inv.WithGrey(grey), t1)
	c := healthyCondition(h["mlx5-1"], t0)
	if c.Status != metav1.ConditionFalse || c.Reason != health.CodeLinkErrors || !strings.Contains(c.Message, "symbol_error rose by 4000") || !c.LastTransitionTime.Equal(&t1) {
		t.Errorf("unhealthy: %+v", c)
	}
	c = healthyCondition(h["mlx5-ib0"], t0)
	if c.Status != metav1.ConditionTrue || c.Reason != health.CodePCIeDegraded || c.Message != "degraded (PCIeDegraded): PCIe link at 16 GT/s x8" || !c.LastTransitionTime.Equal(&t1) {
		t.Errorf("degraded: %+v", c)
	}
}

// fakeWriter records the statuses written per claim.
type fakeWriter struct {
	mu     sync.Mutex
	writes []string
	fail   int
}

func (f *fakeWriter) write(_ context.Context, c *resourceapi.ResourceClaim, s []resourceapi.AllocatedDeviceStatus) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail > 0 {
		f.fail--
		return io.ErrUnexpectedEOF
	}
	entry := c.Namespace + "/" + c.Name + ":"
	for _, d := range s {
		entry += " " + d.Device
		if d.NetworkData != nil {
			entry += "@" + d.NetworkData.IPs[0]
		}
	}
	f.writes = append(f.writes, entry)
	return nil
}

func (f *fakeWriter) waitFor(t *testing.T, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		f.mu.Lock()
		w := append([]string(nil), f.writes...)
		f.mu.Unlock()
		if len(w) >= n {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes %q, want %d", w, n)
		}
	}
}

// The Driver reports a prepared claim's status, writes again only when the
// node's view changes it, and clears it on unprepare.
func TestDriverClaimStatus(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	d := newDriver(t, Options{Name: testDriver, NodeName: "node-a", Log: log})
	d.Update(statusNode(), config.Default())
	w := &fakeWriter{fail: 1}
	defer func(base time.Duration) { retryAfter = base }(retryAfter)
	retryAfter = 10 * time.Millisecond
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go d.statuses.run(ctx, d.deviceStatuses, w.write, log)

	c := claim("a", result("r", testDriver, "mlx5-1"))
	if _, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c}); err != nil {
		t.Fatal(err)
	}
	// The first write fails and is retried.
	if got := w.waitFor(t, 1); got[0] != "ns/c-a: mlx5-1@10.1.0.5/24" {
		t.Fatalf("first write %q", got)
	}
	d.Update(statusNode(), config.Default()) // nothing changed: no write
	node := statusNode()
	node.NetDevs[0].Addrs = []netip.Prefix{netip.MustParsePrefix("10.1.0.9/24")}
	d.Update(node, config.Default())
	if got := w.waitFor(t, 2); len(got) != 2 || got[1] != "ns/c-a: mlx5-1@10.1.0.9/24" {
		t.Fatalf("after an address change %q", got)
	}
	if _, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: "a"}}); err != nil {
		t.Fatal(err)
	}
	if got := w.waitFor(t, 3); len(got) != 3 || got[2] != "ns/c-a:" {
		t.Fatalf("after unprepare %q", got)
	}
}

// A clear writes only where the API's claim still has the driver's
// entries: a claim deallocated, deleted or made again under the same name
// is left alone (the API would refuse the write for a claim no longer
// allocated on this node).
func TestWriteStatusClearsOnlyWhatIsThere(t *testing.T) {
	prepared := claim("a", result("r", testDriver, "mlx5-1"))
	withEntries := prepared.DeepCopy()
	withEntries.Status.Devices = []resourceapi.AllocatedDeviceStatus{
		{Driver: "gpu.example.com", Pool: "node-a", Device: "gpu-0"},
		{Driver: testDriver, Pool: "node-a", Device: "mlx5-1"},
	}
	deallocated := prepared.DeepCopy()
	deallocated.Status = resourceapi.ResourceClaimStatus{}
	otherDriverOnly := prepared.DeepCopy()
	otherDriverOnly.Status.Devices = withEntries.Status.Devices[:1]
	madeAgain := withEntries.DeepCopy()
	madeAgain.UID = "a-again"
	for _, tc := range []struct {
		name      string
		inAPI     []runtime.Object
		wantApply bool
	}{
		{"entries left", []runtime.Object{withEntries}, true},
		{"deallocated", []runtime.Object{deallocated}, false},
		{"another driver's entries only", []runtime.Object{otherDriverOnly}, false},
		{"deleted and made again", []runtime.Object{madeAgain}, false},
		{"deleted", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.inAPI...)
			d := newDriver(t, Options{Name: testDriver, NodeName: "node-a", Client: client})
			if err := d.writeStatus(context.Background(), prepared, nil); err != nil {
				t.Fatal(err)
			}
			var applied bool
			for _, a := range client.Actions() {
				if a.GetVerb() == "patch" && a.GetSubresource() == "status" {
					applied = true
				}
			}
			if applied != tc.wantApply {
				t.Errorf("status written: %v, want %v (actions %v)", applied, tc.wantApply, client.Actions())
			}
		})
	}
}

// The pause after a failed write doubles while the claim's writes keep
// failing, up to its cap.
func TestRetryDelayGrowsToItsCap(t *testing.T) {
	var got []time.Duration
	for failures := 1; failures <= 7; failures++ {
		got = append(got, retryDelay(failures))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 16 * time.Second, 16 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("pauses %v, want %v", got, want)
	}
}

// A pod holding mlx5_1's interface in its own namespace: networkData is
// that interface, and the NCCL settings are its addresses' (here its own
// address, which the GID table lists at index 5, as the node's).
func TestDeviceStatusesOfPodInterface(t *testing.T) {
	node := statusNode()
	inv := BuildInventory(node, config.Default().NCCL, nil)
	since := metav1.NewTime(time.Unix(1795587663, 0))
	c := claim("u1", result("hca", testDriver, "mlx5-1"))
	inPod := map[string]attach.Observed{"mlx5_1": {Name: "net1", HWAddr: "02:00:00:00:00:09", Addrs: []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24")}}}
	got := DeviceStatuses(c, testDriver, inv, nil, node, config.Default().NCCL, since, inPod)
	nd := got[0].NetworkData
	if nd == nil || nd.InterfaceName != "net1" || nd.HardwareAddress != "02:00:00:00:00:09" || !slices.Equal(nd.IPs, []string{"10.1.0.5/24"}) {
		t.Errorf("networkData %+v, want the pod's net1", nd)
	}
	var data map[string]string
	if got[0].Data == nil || json.Unmarshal(got[0].Data.Raw, &data) != nil || data["NCCL_IB_GID_INDEX"] != "5" {
		t.Errorf("data %v", got[0].Data)
	}
	// An address the table has no GID for: no index to give.
	inPod["mlx5_1"] = attach.Observed{Name: "net1", Addrs: []netip.Prefix{netip.MustParsePrefix("10.1.0.77/24")}}
	got = DeviceStatuses(c, testDriver, inv, nil, node, config.Default().NCCL, since, inPod)
	data = nil
	if got[0].Data != nil && json.Unmarshal(got[0].Data.Raw, &data) == nil && data["NCCL_IB_GID_INDEX"] != "" {
		t.Errorf("GID index 5 (the node's address) for a pod holding another: %s", got[0].Data.Raw)
	}
}
