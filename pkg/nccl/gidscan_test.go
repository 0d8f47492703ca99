package nccl

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// The pick on a table cut where GIDScanStop stops is the pick on the whole
// table, over random RoCE tables, held address sets and NCCL settings.
// Tables hold no loopback address, as the kernel gives lo's none.
func TestGIDScanStopKeepsNCCLsPick(t *testing.T) {
	addrs := []netip.Addr{
		netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.1.1"), netip.MustParseAddr("192.168.5.5"),
		netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("fe80::1"),
		netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"),
	}
	types := []model.GIDType{model.GIDTypeRoCEv1, model.GIDTypeRoCEv2, model.GIDTypeUnknown}
	configs := []config.NCCL{
		{RoCEVersion: 2},
		{RoCEVersion: 1},
		{RoCEVersion: 2, AddrFamily: config.AddrFamilyIPv6},
		{RoCEVersion: 2, AddrRange: config.AddrRange{Prefix: netip.MustParsePrefix("10.0.1.0/24")}},
	}
	rng := rand.New(rand.NewPCG(17, 2026))
	cut, whole := 0, 0
	for round := range 20000 {
		n := 1 + rng.IntN(12)
		port := model.Port{Number: 1, LinkLayer: model.LinkLayerEthernet, GIDTableLen: n}
		for i := range n {
			if rng.IntN(3) == 0 {
				continue // empty slot
			}
			a := addrs[rng.IntN(len(addrs)-2)] // not the loopback ones, last
			port.GIDs = append(port.GIDs, model.GID{Index: i, GID: gidOf(a), Type: types[rng.IntN(len(types))], NetDev: "eth0"})
		}
		held := []netip.Addr{} // a container's namespace: never nil
		for _, a := range addrs {
			if rng.IntN(3) == 0 {
				held = append(held, a)
			}
		}
		cfg := configs[rng.IntN(len(configs))]
		stop := GIDScanStop(cfg, held)
		read := port
		read.GIDs = nil
		for _, g := range port.GIDs {
			read.GIDs = append(read.GIDs, g)
			if stop(port, read.GIDs) {
				break
			}
		}
		cut += len(read.GIDs)
		whole += len(port.GIDs)
		rule := gidRule(cfg, Scope{HeldAddrs: held})
		wantIdx, wantOK := SelectGIDIndex(port, rule)
		gotIdx, gotOK := SelectGIDIndex(read, rule)
		if gotIdx != wantIdx || gotOK != wantOK {
			t.Fatalf("round %d, %+v held %v: pick on the cut table (%d GIDs) %d/%v, on the whole (%d) %d/%v\n%+v",
				round, cfg, held, len(read.GIDs), gotIdx, gotOK, len(port.GIDs), wantIdx, wantOK, port.GIDs)
		}
	}
	if cut >= whole {
		t.Errorf("the stop never cut a table: %d of %d GIDs read", cut, whole)
	}
	t.Logf("GIDs read: %d of %d", cut, whole)
}

func TestGIDScanStopOnInfiniBandAndUnheldNamespaces(t *testing.T) {
	// table lists GIDs from index 0, each "ADDR/VERSION".
	table := func(entries ...string) []model.GID {
		var gids []model.GID
		for i, e := range entries {
			a, v, _ := strings.Cut(e, "/")
			typ := model.GIDTypeRoCEv2
			if v == "1" {
				typ = model.GIDTypeRoCEv1
			}
			gids = append(gids, model.GID{Index: i, GID: gidOf(netip.MustParseAddr(a)), Type: typ, NetDev: "eth1"})
		}
		return gids
	}
	roce := model.Port{LinkLayer: model.LinkLayerEthernet}
	ib := model.Port{LinkLayer: model.LinkLayerInfiniBand}
	v4 := config.NCCL{RoCEVersion: 2}
	v6 := config.NCCL{RoCEVersion: 2, AddrFamily: config.AddrFamilyIPv6}
	addrs := func(list ...string) []netip.Addr {
		out := []netip.Addr{}
		for _, a := range list {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		cfg  config.NCCL
		held []netip.Addr
		port model.Port
		read []model.GID
		stop bool
	}{
		{"InfiniBand: the port GID is enough", v4, addrs("10.0.0.1"), ib, []model.GID{{GID: netip.MustParseAddr("fe80::2")}}, true},
		{"only loopback held: the first GID is enough", v4, addrs("127.0.0.1", "::1"), roce, table("fe80::1/1"), true},
		{"AF_INET, only link-local held: the first GID is enough", v4, addrs("fe80::9"), roce, table("fe80::1/1"), true},
		{"AF_INET6, link-local held: an IPv4 pick may still move", v6, addrs("fe80::1"), roce, table("10.9.9.9/2"), false},
		{"AF_INET6, link-local held: a pick of IPv6 family is final", v6, addrs("fe80::1"), roce, table("10.9.9.9/2", "fe80::1/2"), true},
		{"held 10.0.0.1: the default GIDs do not settle", v4, addrs("10.0.0.1"), roce, table("fe80::1/1", "fe80::1/2"), false},
		{"held 10.0.0.1: another address does not settle", v4, addrs("10.0.0.1"), roce, table("fe80::1/1", "fe80::1/2", "10.0.0.2/2"), false},
		{"held 10.0.0.1: its v1 GID does not settle", v4, addrs("10.0.0.1"), roce, table("fe80::1/1", "fe80::1/2", "10.0.0.1/1"), false},
		{"held 10.0.0.1: its v2 GID settles", v4, addrs("10.0.0.1"), roce, table("fe80::1/1", "fe80::1/2", "10.0.0.1/1", "10.0.0.1/2"), true},
	} {
		if got := GIDScanStop(tc.cfg, tc.held)(tc.port, tc.read); got != tc.stop {
			t.Errorf("%s: stop = %v, want %v", tc.name, got, tc.stop)
		}
	}
	if GIDScanStop(v4, nil) != nil {
		t.Error("the host's namespace (held nil) should read every slot")
	}
}
