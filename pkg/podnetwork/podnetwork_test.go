package podnetwork

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestPlan(t *testing.T) {
	eth3 := Device{IBDev: "mlx5_3", NetDev: "eth3", RoCE: true, Addrs: []netip.Prefix{pfx("10.0.63.3/24")}}
	shared, kept, ib, keepsAddrs := eth3, eth3, eth3, eth3
	shared.Shared = true
	keepsAddrs.MoveKeepsAddresses = true
	kept.Kept = "it carries the node's default route"
	ib.RoCE = false
	pool := func() *Pool {
		return &Pool{
			Ranges:  map[string][]Range{"eth3": {{netip.MustParseAddr("10.0.63.200"), netip.MustParseAddr("10.0.63.201")}}},
			Managed: []Range{{netip.MustParseAddr("10.0.63.128"), netip.MustParseAddr("10.0.63.191")}},
		}
	}
	for _, tc := range []struct {
		name     string
		dev      Device
		cfg      v1alpha1.PodNetworkConfig
		wantMode v1alpha1.Mode
		wantAddr string
		wantErr  string
	}{
		// Round 3, M3: the pod never gets the node's 10.0.63.3 by default.
		{"exclusive moves with an address of the range", eth3, v1alpha1.PodNetworkConfig{}, v1alpha1.ModeMove, "10.0.63.200/24", ""},
		{"exclusive moves with the node's, opted in", keepsAddrs, v1alpha1.PodNetworkConfig{}, v1alpha1.ModeMove, "", ""},
		{"shared gets a sub-interface", shared, v1alpha1.PodNetworkConfig{}, v1alpha1.ModeSubInterface, "10.0.63.200/24", ""},
		{"kept gets a sub-interface", kept, v1alpha1.PodNetworkConfig{}, v1alpha1.ModeSubInterface, "10.0.63.200/24", ""},
		{"static address", shared, v1alpha1.PodNetworkConfig{Addresses: []string{"10.0.63.50/24"}}, v1alpha1.ModeSubInterface, "10.0.63.50/24", ""},
		// Round 3: an allowedPrefixes overlapping the ranges let a claim
		// take an address the allocator hands to another pod.
		{"static address in the node's range", shared, v1alpha1.PodNetworkConfig{Addresses: []string{"10.0.63.201/24"}}, "", "", "10.0.63.201 lies in 10.0.63.200-10.0.63.201"},
		{"static address in a cluster pool", eth3, v1alpha1.PodNetworkConfig{Mode: v1alpha1.ModeMove, Addresses: []string{"10.0.63.140/24"}}, "", "", "lies in 10.0.63.128-10.0.63.191"},
		{"move of shared refused", shared, v1alpha1.PodNetworkConfig{Mode: v1alpha1.ModeMove}, "", "", "shared with other pods"},
		{"move of kept refused", kept, v1alpha1.PodNetworkConfig{Mode: v1alpha1.ModeMove}, "", "", "default route"},
		{"none", eth3, v1alpha1.PodNetworkConfig{Mode: v1alpha1.ModeNone}, "", "", ""},
		{"infiniband", ib, v1alpha1.PodNetworkConfig{}, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, ok, err := Plan(tc.dev, tc.cfg, pool())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Plan: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ok != (tc.wantMode != "") || a.Mode != tc.wantMode {
				t.Fatalf("Plan = %+v, %v; want mode %q", a, ok, tc.wantMode)
			}
			if ok && a.PodInterface != "eth3" {
				t.Errorf("pod interface %q, want the netdev's name", a.PodInterface)
			}
			if tc.wantAddr != "" && (len(a.Addrs) != 1 || a.Addrs[0].String() != tc.wantAddr) {
				t.Errorf("addresses %v, want %s", a.Addrs, tc.wantAddr)
			}
			if tc.wantAddr == "" && a.Addrs != nil {
				t.Errorf("addresses %v planned, want the netdev's own", a.Addrs)
			}
		})
	}
}

func TestPoolAllocate(t *testing.T) {
	r, err := ParseRange("10.0.63.200-10.0.63.202")
	if err != nil {
		t.Fatal(err)
	}
	host := model.NetDev{Name: "eth3", Addrs: []netip.Prefix{pfx("10.0.63.201/24")}}
	p := &Pool{Ranges: map[string][]Range{"eth3": {r}}, InUse: map[netip.Addr]bool{netip.MustParseAddr("10.0.63.200"): true}}
	got, err := p.Allocate(host)
	if err != nil || got.String() != "10.0.63.202/24" {
		t.Fatalf("Allocate = %v, %v; want 10.0.63.202/24 (200 in use, 201 the host's)", got, err)
	}
	if _, err := p.Allocate(host); err == nil || !strings.Contains(err.Error(), "used up") {
		t.Fatalf("Allocate of a full range: %v", err)
	}
	if _, err := p.Allocate(model.NetDev{Name: "eth4", Addrs: host.Addrs}); err == nil || !strings.Contains(err.Error(), "no range for eth4") {
		t.Fatalf("Allocate without a range: %v", err)
	}
	p2 := &Pool{Ranges: map[string][]Range{"eth3": {{netip.MustParseAddr("192.168.0.1"), netip.MustParseAddr("192.168.0.1")}}}}
	if _, err := p2.Allocate(host); err == nil || !strings.Contains(err.Error(), "inside its subnets") {
		t.Fatalf("Allocate outside the netdev's subnets: %v", err)
	}
}

// TestPoolAllocateTakesTheBlockOfItsSubnet: one config for two nodes whose
// eth3 are in different subnets; each node allocates from its own block.
func TestPoolAllocateTakesTheBlockOfItsSubnet(t *testing.T) {
	ranges, err := ParseRanges(map[string]string{"eth3": "10.0.63.200-10.0.63.202, 10.0.64.200-10.0.64.202"})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]string{"10.0.63.3/24": "10.0.63.200/24", "10.0.64.3/24": "10.0.64.200/24"} {
		p := &Pool{Ranges: ranges}
		got, err := p.Allocate(model.NetDev{Name: "eth3", Addrs: []netip.Prefix{pfx(host)}})
		if err != nil || got.String() != want {
			t.Errorf("node with eth3 %s: Allocate = %v, %v; want %s", host, got, err, want)
		}
	}
	if _, err := ParseRanges(map[string]string{"eth3": "10.0.63.0/24,10.0.63.100-10.0.63.110"}); err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("overlapping blocks of one netdev: %v", err)
	}
}

func TestParseRanges(t *testing.T) {
	r, err := ParseRange("10.0.61.128/30")
	if err != nil || r.First.String() != "10.0.61.129" || r.Last.String() != "10.0.61.130" {
		t.Fatalf("ParseRange(/30) = %v, %v", r, err)
	}
	for _, bad := range []string{"10.0.61.5-10.0.61.1", "10.0.61.1-fd00::1", "nonsense", "10.0.61.1/32"} {
		if _, err := ParseRange(bad); err == nil {
			t.Errorf("ParseRange(%q) accepted", bad)
		}
	}
	_, err = ParseRanges(map[string]string{"eth1": "10.0.0.0/24", "eth2": "10.0.0.100-10.0.0.110"})
	if err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Fatalf("overlapping ranges: %v", err)
	}
}

// The node keeps a netdev it uses beyond its addresses (round 3, H2: an
// ordinary exclusive claim moved a bridge port, or the lower device of
// the node's VLAN, out of the node): a port of a bridge or bond, one the
// node's netdevs sit on, and a PF with VFs enabled (M3: its VFs serve
// others, and its settings outlive the pod). A claim's auto mode gives a sub-interface, an
// explicit move is refused with the reason, and an operator's movable
// list lifts it, but never for the default route.
func TestNodeKeepsStackedNetDevs(t *testing.T) {
	node := model.Node{
		DefaultRouteNetDev: "eth0",
		NetDevs: []model.NetDev{
			{Name: "eth0"}, {Name: "eth3", Master: "br0"}, {Name: "eth4", Uppers: []string{"eth4.100", "mv0"}}, {Name: "eth5"}, {Name: "eth6"},
			{Name: "eth7", Multipath: true}, {Name: "eth8", RouteTables: []int{100}},
		},
		Devices: []model.Device{
			{Name: "mlx5_0", Ports: []model.Port{{LinkLayer: model.LinkLayerEthernet, NetDev: "eth0"}}},
			{Name: "mlx5_3", Ports: []model.Port{{LinkLayer: model.LinkLayerEthernet, NetDev: "eth3"}}},
			{Name: "mlx5_4", Ports: []model.Port{{LinkLayer: model.LinkLayerEthernet, NetDev: "eth4"}}},
			{Name: "mlx5_5", Ports: []model.Port{{LinkLayer: model.LinkLayerEthernet, NetDev: "eth5"}}},
			{Name: "mlx5_6", NumVFs: 4, Ports: []model.Port{{LinkLayer: model.LinkLayerEthernet, NetDev: "eth6"}}},
			{Name: "mlx5_7", Ports: []model.Port{{LinkLayer: model.LinkLayerEthernet, NetDev: "eth7"}}},
			{Name: "mlx5_8", Ports: []model.Port{{LinkLayer: model.LinkLayerEthernet, NetDev: "eth8"}}},
		},
	}
	for _, tc := range []struct {
		ibdev, movable, want string
	}{
		{"mlx5_3", "", "it is a port of the node's br0"},
		{"mlx5_4", "", "the node's eth4.100, mv0 sit on it"},
		{"mlx5_5", "", ""},
		{"mlx5_6", "", "it is a physical function with 4 SR-IOV VFs enabled"},
		{"mlx5_6", "eth6", ""},
		{"mlx5_7", "", "a multipath route of the node has a path through it"},
		{"mlx5_8", "", "the node's policy routing tables [100] route through it"},
		{"mlx5_3", "eth3", ""},
		{"mlx5_0", "eth0", "it carries the node's default route"},
	} {
		facts := NodeFacts{Node: node, NodeIPsKnown: true}
		if tc.movable != "" {
			facts.Movable = []string{tc.movable}
		}
		dev := facts.Device(tc.ibdev, false)
		if dev.Kept != tc.want {
			t.Errorf("%s (movable %q): kept %q, want %q", tc.ibdev, tc.movable, dev.Kept, tc.want)
		}
		if tc.want == "" {
			continue
		}
		if _, err := resolveMode(dev, v1alpha1.ModeMove); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: a move: %v, want it refused because %s", tc.ibdev, err, tc.want)
		}
		if mode, err := resolveMode(dev, v1alpha1.ModeAuto); err != nil || mode != v1alpha1.ModeSubInterface {
			t.Errorf("%s: auto gives %q (%v), want a sub-interface", tc.ibdev, mode, err)
		}
	}
}

// Round 3, L3: a default name the pod cannot take (eth0, a name another
// attachment asked for, one its namespace holds) becomes the first free
// net<N>, in the attachments' order.
func TestNameInterfaces(t *testing.T) {
	names := func(as []Attachment) string {
		var out []string
		for _, a := range as {
			out = append(out, a.PodInterface)
		}
		return strings.Join(out, " ")
	}
	planned := func() []Attachment {
		return []Attachment{
			{HostNetDev: "eth0", PodInterface: "eth0", DefaultName: true},
			{HostNetDev: "eth2", PodInterface: "net1"},
			{HostNetDev: "eth3", PodInterface: "eth3", DefaultName: true},
			{HostNetDev: "rdmamv7", PodInterface: "rdmamv7", DefaultName: true},
		}
	}
	inPod := func(name string) bool { return name == "net2" || name == "eth3" }
	for _, tc := range []struct {
		name  string
		keep  bool
		taken func(string) bool
		want  string
	}{
		{"host names kept where the pod can take them", true, nil, "net2 net1 eth3 net3"},
		{"names the pod's namespace holds skipped", true, inPod, "net3 net1 net4 net5"},
		{"numbered", false, nil, "net2 net1 net3 net4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			as := planned()
			NameInterfaces(as, tc.keep, tc.taken)
			if got := names(as); got != tc.want {
				t.Errorf("names %q, want %q", got, tc.want)
			}
		})
	}
}
