package dradriver

import (
	"context"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// gb200Inventory is the inventory of the gb200 tray, discovered from its
// fixture with its GPUDirect facts, as the dra-driver reads it.
func gb200Inventory(t *testing.T) Inventory {
	t.Helper()
	tr := fixture.BuildBundledTrees(t, "gb200", false)
	res, err := discover.Discover(discover.Options{Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev}, SkipNet: true})
	if err != nil {
		t.Fatal(err)
	}
	node := res.Node
	g := discover.GPUDirect(model.Roots{Sysfs: tr.Sys, Proc: tr.Proc}, node.Devices)
	node.GPUDirect = &g
	return BuildInventory(node, config.Default().NCCL, nil)
}

// TestGB200Slice: on the tray every HCA reaches the GPUs of its Grace over
// NVLink-C2C, so gpuDirect is the node's path (dmabuf), not none. The
// standard numaNode is its Grace's node, an int where the API server
// drops lists; where it keeps them, the Grace's node and then the memory
// nodes of its GPUs. Our own numaNode stays the PCI function's node.
func TestGB200Slice(t *testing.T) {
	inv := gb200Inventory(t)
	want := map[string][]int64{"mlx5-0": {0, 2, 10}, "mlx5-1": {0, 2, 10}, "mlx5-2": {1, 18, 26}, "mlx5-3": {1, 18, 26}, "mlx5-4": {0, 2, 10}}
	for _, lists := range []bool{false, true} {
		devs, _ := SliceDevices(inv, map[string]resourceapi.Device{}, Health{Driver: testDriver, Taints: true, Lists: lists})
		if len(devs) != 5 {
			t.Fatalf("%d devices", len(devs))
		}
		for _, d := range devs {
			if gdr := str(d.Attributes[apis.AttrGPUDirect]); gdr != "dmabuf" {
				t.Errorf("%s: gpuDirect %v, want dmabuf (over NVLink-C2C)", d.Name, gdr)
			}
			std, own := d.Attributes[apis.StdAttrNUMANode], d.Attributes[apis.AttrNUMANode]
			if own.IntValue == nil || *own.IntValue != want[d.Name][0] {
				t.Errorf("%s: %s %v, want the int %d", d.Name, apis.AttrNUMANode, str(own), want[d.Name][0])
			}
			switch {
			case lists && (std.IntValue != nil || !slices.Equal(std.IntValues, want[d.Name])):
				t.Errorf("%s with lists: %s %v / %v, want the list %v", d.Name, apis.StdAttrNUMANode, str(std), std.IntValues, want[d.Name])
			case !lists && (std.IntValues != nil || std.IntValue == nil || *std.IntValue != want[d.Name][0]):
				t.Errorf("%s without lists: %s %v / %v, want the int %d", d.Name, apis.StdAttrNUMANode, str(std), std.IntValues, want[d.Name][0])
			}
		}
		// Device metadata carries the slice's form.
		if pub, _ := (Health{Driver: testDriver, Taints: true, Lists: lists}).Published(inv, "mlx5-2"); lists != (pub.Attributes[apis.StdAttrNUMANode].IntValues != nil) {
			t.Errorf("Published mlx5-2 with lists %v: %+v", lists, pub.Attributes[apis.StdAttrNUMANode])
		}
	}
}

// On an x86 node the list is the HCA's node alone, and an HCA without a
// NUMA node has no numaNode in either form.
func TestNUMAListOffGrace(t *testing.T) {
	inv := BuildInventory(testNode(), config.Default().NCCL, nil)
	devs, _ := SliceDevices(inv, map[string]resourceapi.Device{}, Health{Driver: testDriver, Taints: true, Lists: true})
	got := map[string][]int64{}
	for _, d := range devs {
		if a, ok := d.Attributes[apis.StdAttrNUMANode]; ok {
			got[d.Name] = a.IntValues
		}
	}
	if len(got) != 2 || !slices.Equal(got["mlx5-0"], []int64{0}) || !slices.Equal(got["mlx5-1"], []int64{1}) {
		t.Errorf("numaNode lists %v, want mlx5-0 [0], mlx5-1 [1], none on mlx5-ib0", got)
	}
}

type classes []*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) { return c, nil }
func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, d := range c {
		if d.Name == name {
			return d, nil
		}
	}
	return nil, errors.New("no DeviceClass " + name)
}

// TestGB200PairsWithAGPUOfItsGrace runs the scheduler's allocator over
// the tray's slice and a GPU driver's: one claim asks for a GPU by its
// index and an HCA, with matchAttribute on the standard numaNode. A GPU
// driver may list its Grace's node, its memory's node or both; with lists
// the HCA given is one of the GPU's Grace whichever it is, while with ints
// a GPU that names its memory's node finds no HCA at all.
func TestGB200PairsWithAGPUOfItsGrace(t *testing.T) {
	inv := gb200Inventory(t)
	gpu := func(index int64, numa resourceapi.DeviceAttribute) resourceapi.Device {
		return resourceapi.Device{Name: "gpu-" + string(rune('0'+index)), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"index": {IntValue: &index}, apis.StdAttrNUMANode: numa}}
	}
	ints := func(v ...int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValues: v} }
	scalar := func(v int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: &v} }
	node := "gb200-rack1-tray05"
	slice := func(driver string, devs []resourceapi.Device) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: driver}, Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: &node, Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}, Devices: devs}}
	}
	class := func(name, driver string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + driver + `"`}}}}}
	}
	std := resourceapi.FullyQualifiedName(apis.StdAttrNUMANode)
	claim := func(index string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "pair", Namespace: "ml", UID: "uid-pair"}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{
				{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
					Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["gpu.example.com"].index == ` + index}}}}},
				{Name: "hca", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "hca", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}},
			},
			Constraints: []resourceapi.DeviceConstraint{{Requests: []string{"gpu", "hca"}, MatchAttribute: &std}},
		}}}
	}
	// GPUs 0 and 1 on Grace 0 (memory nodes 2, 10), 2 and 3 on Grace 1
	// (18, 26): by their PCI node as the upstream helper lists it, by
	// their memory's node alone (a scalar, or a list), or both.
	gpus := slice("gpu.example.com", []resourceapi.Device{gpu(0, ints(0)), gpu(1, scalar(10)), gpu(2, ints(1, 18)), gpu(3, ints(26))})
	for _, c := range []struct {
		lists bool
		index string
		hcas  []string // the HCAs the GPU may get; none: the claim fails
	}{
		{true, "0", []string{"mlx5-0", "mlx5-1", "mlx5-4"}},
		{true, "1", []string{"mlx5-0", "mlx5-1", "mlx5-4"}},
		{true, "2", []string{"mlx5-2", "mlx5-3"}},
		{true, "3", []string{"mlx5-2", "mlx5-3"}},
		{false, "1", nil},
	} {
		devs, _ := SliceDevices(inv, map[string]resourceapi.Device{}, Health{Driver: testDriver, Taints: true, Lists: c.lists})
		gpuDevs := gpus
		if !c.lists { // a server without lists has no GPU list either
			gpuDevs = slice("gpu.example.com", []resourceapi.Device{gpu(1, scalar(10))})
		}
		features := structured.Features{DeviceTaints: true, ListTypeAttributes: c.lists}
		alloc, err := structured.NewAllocator(context.Background(), features,
			structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](), AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()},
			classes{class("gpu", "gpu.example.com"), class("hca", testDriver)},
			[]*resourceapi.ResourceSlice{slice(testDriver, devs), gpuDevs},
			dracel.NewCache(10, dracel.Features{EnableListTypeAttributes: c.lists}))
		if err != nil {
			t.Fatal(err)
		}
		results, err := alloc.Allocate(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, []*resourceapi.ResourceClaim{claim(c.index)})
		switch {
		case err != nil:
			t.Errorf("lists %v, GPU %s: %v", c.lists, c.index, err)
		case c.hcas == nil && len(results) != 0:
			t.Errorf("lists off, GPU %s by its memory's node: allocated %+v, want no HCA to match", c.index, results)
		case c.hcas != nil && len(results) != 1:
			t.Errorf("lists %v, GPU %s: no allocation, want an HCA of %v", c.lists, c.index, c.hcas)
		case c.hcas != nil:
			for _, r := range results[0].Devices.Results {
				if r.Request == "hca" && !slices.Contains(c.hcas, r.Device) {
					t.Errorf("lists %v, GPU %s got %s, want one of %v", c.lists, c.index, r.Device, c.hcas)
				}
			}
		}
	}
}
