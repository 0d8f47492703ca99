package nccl

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// efaPort is an AWS EFA port as discovery reads it: ACTIVE, link layer
// unspecified (sysfs "Unknown"), one GID (the device's address), no netdev.
func efaPort() model.Port {
	return model.Port{Number: 1, State: model.PortActive, LinkLayer: model.LinkLayerUnspecified, GIDTableLen: 1,
		GIDs: []model.GID{{Index: 0, GID: netip.MustParseAddr("fe80::4c6:41ff:fe9a:e3f6"), Type: model.GIDTypeRoCEv1}}}
}

// NCCL's IB transport skips a port that is neither InfiniBand nor
// Ethernet, so an EFA node gets no NCCL_IB_* at all: naming EFA ports in
// NCCL_IB_HCA would only leave NCCL's IB transport without a device.
func TestEFAPortsGetNoIBSettings(t *testing.T) {
	node := model.Node{DefaultRouteNetDev: "eth0"}
	for _, name := range []string{"rdmap79s0", "rdmap80s0"} {
		node.Devices = append(node.Devices, model.Device{Name: name, PCIVendor: "0x1d0f", PCIDevice: "0xefa1", Ports: []model.Port{efaPort()}})
	}
	s := Compute(node, config.Default().NCCL, Scope{})
	for _, v := range s.Vars {
		if strings.HasPrefix(v.Name, "NCCL_IB_") {
			t.Errorf("EFA node sets %s=%s", v.Name, v.Value)
		}
	}
	if v, _ := s.Get("NCCL_SOCKET_IFNAME"); v != "eth0" {
		t.Errorf("NCCL_SOCKET_IFNAME = %q, want eth0", v)
	}
	if len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "2 of link layer unspecified") {
		t.Errorf("warnings %q, want one saying why NCCL_IB_HCA is not set", s.Warnings)
	}

	// Named in the include list, it is still left out, and said so.
	cfg := config.Default().NCCL
	cfg.IncludeHCAs = []string{"rdmap79s0"}
	s = Compute(node, cfg, Scope{})
	if _, ok := s.Get("NCCL_IB_HCA"); ok || !strings.Contains(strings.Join(s.Warnings, "\n"), "rdmap79s0:1 has link layer unspecified") {
		t.Errorf("include list: vars %v warnings %q", s.Vars, s.Warnings)
	}

	// Beside RoCE HCAs, only those are NCCL's.
	node.Devices = append(node.Devices, model.Device{Name: "mlx5_1", Ports: []model.Port{roce("ACTIVE", "eth1", 4, mlx5Table("25.11.128.2"))}})
	s = Compute(node, config.Default().NCCL, Scope{})
	if hca, _ := s.Get("NCCL_IB_HCA"); hca != "mlx5_1:1" {
		t.Errorf("mixed node: NCCL_IB_HCA = %q, want mlx5_1:1", hca)
	}
	if idx, _ := s.Get("NCCL_IB_GID_INDEX"); idx != "3" || len(s.Warnings) != 0 {
		t.Errorf("mixed node: NCCL_IB_GID_INDEX = %q, warnings %q", idx, s.Warnings)
	}
}
