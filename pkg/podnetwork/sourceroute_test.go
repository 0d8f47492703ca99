package podnetwork

import (
	"net/netip"
	"reflect"
	"testing"
)

func TestPlanSourceRouting(t *testing.T) {
	addrs := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, a := range s {
			out = append(out, pfx(a))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   [][]netip.Prefix
		want []*SourceRouting
	}{
		{"one interface", [][]netip.Prefix{addrs("10.0.60.201/24")}, []*SourceRouting{nil}},
		{"different subnets", [][]netip.Prefix{addrs("10.0.61.201/24"), addrs("10.0.62.201/24")}, []*SourceRouting{nil, nil}},
		{
			// Seed 004's layout: every rail in one subnet.
			"one subnet",
			[][]netip.Prefix{addrs("10.0.60.201/24"), addrs("10.0.60.202/24"), addrs("10.0.60.203/24")},
			[]*SourceRouting{
				{Table: 1000, Priority: 1000, From: addrs("10.0.60.201/24")},
				{Table: 1001, Priority: 1001, From: addrs("10.0.60.202/24")},
				{Table: 1002, Priority: 1002, From: addrs("10.0.60.203/24")},
			},
		},
		{
			// The table follows the position in the plan, also where an
			// interface before it needs none.
			"position, not count",
			[][]netip.Prefix{addrs("192.168.1.5/24"), addrs("10.0.60.201/24"), addrs("10.0.60.202/24")},
			[]*SourceRouting{nil, {Table: 1001, Priority: 1001, From: addrs("10.0.60.201/24")}, {Table: 1002, Priority: 1002, From: addrs("10.0.60.202/24")}},
		},
		{
			// A /16 holds the other's /24: the main table's longest match
			// would send the /16 interface's traffic to that /24 away.
			"overlapping subnets",
			[][]netip.Prefix{addrs("10.0.0.5/16"), addrs("10.0.60.201/24")},
			[]*SourceRouting{{Table: 1000, Priority: 1000, From: addrs("10.0.0.5/16")}, {Table: 1001, Priority: 1001, From: addrs("10.0.60.201/24")}},
		},
		{
			// Only the addresses that share a subnet get a rule; IPv6 ones
			// as IPv4 ones; link-local ones never.
			"per address and family",
			[][]netip.Prefix{
				addrs("10.0.60.201/24", "fd00:60::201/64", "fe80::1/64"),
				addrs("10.0.61.202/24", "fd00:60::202/64", "fe80::2/64"),
			},
			[]*SourceRouting{
				{Table: 1000, Priority: 1000, From: addrs("fd00:60::201/64")},
				{Table: 1001, Priority: 1001, From: addrs("fd00:60::202/64")},
			},
		},
		{"no addresses", [][]netip.Prefix{nil, addrs("10.0.60.201/24")}, []*SourceRouting{nil, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PlanSourceRouting(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("PlanSourceRouting(%v):\n got %s\nwant %s", tc.in, show(got), show(tc.want))
			}
		})
	}
}

func show(rs []*SourceRouting) []any {
	out := make([]any, len(rs))
	for i, r := range rs {
		if r != nil {
			out[i] = *r
		}
	}
	return out
}
