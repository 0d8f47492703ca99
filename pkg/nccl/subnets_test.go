package nccl

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// railNode is seed 002's addressing: the management NIC mlx5_0 in
// 10.0.60.0/24 with the default route, and mlx5_1..8 each in a /27 of its
// own, all eight inside 25.11.128.0/24.
func railNode() model.Node {
	n := model.Node{DefaultRouteNetDev: "eth0"}
	add := func(i int, addr string) {
		p := netip.MustParsePrefix(addr)
		nd := fmt.Sprintf("eth%d", i)
		n.Devices = append(n.Devices, model.Device{Name: fmt.Sprintf("mlx5_%d", i), Ports: []model.Port{roce("ACTIVE", nd, 4, mlx5Table(p.Addr().String()))}})
		n.NetDevs = append(n.NetDevs, model.NetDev{Name: nd, Addrs: []netip.Prefix{p}})
	}
	add(0, "10.0.60.3/24")
	for i := 1; i <= 8; i++ {
		add(i, fmt.Sprintf("25.11.128.%d/27", 2+32*(i-1)))
	}
	return n
}

func vars(s Settings) string { return fmt.Sprint(s.Vars) }

// HCAs in subnets of their own: subnet-aware routing, with the /27 NCCL
// must compare under (its default /24 holds all eight).
func TestSubnetAwareRoutingAcrossSubnets(t *testing.T) {
	s := Compute(railNode(), config.Default().NCCL, Scope{})
	want := []Var{
		{"NCCL_IB_DISABLE", "0"},
		{"NCCL_IB_HCA", "mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1,mlx5_8:1"},
		{"NCCL_IB_GID_INDEX", "3"},
		{"NCCL_IB_SUBNET_AWARE_ROUTING", "1"},
		{"NCCL_IB_SUBNET_PREFIX_LEN", "27"},
		{"NCCL_SOCKET_IFNAME", "eth0"},
	}
	if vars(s) != fmt.Sprint(want) || len(s.Warnings) != 0 {
		t.Fatalf("vars %v %q\nwant %v", s.Vars, s.Warnings, want)
	}
	// A container given two of them: the same.
	s = Compute(railNode(), config.Default().NCCL, Scope{Devices: []string{"mlx5_2", "mlx5_7"}})
	if v, _ := s.Get("NCCL_IB_SUBNET_AWARE_ROUTING"); v != "1" {
		t.Fatalf("two HCAs on two rails: %v", s.Vars)
	}
	// The site's word is final.
	cfg := config.Default().NCCL
	cfg.Tunables = map[string]string{"NCCL_IB_SUBNET_AWARE_ROUTING": "0"}
	if v, _ := Compute(railNode(), cfg, Scope{}).Get("NCCL_IB_SUBNET_AWARE_ROUTING"); v != "0" {
		t.Fatalf("tunable did not win: %q", v)
	}
}

// Subnets of NCCL's default length need no NCCL_IB_SUBNET_PREFIX_LEN.
func TestSubnetAwareRoutingDefaultPrefix(t *testing.T) {
	node := railNode()
	for i := 1; i <= 8; i++ {
		addr := netip.MustParsePrefix(fmt.Sprintf("10.%d.0.5/24", i))
		node.Devices[i].Ports[0] = roce("ACTIVE", node.NetDevs[i].Name, 4, mlx5Table(addr.Addr().String()))
		node.NetDevs[i].Addrs = []netip.Prefix{addr}
	}
	s := Compute(node, config.Default().NCCL, Scope{})
	if v, _ := s.Get("NCCL_IB_SUBNET_AWARE_ROUTING"); v != "1" {
		t.Fatalf("vars %v", s.Vars)
	}
	if _, ok := s.Get("NCCL_IB_SUBNET_PREFIX_LEN"); ok {
		t.Fatalf("/24 is NCCL's default, want no NCCL_IB_SUBNET_PREFIX_LEN: %v", s.Vars)
	}
}

// No subnet-aware routing for one HCA, HCAs in one subnet, InfiniBand,
// or subnets not known.
func TestNoSubnetAwareRouting(t *testing.T) {
	oneSubnet := railNode()
	for i := range oneSubnet.NetDevs[1:] {
		p := oneSubnet.NetDevs[i+1].Addrs[0]
		oneSubnet.NetDevs[i+1].Addrs[0] = netip.PrefixFrom(p.Addr(), 24)
	}
	ib := func(name string) model.Device {
		return model.Device{Name: name, Ports: []model.Port{{Number: 1, State: "ACTIVE", LinkLayer: model.LinkLayerInfiniBand, GIDTableLen: 1,
			GIDs: []model.GID{{Index: 0, GID: netip.MustParseAddr("fe80::1"), Type: model.GIDTypeIB}}}}}
	}
	unknown := railNode()
	unknown.NetDevs = nil
	for name, c := range map[string]struct {
		node  model.Node
		scope Scope
	}{
		"one HCA":                  {railNode(), Scope{Devices: []string{"mlx5_3"}}},
		"one subnet (/24)":         {oneSubnet, Scope{}},
		"InfiniBand only":          {model.Node{Devices: []model.Device{ib("mlx5_0"), ib("mlx5_1")}}, Scope{}},
		"no netdev holds the GIDs": {unknown, Scope{}},
	} {
		s := Compute(c.node, config.Default().NCCL, c.scope)
		if _, ok := s.Get("NCCL_IB_SUBNET_AWARE_ROUTING"); ok {
			t.Errorf("%s: %v", name, s.Vars)
		}
		if _, ok := s.Get("NCCL_IB_SUBNET_PREFIX_LEN"); ok {
			t.Errorf("%s: %v", name, s.Vars)
		}
	}
}

// In a pod's own namespace, the subnets are those of the addresses it
// holds (its sub-interfaces'), where NCCL picks its GIDs.
func TestSubnetAwareRoutingInAContainerNamespace(t *testing.T) {
	node := railNode()
	// The pod's macvlans on eth1 and eth2: their addresses join the HCAs'
	// GID tables, and the pod's netdevs (the hook's node) hold them.
	for i, a := range []string{"25.11.128.20/27", "25.11.128.52/27"} {
		p := netip.MustParsePrefix(a)
		port := &node.Devices[i+1].Ports[0]
		port.GIDTableLen = 6
		port.GIDs = append(port.GIDs, model.GID{Index: 4, GID: netip.MustParseAddr("::ffff:" + p.Addr().String()), Type: model.GIDTypeRoCEv1},
			model.GID{Index: 5, GID: netip.MustParseAddr("::ffff:" + p.Addr().String()), Type: model.GIDTypeRoCEv2})
	}
	node.NetDevs = []model.NetDev{
		{Name: "net1", Addrs: []netip.Prefix{netip.MustParsePrefix("25.11.128.20/27")}},
		{Name: "net2", Addrs: []netip.Prefix{netip.MustParsePrefix("25.11.128.52/27")}},
	}
	held := []netip.Addr{netip.MustParseAddr("25.11.128.20"), netip.MustParseAddr("25.11.128.52")}
	s := Compute(node, config.Default().NCCL, Scope{Devices: []string{"mlx5_1", "mlx5_2"}, HeldAddrs: held})
	if v, _ := s.Get("NCCL_IB_SUBNET_AWARE_ROUTING"); v != "1" {
		t.Fatalf("vars %v %q", s.Vars, s.Warnings)
	}
	if v, _ := s.Get("NCCL_IB_SUBNET_PREFIX_LEN"); v != "27" {
		t.Fatalf("NCCL_IB_SUBNET_PREFIX_LEN %q, want 27", v)
	}
}

// Prefix lengths that differ cannot be one NCCL_IB_SUBNET_PREFIX_LEN: a
// warning says so, and nothing is set.
func TestSubnetAwareRoutingPrefixLengthsDisagree(t *testing.T) {
	node := railNode()
	node.NetDevs[2].Addrs[0] = netip.PrefixFrom(node.NetDevs[2].Addrs[0].Addr(), 28)
	s := Compute(node, config.Default().NCCL, Scope{Devices: []string{"mlx5_1", "mlx5_2", "mlx5_3"}})
	if _, ok := s.Get("NCCL_IB_SUBNET_AWARE_ROUTING"); ok {
		t.Fatalf("vars %v", s.Vars)
	}
	if len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "/27 on mlx5_1:1,mlx5_3:1; /28 on mlx5_2:1") {
		t.Fatalf("warnings %q", s.Warnings)
	}
}

// IPv6 GIDs are compared by their /64, whatever the netdev's prefix.
func TestSubnetAwareRoutingIPv6(t *testing.T) {
	node := railNode()
	for i := 1; i <= 2; i++ {
		table := mlx5Table(fmt.Sprintf("25.11.128.%d", 2+32*(i-1)))
		table[4] = entry{fmt.Sprintf("2001:db8:%d::5", i), model.GIDTypeRoCEv1}
		table[5] = entry{fmt.Sprintf("2001:db8:%d::5", i), model.GIDTypeRoCEv2}
		node.Devices[i].Ports[0] = roce("ACTIVE", node.NetDevs[i].Name, 6, table)
	}
	cfg := config.Default().NCCL
	cfg.AddrFamily = config.AddrFamilyIPv6
	s := Compute(node, cfg, Scope{Devices: []string{"mlx5_1", "mlx5_2"}})
	if v, _ := s.Get("NCCL_IB_SUBNET_AWARE_ROUTING"); v != "1" {
		t.Fatalf("vars %v %q", s.Vars, s.Warnings)
	}
	if _, ok := s.Get("NCCL_IB_SUBNET_PREFIX_LEN"); ok {
		t.Fatalf("IPv6 needs no NCCL_IB_SUBNET_PREFIX_LEN: %v", s.Vars)
	}
}
