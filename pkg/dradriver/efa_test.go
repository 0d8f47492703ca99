package dradriver

import (
	"net/netip"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// An AWS EFA device is an HCA of the slice like any other, told apart by
// its transport; its port has no netdev and NCCL no GID index for it.
func TestEFADeviceAttributes(t *testing.T) {
	node := model.Node{DefaultRouteNetDev: "eth0", Devices: []model.Device{{
		Name: "rdmap79s0", PCIAddress: "0000:4f:00.0", PCIVendor: "0x1d0f", PCIDevice: "0xefa1", Driver: "efa", NUMANode: 0,
		PCIeRoot: "pci0000:4e",
		Ports: []model.Port{{Number: 1, State: model.PortActive, LinkLayer: model.LinkLayerUnspecified, Rate: "100 Gb/sec (4X EDR)",
			RateGbps: 100, Width: 4, GIDTableLen: 1,
			GIDs: []model.GID{{Index: 0, GID: netip.MustParseAddr("fe80::4c6:41ff:fe9a:e3f6"), Type: model.GIDTypeRoCEv1}}}},
	}}}
	inv := BuildInventory(node, config.Default().NCCL, nil)
	if len(inv.Devices) != 1 || inv.Devices[0].Name != "rdmap79s0" {
		t.Fatalf("devices %+v", inv.Devices)
	}
	got := map[resourceapi.QualifiedName]any{}
	for k, v := range inv.Devices[0].Attributes {
		got[k] = str(v)
	}
	for k, want := range map[resourceapi.QualifiedName]any{
		apis.AttrTransport: "efa", apis.AttrLinkLayer: "unspecified", apis.AttrPortState: "ACTIVE",
		apis.AttrRate: int64(100), apis.AttrPCIVendor: "0x1d0f", apis.AttrPCIDevice: "0xefa1",
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	for _, absent := range []resourceapi.QualifiedName{apis.AttrNetDev, apis.AttrNCCLGIDIndex} {
		if v, ok := got[absent]; ok {
			t.Errorf("%s = %v on an EFA device, want none", absent, v)
		}
	}
}
