package podnet

import (
	"net/netip"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, raw, wantErr string
	}{
		{"ok", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","mode":"move","interfaceName":"roce0","addresses":["10.0.61.20/24"],"mtu":4200,"routes":[{"destination":"10.0.0.0/8","gateway":"10.0.61.1"}]}`, ""},
		{"unknown field", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","ipam":"dhcp"}`, `unknown field "ipam"`},
		{"wrong kind", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"NetworkConfig"}`, `kind "NetworkConfig"`},
		{"bad mode", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","mode":"bridge"}`, `mode "bridge"`},
		{"bad address", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","addresses":["10.0.61.300/24"]}`, `addresses[0] "10.0.61.300/24"`},
		{"no prefix length", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","addresses":["10.0.61.3"]}`, `addresses[0]`},
		{"loopback", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","addresses":["127.0.0.2/8"]}`, `not a unicast address`},
		{"duplicate", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","addresses":["10.0.0.2/24","10.0.0.2/16"]}`, `the same address as addresses[0]`},
		{"long name", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","interfaceName":"a-very-long-name0"}`, `IFNAMSIZ`},
		{"mtu", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","mtu":20}`, `mtu 20`},
		{"route family", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","routes":[{"destination":"10.0.0.0/8","gateway":"fd00::1"}]}`, `routes[0]: gateway fd00::1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.raw))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Decode: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Decode: error %v, want one with %q", err, tc.wantErr)
			}
		})
	}
}

func TestMergeClaimOverridesClass(t *testing.T) {
	class := Config{Mode: ModeSubInterface, MTU: 1500, InterfaceName: "net1"}
	claim := Config{MTU: 4200, Addresses: []string{"10.0.61.9/24"}}
	got := Merge(class, claim)
	if got.Mode != ModeSubInterface || got.MTU != 4200 || got.InterfaceName != "net1" || len(got.Addresses) != 1 {
		t.Fatalf("Merge = %+v", got)
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestPlan(t *testing.T) {
	eth3 := Device{IBDev: "mlx5_3", NetDev: "eth3", RoCE: true, Addrs: []netip.Prefix{pfx("10.0.63.3/24")}}
	shared, kept, ib := eth3, eth3, eth3
	shared.Shared = true
	kept.Kept = "it carries the node's default route"
	ib.RoCE = false
	pool := func() *Pool {
		return &Pool{Ranges: map[string][]Range{"eth3": {{netip.MustParseAddr("10.0.63.200"), netip.MustParseAddr("10.0.63.201")}}}}
	}
	for _, tc := range []struct {
		name     string
		dev      Device
		cfg      Config
		wantMode Mode
		wantAddr string
		wantErr  string
	}{
		{"exclusive moves", eth3, Config{}, ModeMove, "", ""},
		{"shared gets a sub-interface", shared, Config{}, ModeSubInterface, "10.0.63.200/24", ""},
		{"kept gets a sub-interface", kept, Config{}, ModeSubInterface, "10.0.63.200/24", ""},
		{"static address", shared, Config{Addresses: []string{"10.0.63.50/24"}}, ModeSubInterface, "10.0.63.50/24", ""},
		{"move of shared refused", shared, Config{Mode: ModeMove}, "", "", "shared with other pods"},
		{"move of kept refused", kept, Config{Mode: ModeMove}, "", "", "default route"},
		{"none", eth3, Config{Mode: ModeNone}, "", "", ""},
		{"infiniband", ib, Config{}, "", "", ""},
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
		})
	}
}

func TestPoolAllocate(t *testing.T) {
	r, err := ParseRange("10.0.63.200-10.0.63.202")
	if err != nil {
		t.Fatal(err)
	}
	host := []netip.Prefix{pfx("10.0.63.201/24")}
	p := &Pool{Ranges: map[string][]Range{"eth3": {r}}, InUse: map[netip.Addr]bool{netip.MustParseAddr("10.0.63.200"): true}}
	got, err := p.Allocate("eth3", host)
	if err != nil || got.String() != "10.0.63.202/24" {
		t.Fatalf("Allocate = %v, %v; want 10.0.63.202/24 (200 in use, 201 the host's)", got, err)
	}
	if _, err := p.Allocate("eth3", host); err == nil || !strings.Contains(err.Error(), "used up") {
		t.Fatalf("Allocate of a full range: %v", err)
	}
	if _, err := p.Allocate("eth4", host); err == nil || !strings.Contains(err.Error(), "no range for eth4") {
		t.Fatalf("Allocate without a range: %v", err)
	}
	p2 := &Pool{Ranges: map[string][]Range{"eth3": {{netip.MustParseAddr("192.168.0.1"), netip.MustParseAddr("192.168.0.1")}}}}
	if _, err := p2.Allocate("eth3", host); err == nil || !strings.Contains(err.Error(), "inside its subnets") {
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
		got, err := p.Allocate("eth3", []netip.Prefix{pfx(host)})
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
