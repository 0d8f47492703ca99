package nccl

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// erdmaIWARP is an Alibaba eRDMA device in iWARP mode as the kernel's
// erdma driver shows it: node type RNIC, one port of link layer Ethernet
// (ib_core's rule for an RNIC without get_link_layer), a GID table of one
// entry that the kernel's non-RoCE GID cache fills from the driver's
// query_gid, which puts the port's MAC in the first six bytes and zeroes
// the rest (sysfs types "IB/RoCE v1").
func erdmaIWARP(name, netdev string) model.Device {
	return model.Device{Name: name, Driver: "erdma", NodeType: "4: RNIC", Ports: []model.Port{{
		Number: 1, State: model.PortActive, LinkLayer: model.LinkLayerEthernet, NetDev: netdev, GIDTableLen: 1,
		GIDs: []model.GID{{Index: 0, GID: netip.MustParseAddr("16:3e12:3456::"), Type: model.GIDTypeRoCEv1}},
	}}}
}

// erdmaRoCEv2 is the same device in RoCE v2 mode (the in-tree driver on
// hardware that reports it, or Alibaba's own driver's compat mode): node
// type CA, port capability RoCE UDP encapsulation alone, so ib_core keeps
// RoCE v2 entries alone in its table of 16: the link-local GID of the MAC,
// then the netdev's IPv4 address.
func erdmaRoCEv2(name, netdev, ipv4 string) model.Device {
	return model.Device{Name: name, Driver: "erdma", NodeType: "1: CA", Ports: []model.Port{roce(model.PortActive, netdev, 16, map[int]entry{
		0: {"fe80::216:3eff:fe12:3456", model.GIDTypeRoCEv2},
		1: {"::ffff:" + ipv4, model.GIDTypeRoCEv2},
	})}}
}

// An eRDMA port in iWARP mode is NCCL's (link layer Ethernet) but has one
// GID, the MAC's, which NCCL picks by itself (its loop over a one-entry
// table starts and ends at index 0): no NCCL_IB_GID_INDEX, no warning that
// it lacks a RoCE v2 GID, and it stays in NCCL_IB_HCA in a container's
// namespace, whose addresses no iWARP GID carries. In RoCE v2 mode the
// RoCE rule is NCCL's own and picks the IPv4 entry, index 1 (what Alibaba
// Cloud's PAI presets for eRDMA).
func TestERDMAGIDIndex(t *testing.T) {
	held := []netip.Addr{netip.MustParseAddr("10.0.0.5")}
	for _, scope := range []Scope{{}, {HeldAddrs: held}} {
		for _, family := range []config.AddrFamily{config.AddrFamilyIPv4, config.AddrFamilyIPv6} {
			cfg := config.Default().NCCL
			cfg.AddrFamily = family
			node := model.Node{Devices: []model.Device{erdmaIWARP("erdma_0", "eth0"), erdmaIWARP("erdma_1", "eth1")}, DefaultRouteNetDev: "bond0"}
			s := Compute(node, cfg, scope)
			if hca, _ := s.Get("NCCL_IB_HCA"); hca != "erdma_0:1,erdma_1:1" {
				t.Errorf("iWARP, %s, held %v: NCCL_IB_HCA = %q", family, scope.HeldAddrs, hca)
			}
			if idx, ok := s.Get("NCCL_IB_GID_INDEX"); ok || len(s.Warnings) != 0 {
				t.Errorf("iWARP, %s, held %v: NCCL_IB_GID_INDEX %q (set %v), warnings %q; want none", family, scope.HeldAddrs, idx, ok, s.Warnings)
			}
		}
	}

	node := model.Node{Devices: []model.Device{erdmaRoCEv2("erdma_0", "eth1", "10.0.0.5")}, DefaultRouteNetDev: "bond0", NetDevs: []model.NetDev{{Name: "eth1", Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24")}}}}
	for _, scope := range []Scope{{}, {HeldAddrs: held}} {
		s := Compute(node, config.Default().NCCL, scope)
		if idx, _ := s.Get("NCCL_IB_GID_INDEX"); idx != "1" || len(s.Warnings) != 0 {
			t.Errorf("RoCE v2 mode, held %v: NCCL_IB_GID_INDEX = %q, warnings %q; want 1", scope.HeldAddrs, idx, s.Warnings)
		}
	}
}

// Beside a RoCE HCA whose pick is 3, an iWARP port would be asked for
// index 3 too (one value per process): the RoCE pick stands, and a warning
// names the iWARP port.
func TestIWARPBesideRoCE(t *testing.T) {
	node := model.Node{Devices: []model.Device{
		erdmaIWARP("erdma_0", "eth0"),
		{Name: "mlx5_1", NodeType: "1: CA", Ports: []model.Port{roce(model.PortActive, "eth1", 4, mlx5Table("10.1.0.5"))}},
	}, DefaultRouteNetDev: "bond0"}
	s := Compute(node, config.Default().NCCL, Scope{HeldAddrs: []netip.Addr{netip.MustParseAddr("10.1.0.5")}})
	if hca, _ := s.Get("NCCL_IB_HCA"); hca != "erdma_0:1,mlx5_1:1" {
		t.Errorf("NCCL_IB_HCA = %q: the iWARP port was dropped for holding no container address", hca)
	}
	if idx, _ := s.Get("NCCL_IB_GID_INDEX"); idx != "3" {
		t.Errorf("NCCL_IB_GID_INDEX = %q, want mlx5_1's 3", idx)
	}
	if len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "iWARP ports erdma_0:1 hold GID index 0 alone") {
		t.Errorf("warnings %q, want one naming erdma_0:1", s.Warnings)
	}
}

// The node type says iWARP: "4: RNIC" as sysfs prints it; "1: CA" and an
// unread one do not.
func TestDeviceIWARP(t *testing.T) {
	for nodeType, want := range map[string]bool{"4: RNIC": true, "1: CA": false, "": false, "14: x": false} {
		if got := (model.Device{NodeType: nodeType}).IWARP(); got != want {
			t.Errorf("node type %q: IWARP %v, want %v", nodeType, got, want)
		}
	}
}
