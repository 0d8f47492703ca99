package topology

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

func roce(name, netdev, pci string) model.Device {
	return model.Device{Name: name, PCIAddress: pci, Ports: []model.Port{{Number: 1, State: model.PortActive, LinkLayer: model.LinkLayerEthernet, NetDev: netdev}}}
}

func netdev(name string, addrs ...string) model.NetDev {
	nd := model.NetDev{Name: name}
	for _, a := range addrs {
		nd.Addrs = append(nd.Addrs, netip.MustParsePrefix(a))
	}
	return nd
}

// railNode is seed 002's shape: the management NIC mlx5_0 with the default
// route, then one RoCE HCA per rail, each in a /27 of its own, and an
// InfiniBand HCA without an address.
func railNode() model.Node {
	return model.Node{
		Devices: []model.Device{
			roce("mlx5_0", "eth0", "0000:16:00.0"),
			roce("mlx5_1", "eth1", "0000:54:00.0"),
			roce("mlx5_2", "eth2", "0000:54:00.1"),
			roce("mlx5_3", "eth3", "0000:70:00.0"),
			{Name: "mlx5_ib0", PCIAddress: "0000:a0:00.0", Ports: []model.Port{{Number: 1, LinkLayer: model.LinkLayerInfiniBand}}},
		},
		NetDevs: []model.NetDev{
			netdev("eth0", "10.0.60.3/24"),
			netdev("eth1", "25.11.128.2/27", "fe80::1/64"),
			netdev("eth2", "25.11.128.34/27"),
			netdev("eth3", "25.11.128.66/27"),
		},
		DefaultRouteNetDev: "eth0",
	}
}

func TestRailsFromSubnets(t *testing.T) {
	rails, notes := Rails(railNode(), config.Topology{})
	want := map[string]string{"mlx5_1": "25.11.128.0/27", "mlx5_2": "25.11.128.32/27", "mlx5_3": "25.11.128.64/27"}
	if !maps.Equal(rails, want) || len(notes) != 0 {
		t.Fatalf("rails %v, notes %q; want %v: the management NIC and the InfiniBand HCA on none", rails, notes, want)
	}
	for _, r := range rails {
		if len(r) > config.MaxRailName {
			t.Errorf("rail %q is longer than a DRA string attribute holds", r)
		}
	}
}

// The config's rail wins over the subnet, and names what the subnet rule
// never does: an InfiniBand HCA, the default-route HCA.
func TestConfiguredRailWins(t *testing.T) {
	cfg := config.Topology{Rails: []config.Rail{
		{Rail: "rail-a", IBDev: "mlx5_1"},
		{Rail: "rail-b", NetDev: "eth[23]", PCI: "0000:70:*"},
		{Rail: "rail-c", IBDev: "mlx5_3"}, // an earlier entry matched mlx5_3
		{Rail: "ib-rail", PCI: "0000:a0:00.0"},
		{Rail: "frontend", IBDev: "mlx5_0"},
	}}
	rails, _ := Rails(railNode(), cfg)
	want := map[string]string{"mlx5_0": "frontend", "mlx5_1": "rail-a", "mlx5_2": "25.11.128.32/27", "mlx5_3": "rail-b", "mlx5_ib0": "ib-rail"}
	if !maps.Equal(rails, want) {
		t.Fatalf("rails %v, want %v", rails, want)
	}
}

// Two HCAs in one subnet: the subnet tells no rail apart, so none gets one
// from it, and a note names them; the config still names rails.
func TestSharedSubnetNamesNoRail(t *testing.T) {
	node := railNode()
	node.NetDevs[3] = netdev("eth3", "25.11.128.3/27") // mlx5_3 beside mlx5_1
	rails, notes := Rails(node, config.Topology{})
	if len(rails) != 0 {
		t.Errorf("rails %v, want none", rails)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "mlx5_1 and mlx5_3 share the subnet 25.11.128.0/27") {
		t.Errorf("notes %q", notes)
	}
	rails, _ = Rails(node, config.Topology{Rails: []config.Rail{{Rail: "r3", IBDev: "mlx5_3"}}})
	if want := map[string]string{"mlx5_1": "25.11.128.0/27", "mlx5_2": "25.11.128.32/27", "mlx5_3": "r3"}; !maps.Equal(rails, want) {
		t.Errorf("with mlx5_3 named: %v, want %v", rails, want)
	}
}

// InfiniBand gets a rail from the config alone, even with IPoIB addresses
// in subnets of their own.
func TestInfiniBandNeedsConfig(t *testing.T) {
	ib := func(name, netdev string) model.Device {
		return model.Device{Name: name, Ports: []model.Port{{Number: 1, LinkLayer: model.LinkLayerInfiniBand, NetDev: netdev}}}
	}
	node := model.Node{
		Devices: []model.Device{ib("mlx5_0", "ib0"), ib("mlx5_1", "ib1")},
		NetDevs: []model.NetDev{netdev("ib0", "192.168.0.5/24"), netdev("ib1", "192.168.1.5/24")},
	}
	if rails, notes := Rails(node, config.Topology{}); len(rails) != 0 || len(notes) != 0 {
		t.Errorf("rails %v, notes %q; want none", rails, notes)
	}
	rails, _ := Rails(node, config.Topology{Rails: []config.Rail{{Rail: "rail1", IBDev: "mlx5_1"}}})
	if want := map[string]string{"mlx5_1": "rail1"}; !maps.Equal(rails, want) {
		t.Errorf("rails %v, want %v", rails, want)
	}
}

// A VF is on its PF's rail, whatever its own address: its traffic leaves
// through the PF's port.
func TestVFOnItsPFsRail(t *testing.T) {
	node := railNode()
	vf := roce("mlx5_4", "eth1v0", "0000:54:00.2")
	vf.PhysFn = node.Devices[1].PCIAddress
	node.Devices = append(node.Devices, vf)
	node.NetDevs = append(node.NetDevs, netdev("eth1v0", "25.11.128.5/27")) // mlx5_1's subnet
	rails, notes := Rails(node, config.Topology{})
	if rails["mlx5_4"] != "25.11.128.0/27" || rails["mlx5_1"] != "25.11.128.0/27" || len(notes) != 0 {
		t.Errorf("rails %v, notes %q: the VF should share its PF's rail", rails, notes)
	}
	rails, _ = Rails(node, config.Topology{Rails: []config.Rail{{Rail: "r1", IBDev: "mlx5_1"}}})
	if rails["mlx5_4"] != "r1" {
		t.Errorf("VF on %q, want its PF's configured rail r1", rails["mlx5_4"])
	}
}

// An HCA without an IPv4 address, or in two subnets, has no subnet rail;
// the others keep theirs, and the notes say why.
func TestUnclearSubnetsNoted(t *testing.T) {
	node := railNode()
	node.NetDevs[2] = netdev("eth2")
	node.NetDevs[3] = netdev("eth3", "25.11.128.66/27", "25.11.129.66/27")
	rails, notes := Rails(node, config.Topology{})
	if want := map[string]string{"mlx5_1": "25.11.128.0/27"}; !maps.Equal(rails, want) {
		t.Errorf("rails %v, want %v", rails, want)
	}
	want := []string{
		"mlx5_2 has no IPv4 address: no rail from its subnet",
		"mlx5_3 is in several IPv4 subnets (25.11.128.64/27, 25.11.129.64/27): no rail from its subnet",
	}
	if !slices.Equal(notes, want) {
		t.Errorf("notes %q, want %q", notes, want)
	}
}
