package dradriver

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/topology"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// roceGIDs is a RoCE port's table as the kernel fills it: link-local v1 and
// v2, then the IPv4 address as v1 and v2, the v2 one at v2Index.
func roceGIDs(ip string, v2Index int) []model.GID {
	ll := netip.MustParseAddr("fe80::1")
	v4 := netip.MustParseAddr("::ffff:" + ip)
	return []model.GID{
		{Index: 0, GID: ll, Type: model.GIDTypeRoCEv1}, {Index: 1, GID: ll, Type: model.GIDTypeRoCEv2},
		{Index: v2Index - 1, GID: v4, Type: model.GIDTypeRoCEv1}, {Index: v2Index, GID: v4, Type: model.GIDTypeRoCEv2},
	}
}

func testNode() model.Node {
	roce := func(name, netdev, ip string, v2Index, numa int, root string) model.Device {
		return model.Device{
			Name: name, PCIAddress: "0000:" + root[8:] + ":00.0", PCIVendor: "0x15b3", PCIDevice: "0x101d",
			PCIeRoot: root, NUMANode: numa, FWVersion: "28.39.1002",
			Ports: []model.Port{{Number: 1, State: "ACTIVE", LinkLayer: model.LinkLayerEthernet, Rate: "200 Gb/sec (4X HDR)", RateGbps: 200, Width: 4,
				NetDev: netdev, GIDTableLen: 255, GIDs: roceGIDs(ip, v2Index)}},
		}
	}
	ib := model.Device{Name: "mlx5_ib0", NUMANode: -1, Ports: []model.Port{
		{Number: 1, State: "DOWN", LinkLayer: model.LinkLayerInfiniBand, Rate: "2.5 Gb/sec (1X SDR)", RateGbps: 2.5, Width: 1},
		{Number: 2, State: "ACTIVE", LinkLayer: model.LinkLayerInfiniBand, Rate: "400 Gb/sec (4X NDR)", RateGbps: 400, Width: 4,
			GIDs: []model.GID{{Index: 0, GID: netip.MustParseAddr("fe80::2"), Type: model.GIDTypeIB}}},
	}}
	return model.Node{
		Devices: []model.Device{
			roce("mlx5_0", "eth0", "10.0.0.5", 3, 0, "pci0000:00"),
			roce("mlx5_1", "eth1", "10.1.0.5", 5, 1, "pci0000:c0"),
			ib,
		},
		DefaultRouteNetDev: "eth0",
	}
}

func str(a resourceapi.DeviceAttribute) any {
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return *a.IntValue
	case a.BoolValue != nil:
		return *a.BoolValue
	}
	return nil
}

func TestBuildInventory(t *testing.T) {
	inv := BuildInventory(testNode(), config.Default().NCCL, nil)
	if len(inv.Warnings) != 0 {
		t.Errorf("warnings: %v", inv.Warnings)
	}
	var names []string
	for _, d := range inv.Devices {
		names = append(names, d.Name)
		if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
			t.Errorf("device name %q: %v", d.Name, errs)
		}
	}
	if !slices.Equal(names, []string{"mlx5-0", "mlx5-1", "mlx5-ib0"}) {
		t.Fatalf("devices %v", names)
	}
	want := map[string]map[resourceapi.QualifiedName]any{
		"mlx5-0": {
			apis.AttrIBDev: "mlx5_0", apis.AttrNetDev: "eth0", apis.AttrLinkLayer: "Ethernet", apis.AttrPortState: "ACTIVE", apis.AttrRate: int64(200),
			apis.AttrNUMANode: int64(0), apis.AttrPCIAddress: "0000:00:00.0", apis.AttrPCIVendor: "0x15b3", apis.AttrPCIDevice: "0x101d",
			apis.AttrFirmware: "28.39.1002", apis.AttrNCCLGIDIndex: int64(3), apis.AttrDefaultRoute: true, apis.AttrPorts: int64(1), apis.AttrTransport: "roce",
			"resource.kubernetes.io/pcieRoot": "pci0000:00", apis.AttrIsSRIOVVF: false,
			"resource.kubernetes.io/pciBusID": "0000:00:00.0", "resource.kubernetes.io/numaNode": int64(0),
		},
		"mlx5-1": {
			apis.AttrIBDev: "mlx5_1", apis.AttrNetDev: "eth1", apis.AttrLinkLayer: "Ethernet", apis.AttrPortState: "ACTIVE", apis.AttrRate: int64(200),
			apis.AttrNUMANode: int64(1), apis.AttrPCIAddress: "0000:c0:00.0", apis.AttrPCIVendor: "0x15b3", apis.AttrPCIDevice: "0x101d",
			apis.AttrFirmware: "28.39.1002", apis.AttrNCCLGIDIndex: int64(5), apis.AttrDefaultRoute: false, apis.AttrPorts: int64(1), apis.AttrTransport: "roce",
			"resource.kubernetes.io/pcieRoot": "pci0000:c0", apis.AttrIsSRIOVVF: false,
			"resource.kubernetes.io/pciBusID": "0000:c0:00.0", "resource.kubernetes.io/numaNode": int64(1),
		},
		// InfiniBand: no GID index; its active port 2 describes it; no NUMA.
		"mlx5-ib0": {
			apis.AttrIBDev: "mlx5_ib0", apis.AttrLinkLayer: "InfiniBand", apis.AttrPortState: "ACTIVE", apis.AttrRate: int64(400),
			apis.AttrDefaultRoute: false, apis.AttrPorts: int64(2), apis.AttrIsSRIOVVF: false, apis.AttrTransport: "infiniband",
		},
	}
	for _, d := range inv.Devices {
		got := map[resourceapi.QualifiedName]any{}
		for k, v := range d.Attributes {
			got[k] = str(v)
		}
		for k, v := range want[d.Name] {
			if got[k] != v {
				t.Errorf("%s %s = %v, want %v", d.Name, k, got[k], v)
			}
		}
		for k := range got {
			if _, ok := want[d.Name][k]; !ok {
				t.Errorf("%s has %s = %v, not expected", d.Name, k, got[k])
			}
		}
	}
	if inv.IBDevs["mlx5-1"] != "mlx5_1" || len(inv.IBDevs) != 3 {
		t.Errorf("IBDevs %v", inv.IBDevs)
	}
}

// A port going down stays in the slice, marked, so the classes that
// require ACTIVE stop offering it; an address family rule moves the index.
func TestBuildInventoryFollowsTheNode(t *testing.T) {
	node := testNode()
	node.Devices[1].Ports[0].State = "DOWN"
	cfg := config.Default().NCCL
	cfg.AddrFamily = config.AddrFamilyIPv6
	d := BuildInventory(node, cfg, nil).Devices[1]
	if s := str(d.Attributes[apis.AttrPortState]); s != "DOWN" {
		t.Errorf("portState %v, want DOWN", s)
	}
	// No global IPv6 GID: NCCL would pick an unusable one, so no index is advertised.
	if _, ok := d.Attributes[apis.AttrNCCLGIDIndex]; ok {
		t.Errorf("ncclGidIndex %v under AF_INET6 with no usable IPv6 GID", str(d.Attributes[apis.AttrNCCLGIDIndex]))
	}
}

// A PF and its VFs say which is which, so that a claim's CEL selector can
// ask for VFs only, or for the VFs of one PF.
func TestBuildInventorySRIOV(t *testing.T) {
	node := testNode()
	pf := &node.Devices[0]
	pf.NumVFs = 2
	vf := func(name, addr string) model.Device {
		d := node.Devices[0]
		d.Name, d.PCIAddress, d.PhysFn, d.NumVFs = name, addr, pf.PCIAddress, 0
		return d
	}
	node.Devices = append(node.Devices, vf("mlx5_2", "0000:00:00.2"), vf("mlx5_3", "0000:00:00.3"))
	// A VF whose PF is bound elsewhere (vfio-pci): its PF by address only.
	orphan := vf("mlx5_4", "0000:5e:00.2")
	orphan.PhysFn = "0000:5e:00.0"
	node.Devices = append(node.Devices, orphan)
	inv := BuildInventory(node, config.Default().NCCL, nil)
	attrs := map[string]map[resourceapi.QualifiedName]any{}
	for _, d := range inv.Devices {
		attrs[d.Name] = map[resourceapi.QualifiedName]any{}
		for _, k := range []resourceapi.QualifiedName{apis.AttrIsSRIOVVF, apis.AttrPFPCIAddress, apis.AttrPFIBDev, apis.AttrSRIOVVFs} {
			if v, ok := d.Attributes[k]; ok {
				attrs[d.Name][k] = str(v)
			}
		}
	}
	want := map[string]map[resourceapi.QualifiedName]any{
		"mlx5-0":   {apis.AttrIsSRIOVVF: false, apis.AttrSRIOVVFs: int64(2)},
		"mlx5-1":   {apis.AttrIsSRIOVVF: false},
		"mlx5-ib0": {apis.AttrIsSRIOVVF: false},
		"mlx5-2":   {apis.AttrIsSRIOVVF: true, apis.AttrPFPCIAddress: "0000:00:00.0", apis.AttrPFIBDev: "mlx5_0"},
		"mlx5-3":   {apis.AttrIsSRIOVVF: true, apis.AttrPFPCIAddress: "0000:00:00.0", apis.AttrPFIBDev: "mlx5_0"},
		"mlx5-4":   {apis.AttrIsSRIOVVF: true, apis.AttrPFPCIAddress: "0000:5e:00.0"},
	}
	if !reflect.DeepEqual(attrs, want) {
		t.Errorf("SR-IOV attributes\n got %v\nwant %v", attrs, want)
	}

	// The selectors a user writes, evaluated as the scheduler does.
	for expr, picks := range map[string][]string{
		`device.attributes["rdma.example.com"].isSriovVf`:                                                                         {"mlx5-2", "mlx5-3", "mlx5-4"},
		`!device.attributes["rdma.example.com"].isSriovVf`:                                                                        {"mlx5-0", "mlx5-1", "mlx5-ib0"},
		`device.attributes["rdma.example.com"].isSriovVf && device.attributes["rdma.example.com"].pfPciAddress == "0000:00:00.0"`: {"mlx5-2", "mlx5-3"},
	} {
		if got := selected(t, inv, expr); !slices.Equal(got, picks) {
			t.Errorf("%s selects %v, want %v", expr, got, picks)
		}
	}
}

// selected are the devices of inv a claim's CEL selector expr picks, as
// the scheduler evaluates it.
func selected(t *testing.T, inv Inventory, expr string) []string {
	t.Helper()
	prog := dracel.GetCompiler(dracel.Features{}).CompileCELExpression(expr, dracel.Options{})
	if prog.Error != nil {
		t.Fatalf("%s: %v", expr, prog.Error)
	}
	var got []string
	for _, d := range inv.Devices {
		ok, _, err := prog.DeviceMatches(context.Background(), dracel.Device{Driver: "rdma.example.com", Attributes: d.Attributes})
		if err != nil {
			t.Fatalf("%s on %s: %v", expr, d.Name, err)
		}
		if ok {
			got = append(got, d.Name)
		}
	}
	return got
}

// TestBuildInventoryGPUDirect: gpuDirect is the node's path on an HCA one
// PCIe switch from a GPU, none on one whose GPU is through the CPU, and a
// selector keeps the latter out.
func TestBuildInventoryGPUDirect(t *testing.T) {
	node := testNode()
	if inv := BuildInventory(node, config.Default().NCCL, nil); inv.Devices[0].Attributes[apis.AttrGPUDirect].StringValue != nil {
		t.Errorf("facts not read, yet gpuDirect is %s", *inv.Devices[0].Attributes[apis.AttrGPUDirect].StringValue)
	}
	port := func(addr string) model.PCIBridge {
		return model.PCIBridge{Address: addr, ACS: model.ACS{Readable: true, Present: true}}
	}
	sw := []model.PCIBridge{port("0000:00:01.0"), {Address: "0000:01:00.0", ACS: model.ACS{Readable: true}}}
	g := &model.GPUDirect{
		NVIDIA: model.NVIDIADriver{Loaded: true, Open: true, Version: "580.159.04"}, Kernel: "6.8.0-49-generic",
		GPUs: []model.PCIPlace{{Address: "0000:04:00.0", Root: "pci0000:00", Bridges: append(slices.Clone(sw), port("0000:02:01.0"))}},
	}
	for i, d := range node.Devices {
		place := model.PCIPlace{Address: d.PCIAddress, Root: d.PCIeRoot, Bridges: []model.PCIBridge{port(fmt.Sprintf("0000:00:0%d.0", i+2))}}
		if i == 0 {
			place.Bridges = append(slices.Clone(sw), port("0000:02:00.0"))
		}
		g.HCAs = append(g.HCAs, place)
	}
	node.GPUDirect = g
	inv := BuildInventory(node, config.Default().NCCL, nil)
	got := map[string]any{}
	for _, d := range inv.Devices {
		if v, ok := d.Attributes[apis.AttrGPUDirect]; ok {
			got[d.Name] = str(v)
		}
	}
	// mlx5_ib0 is no PCI function here: none, and a selector needs no has().
	if want := map[string]any{"mlx5-0": "dmabuf", "mlx5-1": "none", "mlx5-ib0": "none"}; !reflect.DeepEqual(got, want) {
		t.Errorf("gpuDirect %v, want %v", got, want)
	}
	if got := selected(t, inv, `device.attributes["rdma.example.com"].gpuDirect != "none"`); !slices.Equal(got, []string{"mlx5-0"}) {
		t.Errorf("the selector picks %v, want [mlx5-0]", got)
	}
}

func TestDeviceName(t *testing.T) {
	for in, want := range map[string]string{
		"mlx5_0": "mlx5-0", "mlx5_bond_0": "mlx5-bond-0", "irdma0": "irdma0", "MLX5_1": "mlx5-1",
		"_rxe.0_": "rxe-0", "___": "",
	} {
		if got := DeviceName(in); got != want {
			t.Errorf("DeviceName(%q) = %q, want %q", in, got, want)
		}
	}
	long := DeviceName(string(make([]byte, 80)) + "x")
	if long != "x" {
		t.Errorf("80 NULs then x: %q", long)
	}
	if got := DeviceName("a_" + string(slices.Repeat([]byte("b"), 70))); len(got) != 63 || validation.IsDNS1123Label(got) != nil {
		t.Errorf("long name %q (%d)", got, len(got))
	}
}

// Two HCAs whose names map to one label: the second is left out, named;
// a name with nothing of a label is left out too.
func TestBuildInventoryNameClash(t *testing.T) {
	node := model.Node{Devices: []model.Device{{Name: "mlx5_1", NUMANode: -1}, {Name: "mlx5-1", NUMANode: -1}, {Name: "__", NUMANode: -1}}}
	inv := BuildInventory(node, config.Default().NCCL, nil)
	if len(inv.Devices) != 1 || inv.IBDevs["mlx5-1"] != "mlx5_1" || len(inv.Warnings) != 2 {
		t.Fatalf("devices %v IBDevs %v warnings %v", inv.Devices, inv.IBDevs, inv.Warnings)
	}
	if !strings.Contains(inv.Warnings[0], `"mlx5-1" is mlx5_1's too`) || !strings.Contains(inv.Warnings[1], "__ left out") {
		t.Errorf("warnings %q", inv.Warnings)
	}
}

// The help texts and docs list apis.Attributes: it must hold every
// attribute the slice carries, and nothing it never carries.
func TestPublishedAttributesAreDocumented(t *testing.T) {
	node := testNode()
	node.Devices[0].NumVFs = 1
	vf := node.Devices[0]
	vf.Name, vf.PCIAddress, vf.PhysFn, vf.NumVFs = "mlx5_2", "0000:00:00.2", node.Devices[0].PCIAddress, 0
	node.Devices = append(node.Devices, vf)
	node.GPUDirect = &model.GPUDirect{}
	rails, _ := topology.Rails(node, config.Topology{Rails: []config.Rail{{Rail: "rail1", IBDev: "mlx5_1"}}})
	inv := BuildInventory(node, config.Default().NCCL, rails)
	devs, _ := SliceDevices(inv, map[string]resourceapi.Device{}, Health{Driver: testDriver, Taints: true, Sharing: true, Effect: config.TaintNoSchedule})
	published := map[string]bool{}
	for _, d := range devs {
		for name := range d.Attributes {
			published[string(name)] = true
		}
	}
	documented := map[string]bool{}
	for _, a := range apis.Attributes {
		documented[a.Name] = true
		if !published[a.Name] {
			t.Errorf("apis.Attributes lists %s, which no device of the slice carries", a.Name)
		}
	}
	for name := range published {
		if !documented[name] {
			t.Errorf("the slice carries %s, which apis.Attributes does not list", name)
		}
	}
}

// Seed 002's node, discovered from its fixture: each of the eight RoCE
// HCAs in a /27 of its own is on the rail named after it; the management
// NIC (the default route) on none. A claim's matchAttribute on rail then
// pairs HCAs on one leaf switch.
func TestBuildInventorySeed002Rails(t *testing.T) {
	tr := fixture.BuildBundledTrees(t, "seed002", false)
	res, err := discover.Discover(discover.Options{Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev}, SkipNet: true})
	if err != nil {
		t.Fatal(err)
	}
	node := res.Node
	if node.NetDevs, err = tr.Topo.ModelNetDevs(); err != nil {
		t.Fatal(err)
	}
	node.DefaultRouteNetDev = tr.Topo.DefaultRouteNetDev()
	cfg := config.Default()
	rails, notes := topology.Rails(node, cfg.Topology)
	if len(notes) != 0 {
		t.Errorf("notes %q", notes)
	}
	got := map[string]string{}
	for _, d := range BuildInventory(node, cfg.NCCL, rails).Devices {
		if a, ok := d.Attributes[apis.AttrRail]; ok {
			got[d.Name] = *a.StringValue
		}
	}
	want := map[string]string{
		"mlx5-1": "25.11.128.0/27", "mlx5-2": "25.11.128.32/27", "mlx5-3": "25.11.128.64/27", "mlx5-4": "25.11.128.96/27",
		"mlx5-5": "25.11.128.128/27", "mlx5-6": "25.11.128.160/27", "mlx5-7": "25.11.128.192/27", "mlx5-8": "25.11.128.224/27",
	}
	if !maps.Equal(got, want) {
		t.Fatalf("rail attributes %v, want %v", got, want)
	}
	// A configured rail replaces the subnet's in the slice.
	cfg.Topology.Rails = []config.Rail{{Rail: "rail-3", NetDev: "eth3"}}
	rails, _ = topology.Rails(node, cfg.Topology)
	for _, d := range BuildInventory(node, cfg.NCCL, rails).Devices {
		if d.Name == "mlx5-3" && *d.Attributes[apis.AttrRail].StringValue != "rail-3" {
			t.Errorf("mlx5-3 rail %q, want rail-3", *d.Attributes[apis.AttrRail].StringValue)
		}
	}
}
