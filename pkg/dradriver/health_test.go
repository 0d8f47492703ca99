package dradriver

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
)

func inventoryOf(problems map[string]health.Problem, names ...string) Inventory {
	inv := Inventory{IBDevs: map[string]string{}, Problems: map[string]health.Problem{}}
	for _, n := range names {
		inv.Devices = append(inv.Devices, resourceapi.Device{Name: n})
		inv.Problems[n] = problems[n]
	}
	return inv
}

// describe is "name" or "name:CODE:EFFECT" per published device.
func describe(devs []resourceapi.Device) []string {
	var out []string
	for _, d := range devs {
		s := d.Name
		for _, t := range d.Taints {
			s += ":" + t.Key + "=" + t.Value + ":" + string(t.Effect)
		}
		out = append(out, s)
	}
	return out
}

func TestSliceDevicesWithTaints(t *testing.T) {
	h := Health{Driver: "rdma.example.com", Taints: true, Effect: config.TaintNoSchedule}
	down := health.Problem{Code: health.CodeNoActivePort, Reason: "no ACTIVE port"}
	known := map[string]resourceapi.Device{}

	devs, problems := SliceDevices(inventoryOf(map[string]health.Problem{"mlx5-2": down}, "mlx5-1", "mlx5-2"), known, h)
	if got := describe(devs); !slices.Equal(got, []string{"mlx5-1", "mlx5-2:rdma.example.com/unhealthy=NoActivePort:NoSchedule"}) {
		t.Fatalf("a port down: %v", got)
	}
	if *devs[0].Attributes[apis.AttrHealthy].BoolValue != true || *devs[1].Attributes[apis.AttrHealthy].BoolValue != false {
		t.Fatalf("healthy attributes %v, %v", devs[0].Attributes, devs[1].Attributes)
	}
	changes := HealthChanges(nil, problems, h)
	if len(changes) != 1 || changes[0] != "mlx5-2 is unhealthy (no ACTIVE port): tainted rdma.example.com/unhealthy=NoActivePort:NoSchedule" {
		t.Fatalf("changes %q", changes)
	}

	// mlx5-2's function vanishes and mlx5-1 recovers nothing: mlx5-2 stays,
	// tainted as gone, with its last attributes.
	before := problems
	devs, problems = SliceDevices(inventoryOf(nil, "mlx5-1"), known, h)
	if got := describe(devs); !slices.Equal(got, []string{"mlx5-1", "mlx5-2:rdma.example.com/unhealthy=DeviceGone:NoSchedule"}) {
		t.Fatalf("a device gone: %v", got)
	}
	if c := HealthChanges(before, problems, h); len(c) != 1 || !strings.Contains(c[0], "mlx5-2 is unhealthy (gone from /sys/class/infiniband") {
		t.Fatalf("changes %q", c)
	}

	// It comes back healthy: no taint, logged once.
	before = problems
	devs, problems = SliceDevices(inventoryOf(nil, "mlx5-1", "mlx5-2"), known, h)
	if got := describe(devs); !slices.Equal(got, []string{"mlx5-1", "mlx5-2"}) {
		t.Fatalf("back: %v", got)
	}
	if c := HealthChanges(before, problems, h); !slices.Equal(c, []string{"mlx5-2 is healthy again"}) {
		t.Fatalf("changes %q", c)
	}
	if c := HealthChanges(problems, problems, h); len(c) != 0 {
		t.Fatalf("no change logged %q", c)
	}

	// NoExecute when the operator asks.
	h.Effect = config.TaintNoExecute
	devs, _ = SliceDevices(inventoryOf(map[string]health.Problem{"mlx5-1": down}, "mlx5-1", "mlx5-2"), known, h)
	if got := describe(devs); got[0] != "mlx5-1:rdma.example.com/unhealthy=NoActivePort:NoExecute" {
		t.Fatalf("NoExecute: %v", got)
	}
}

// Where the server drops taints, an unhealthy or gone device is left out:
// a class would select it otherwise.
func TestSliceDevicesWithoutTaints(t *testing.T) {
	h := Health{Driver: "rdma.example.com", Effect: config.TaintNoSchedule}
	known := map[string]resourceapi.Device{}
	missing := health.Problem{Code: health.CodeVerbsNodeMissing, Reason: "/dev/infiniband/uverbs2 is missing"}
	devs, problems := SliceDevices(inventoryOf(map[string]health.Problem{"mlx5-2": missing}, "mlx5-1", "mlx5-2", "mlx5-3"), known, h)
	if got := describe(devs); !slices.Equal(got, []string{"mlx5-1", "mlx5-3"}) {
		t.Fatalf("unhealthy left out: %v", got)
	}
	if c := HealthChanges(nil, problems, h); len(c) != 1 || !strings.Contains(c[0], "mlx5-2 is unhealthy (/dev/infiniband/uverbs2 is missing): left out") {
		t.Fatalf("changes %q", c)
	}
	before := problems
	devs, problems = SliceDevices(inventoryOf(nil, "mlx5-1"), known, h)
	if got := describe(devs); !slices.Equal(got, []string{"mlx5-1"}) || len(known) != 1 {
		t.Fatalf("gone devices: %v, known %d", got, len(known))
	}
	if c := HealthChanges(before, problems, h); len(c) != 2 || !strings.Contains(c[0], "mlx5-2 is gone") || !strings.Contains(c[1], "mlx5-3 is gone") {
		t.Fatalf("changes %q", c)
	}
}

// With consumable capacity every HCA with a known rate is shareable up to
// its bandwidth, a plain claim taking all of it by default.
func TestSliceDevicesSharing(t *testing.T) {
	inv := BuildInventory(testNode(), config.Default().NCCL, nil)
	devs, _ := SliceDevices(inv, map[string]resourceapi.Device{}, Health{Driver: testDriver, Taints: true, Sharing: true, Effect: config.TaintNoSchedule})
	d := devs[1] // mlx5_1, 200 Gb/s
	bw, ok := d.Capacity[apis.CapacityBandwidth]
	if !ok || d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations || bw.Value.Value() != 200 ||
		bw.RequestPolicy.Default.Value() != 200 || bw.RequestPolicy.ValidRange.Min.Value() != 1 || !*d.Attributes[apis.AttrShareable].BoolValue {
		t.Fatalf("shareable device %+v", d)
	}
	for _, d := range devs {
		if _, shared := d.Capacity[apis.CapacityBandwidth]; shared != (d.Attributes[apis.AttrRate].IntValue != nil) {
			t.Errorf("%s: shared %v with rate %v", d.Name, shared, d.Attributes[apis.AttrRate])
		}
	}
	// Without it, nothing is shared.
	devs, _ = SliceDevices(inv, map[string]resourceapi.Device{}, Health{Driver: testDriver, Taints: true, Effect: config.TaintNoSchedule})
	for _, d := range devs {
		if d.AllowMultipleAllocations != nil || d.Capacity != nil || d.Attributes[apis.AttrShareable].BoolValue != nil {
			t.Errorf("%s shareable without consumable capacity: %+v", d.Name, d)
		}
	}
}

func TestHealthReport(t *testing.T) {
	at := time.Unix(1700000000, 0)
	r := HealthReport("node-a", map[string]health.Problem{
		"mlx5-2": {Code: health.CodePFNotActive, Reason: "its PF mlx5_0 (0000:3b:00.0) has no ACTIVE port"},
		"mlx5-1": {},
		"mlx5-9": health.Gone,
		"mlx5-3": {},
	}, map[string]health.Problem{
		"mlx5-3": {Code: health.CodePCIeDegraded, Reason: "PCIe link at 16 GT/s x8"},
		"mlx5-2": {Code: health.CodeLinkDegraded, Reason: "shadowed by its problem"},
	}, at)
	want := []kubeletplugin.DeviceHealth{
		{PoolName: "node-a", DeviceName: "mlx5-1", Health: kubeletplugin.HealthStatusHealthy, LastUpdated: at, HealthCheckTimeout: healthTimeout},
		{PoolName: "node-a", DeviceName: "mlx5-2", Health: kubeletplugin.HealthStatusUnhealthy, LastUpdated: at, HealthCheckTimeout: healthTimeout,
			Message: "its PF mlx5_0 (0000:3b:00.0) has no ACTIVE port"},
		{PoolName: "node-a", DeviceName: "mlx5-3", Health: kubeletplugin.HealthStatusHealthy, LastUpdated: at, HealthCheckTimeout: healthTimeout,
			Message: "degraded (PCIeDegraded): PCIe link at 16 GT/s x8"},
		{PoolName: "node-a", DeviceName: "mlx5-9", Health: kubeletplugin.HealthStatusUnhealthy, LastUpdated: at, HealthCheckTimeout: healthTimeout,
			Message: health.Gone.Reason},
	}
	if !reflect.DeepEqual(r.Devices, want) {
		t.Errorf("report\n got %+v\nwant %+v", r.Devices, want)
	}
}

// The stream sends nothing before the first publish, then the health at
// once, then again as soon as it changes (not at the next resend).
func TestWatchHealthStatusFollowsPublishedProblems(t *testing.T) {
	d := newDriver(t, Options{Name: "rdma.example.com", NodeName: "node-a"})
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()
	next := func() kubeletplugin.DeviceHealthReport {
		t.Helper()
		select {
		case r := <-reports:
			return r
		case <-time.After(5 * time.Second):
			t.Fatal("no report within 5 s")
		}
		return kubeletplugin.DeviceHealthReport{}
	}
	select {
	case r := <-reports:
		t.Fatalf("a report before anything was published: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	publish := func(p map[string]health.Problem) {
		d.mu.Lock()
		d.setProblems(p, nil)
		d.mu.Unlock()
	}
	publish(map[string]health.Problem{"mlx5-1": {}})
	if r := next(); len(r.Devices) != 1 || r.Devices[0].Health != kubeletplugin.HealthStatusHealthy {
		t.Fatalf("first report %+v", r)
	}
	down := health.Problem{Code: health.CodeNoActivePort, Reason: "no ACTIVE port"}
	publish(map[string]health.Problem{"mlx5-1": down})
	if r := next(); r.Devices[0].Health != kubeletplugin.HealthStatusUnhealthy || r.Devices[0].Message != "no ACTIVE port" {
		t.Fatalf("after the port went down: %+v", r)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("WatchHealthStatus after cancel: %v", err)
	}
}

// Grey conditions: an Unhealthy one taints like a port down (where the
// binary rule found nothing), a Degraded one gets the degraded taint,
// NoSchedule whatever the unhealthy effect; where the server drops taints
// a degraded device stays, marked by its attribute.
func TestSliceDevicesGrey(t *testing.T) {
	inv := inventoryOf(nil, "mlx5-1", "mlx5-2", "mlx5-3")
	inv.IBDevs = map[string]string{"mlx5-1": "mlx5_1", "mlx5-2": "mlx5_2", "mlx5-3": "mlx5_3"}
	grey := map[string][]health.Condition{
		"mlx5_1": {{Device: "mlx5_1", Port: 1, Level: health.LevelUnhealthy, Code: health.CodeLinkFlapping, Reason: "port 1 went down 3 times"}},
		"mlx5_2": {{Device: "mlx5_2", Level: health.LevelDegraded, Code: health.CodePCIeDegraded, Reason: "PCIe link at 8 GT/s x16"}},
	}
	withGrey := inv.WithGrey(grey)
	if len(inv.Degraded) != 0 || !inv.Problems["mlx5-1"].Healthy() {
		t.Fatalf("WithGrey changed its receiver: %v %v", inv.Problems, inv.Degraded)
	}
	h := Health{Driver: testDriver, Taints: true, Effect: config.TaintNoExecute}
	devs, problems := SliceDevices(withGrey, map[string]resourceapi.Device{}, h)
	got := map[string]string{}
	for i, d := range describe(devs) {
		got[devs[i].Name] = d
	}
	if got["mlx5-3"] != "mlx5-3" || got["mlx5-1"] != "mlx5-1:"+testDriver+"/unhealthy=LinkFlapping:NoExecute" ||
		got["mlx5-2"] != "mlx5-2:"+testDriver+"/degraded=PCIeDegraded:NoSchedule" {
		t.Fatalf("grey taints: %v", got)
	}
	if problems["mlx5-1"].Code != health.CodeLinkFlapping {
		t.Fatalf("problems %v", problems)
	}
	for _, d := range devs {
		if want := d.Name == "mlx5-2"; *d.Attributes[apis.AttrDegraded].BoolValue != want {
			t.Errorf("%s degraded attribute %v", d.Name, *d.Attributes[apis.AttrDegraded].BoolValue)
		}
	}
	devs, _ = SliceDevices(withGrey, map[string]resourceapi.Device{}, Health{Driver: testDriver, Effect: config.TaintNoSchedule})
	if i := slices.IndexFunc(devs, func(d resourceapi.Device) bool { return d.Name == "mlx5-2" }); i < 0 || len(devs[i].Taints) != 0 {
		t.Fatalf("without taints, the degraded device: %v", describe(devs))
	}
	// The binary rule's problem says more than a grey one: it stays.
	inv.Problems["mlx5-1"] = health.Problem{Code: health.CodeNoActivePort, Reason: "no ACTIVE port"}
	if p := inv.WithGrey(grey).Problems["mlx5-1"]; p.Code != health.CodeNoActivePort {
		t.Fatalf("problem %v", p)
	}
}
