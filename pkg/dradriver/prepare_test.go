package dradriver

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
)

const testDriver = "rdma.example.com"

// newDriver is New(opts) for a test, which fails on an error.
func newDriver(t *testing.T, opts Options) *Driver {
	t.Helper()
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestNewRequiresNames(t *testing.T) {
	for _, opts := range []Options{{NodeName: "node-a"}, {Name: testDriver}} {
		if _, err := New(opts); err == nil {
			t.Errorf("New(%+v) built a driver", opts)
		}
	}
	d := newDriver(t, Options{Name: testDriver, NodeName: "node-a"})
	if d.Log == nil || d.prepared == nil || d.holders == nil || d.statuses == nil {
		t.Errorf("New left the driver half made: %+v", d)
	}
	if err := d.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "client") {
		t.Errorf("Run without a client: %v", err)
	}
}

func claim(uid string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c-" + uid, Namespace: "ns", UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	return c
}

func result(request, driver, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: request, Driver: driver, Pool: "node-a", Device: device}
}

func cdiIDs(r kubeletplugin.PrepareResult) []string {
	var out []string
	for _, d := range r.Devices {
		out = append(out, d.CDIDeviceIDs...)
	}
	return out
}

func TestPrepareClaim(t *testing.T) {
	inv := BuildInventory(testNode(), config.Default().NCCL, nil)
	c := claim("u1", result("hcas", testDriver, "mlx5-1"), result("gpu", "gpu.example.com", "gpu-0"), result("hcas", testDriver, "mlx5-ib0"))
	r := PrepareClaim(c, testDriver, "node-a", "rdma.example.com/hca", inv)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	// Only our devices, each with its HCA's CDI name (the underscore kept).
	if got := cdiIDs(r); !slices.Equal(got, []string{"rdma.example.com/hca=mlx5_1", "rdma.example.com/hca=mlx5_ib0"}) {
		t.Errorf("CDI IDs %v", got)
	}
	if d := r.Devices[0]; d.PoolName != "node-a" || d.DeviceName != "mlx5-1" || !slices.Equal(d.Requests, []string{"hcas"}) {
		t.Errorf("device %+v", d)
	}
}

func TestPrepareClaimRefuses(t *testing.T) {
	inv := BuildInventory(testNode(), config.Default().NCCL, nil)
	for name, c := range map[string]*resourceapi.ResourceClaim{
		"unknown device": claim("u1", result("r", testDriver, "mlx5-1"), result("r", testDriver, "mlx5-9")),
		"not allocated":  {ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns", UID: "u2"}},
		// Another node's mlx5-1: same driver, same device name, its pool.
		"another node's pool": claim("u4", result("r", testDriver, "mlx5-1"), resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: testDriver, Pool: "node-b", Device: "mlx5-2"}),
	} {
		r := PrepareClaim(c, testDriver, "node-a", "rdma.example.com/hca", inv)
		if r.Err == nil || len(r.Devices) != 0 {
			t.Errorf("%s: %+v; want an error and no device (never half a claim)", name, r)
		}
	}
	// A claim with none of our devices prepares to nothing, without error.
	if r := PrepareClaim(claim("u3", result("gpu", "gpu.example.com", "gpu-0")), testDriver, "node-a", "k/c", inv); r.Err != nil || len(r.Devices) != 0 {
		t.Errorf("foreign claim: %+v", r)
	}
}

// The Driver's kubelet side: a device is prepared for one claim at a time;
// a repeat prepare of the same claim is fine (the kubelet retries after a
// restart), unprepare is idempotent and frees the device.
func TestDriverPrepareUnprepare(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	d := newDriver(t, Options{Name: testDriver, NodeName: "node-a", Log: log})
	d.Update(testNode(), config.Default())
	ctx := context.Background()
	prepare := func(c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
		t.Helper()
		out, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
		if err != nil || len(out) != 1 {
			t.Fatalf("prepare: %v %v", out, err)
		}
		return out[c.UID]
	}
	first := claim("a", result("r", testDriver, "mlx5-1"))
	if r := prepare(first); r.Err != nil || !slices.Equal(cdiIDs(r), []string{"rdma.example.com/hca=mlx5_1"}) {
		t.Fatalf("first: %+v", r)
	}
	if r := prepare(first); r.Err != nil {
		t.Fatalf("prepare again: %v", r.Err)
	}
	second := claim("b", result("r", testDriver, "mlx5-1"))
	if r := prepare(second); r.Err == nil || !strings.Contains(r.Err.Error(), "prepared for claim a") {
		t.Fatalf("second claim on a held device: %+v", r)
	}
	for range 2 {
		out, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: "a"}, {UID: "never"}})
		if err != nil || len(out) != 2 || out["a"] != nil || out["never"] != nil {
			t.Fatalf("unprepare: %v %v", out, err)
		}
	}
	if r := prepare(second); r.Err != nil {
		t.Fatalf("after unprepare: %v", r.Err)
	}
}

// Shares of one device (the scheduler counted them against its bandwidth)
// are prepared for every claim holding one.
func TestDriverPreparesShares(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	d := newDriver(t, Options{Name: testDriver, NodeName: "node-a", Log: log})
	d.Update(testNode(), config.Default())
	shared := func(uid string) *resourceapi.ResourceClaim {
		r := result("r", testDriver, "mlx5-1")
		share := types.UID("share-" + uid)
		r.ShareID = &share
		return claim(uid, r)
	}
	out, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{shared("a"), shared("b")})
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []types.UID{"a", "b"} {
		r := out[uid]
		if r.Err != nil || len(r.Devices) != 1 || r.Devices[0].ShareID == nil || *r.Devices[0].ShareID != "share-"+uid {
			t.Errorf("claim %s: %+v", uid, r)
		}
	}
}
