package podnetwork

import (
	"errors"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func mustPool(t *testing.T, s string) ClusterPool {
	t.Helper()
	p, err := ParsePool(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustRange(t *testing.T, s string) Range {
	t.Helper()
	r, err := ParseRange(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// allocateAll takes every address p has for host.
func allocateAll(t *testing.T, p *Pool, host model.NetDev) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for {
		a, err := p.Allocate(host)
		if err != nil {
			if !strings.Contains(err.Error(), "used up") {
				t.Fatalf("Allocate: %v", err)
			}
			return out
		}
		out = append(out, a.Addr())
	}
}

// A range written as the subnet's CIDR, or a block that starts at the
// network address, never hands out the network, broadcast, first host
// (the conventional gateway), a gateway of the node's routes or the
// node's own address.
func TestAllocateSkipsWhatTheSubnetKeeps(t *testing.T) {
	host := model.NetDev{Name: "eth1", Addrs: []netip.Prefix{pfx("10.0.61.5/24")}, Gateways: []netip.Addr{addr("10.0.61.2")}}
	static := &Pool{Ranges: map[string][]Range{"eth1": {mustRange(t, "10.0.61.0/24")}}}
	first, err := static.Allocate(host)
	if err != nil || first.String() != "10.0.61.3/24" {
		t.Fatalf("first address of the subnet's CIDR: %v, %v; want 10.0.61.3/24 (.1 the gateway by convention, .2 a route's)", first, err)
	}
	block := &Pool{Blocks: []Range{mustRange(t, "10.0.61.0-10.0.61.255")}}
	got := allocateAll(t, block, host)
	if len(got) != 256-5 {
		t.Errorf("%d addresses of a /24, want 251", len(got))
	}
	for _, a := range got {
		switch a.String() {
		case "10.0.61.0", "10.0.61.1", "10.0.61.2", "10.0.61.5", "10.0.61.255":
			t.Errorf("handed out %s", a)
		}
	}

	v6 := model.NetDev{Name: "eth1", Addrs: []netip.Prefix{pfx("fd00::5/64")}}
	p := &Pool{Blocks: []Range{mustRange(t, "fd00::-fd00::f")}}
	if a, err := p.Allocate(v6); err != nil || a.String() != "fd00::2/64" {
		t.Errorf("IPv6: %v, %v; want fd00::2/64 (the subnet-router anycast ::0 and ::1 kept)", a, err)
	}

	// A point-to-point subnet keeps only the node's address.
	p2p := model.NetDev{Name: "eth1", Addrs: []netip.Prefix{pfx("10.0.9.0/31")}}
	p = &Pool{Ranges: map[string][]Range{"eth1": {mustRange(t, "10.0.9.0-10.0.9.1")}}}
	if a, err := p.Allocate(p2p); err != nil || a.String() != "10.0.9.1/31" {
		t.Errorf("/31: %v, %v; want 10.0.9.1/31", a, err)
	}
}

// A node whose static range and blocks are used up asks Claim for one
// more block; the netdev no pool serves keeps the pool's own error, and
// any other Claim error names the netdev.
func TestAllocateClaimsOneMoreBlock(t *testing.T) {
	host := model.NetDev{Name: "eth1", Addrs: []netip.Prefix{pfx("10.0.61.5/24")}}
	blocks := []Range{mustRange(t, "10.0.61.16-10.0.61.17"), mustRange(t, "10.0.61.32-10.0.61.33")}
	claims := 0
	p := &Pool{
		Ranges: map[string][]Range{"eth1": {mustRange(t, "10.0.61.200-10.0.61.200")}},
		Claim: func(h model.NetDev) (Range, error) {
			if h.Name != "eth1" {
				return Range{}, ErrNoClusterPool
			}
			if claims == len(blocks) {
				return Range{}, errors.New("pool 10.0.61.0/24 is used up")
			}
			claims++
			return blocks[claims-1], nil
		},
	}
	got := make([]string, 0, 5)
	for range 5 {
		a, err := p.Allocate(host)
		if err != nil {
			t.Fatalf("Allocate %d: %v", len(got), err)
		}
		got = append(got, a.Addr().String())
	}
	if want := "10.0.61.200 10.0.61.16 10.0.61.17 10.0.61.32 10.0.61.33"; strings.Join(got, " ") != want {
		t.Errorf("allocated %v, want %s: the static range, then each block claimed when needed", got, want)
	}
	if claims != 2 {
		t.Errorf("%d claims, want 2: one per block used up", claims)
	}
	if _, err := p.Allocate(host); err == nil || !strings.Contains(err.Error(), "eth1: pool 10.0.61.0/24 is used up") {
		t.Errorf("exhausted pool: %v", err)
	}
	if _, err := p.Allocate(model.NetDev{Name: "eth2", Addrs: []netip.Prefix{pfx("10.0.70.5/24")}}); err == nil || !strings.Contains(err.Error(), "no range for eth2") {
		t.Errorf("a netdev no pool serves: %v", err)
	}
	again := &Pool{Blocks: blocks[:1], InUse: map[netip.Addr]bool{addr("10.0.61.16"): true, addr("10.0.61.17"): true},
		Claim: func(model.NetDev) (Range, error) { return blocks[0], nil }}
	if _, err := again.Allocate(host); err == nil || !strings.Contains(err.Error(), "again") {
		t.Errorf("a Claim that hands back a full block: %v", err)
	}
}

func TestChooseBlock(t *testing.T) {
	pool := mustPool(t, "10.0.61.0/24")
	now := time.Unix(1000, 0)
	live, expired := now.Add(time.Minute), now.Add(-time.Second)
	block := func(i uint64) Range {
		r, ok := pool.Block(i, 16)
		if !ok {
			t.Fatalf("no block %d", i)
		}
		return r
	}
	hold := func(r Range, name, holder string, until time.Time) Holding {
		return Holding{Name: name, Range: r, Holder: holder, Expires: until}
	}
	choose := func(held ...Holding) BlockChoice {
		t.Helper()
		c, err := ChooseBlock(pool, 16, held, now)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := choose(); c.Range != block(0) || c.Name != BlockName(block(0)) || c.TakeOver != nil {
		t.Errorf("empty pool: %+v, want a new lease of block 0", c)
	}
	a0 := hold(block(0), BlockName(block(0)), "a", live)
	if c := choose(a0, hold(block(1), BlockName(block(1)), "b", expired)); c.Range != block(1) || c.TakeOver == nil || c.TakeOver.Holder != "b" {
		t.Errorf("block 1's lease expired: %+v, want it taken over", c)
	}
	if c := choose(a0, hold(block(1), BlockName(block(1)), "b", live)); c.Range != block(2) || c.TakeOver != nil {
		t.Errorf("blocks 0 and 1 live: %+v, want block 2", c)
	}
	static := hold(mustRange(t, "10.0.61.20-10.0.61.100"), StaticName(mustRange(t, "10.0.61.20-10.0.61.100")), "c", live)
	if c := choose(a0, static); c.Range != block(7) {
		t.Errorf("a static range over blocks 1-6: %v, want block 7 (10.0.61.112)", c.Range)
	}
	static.Expires = expired
	if c := choose(a0, static); c.Range != block(7) {
		t.Errorf("an expired static range: %v, want block 7: a range of another shape is its owner's to delete", c.Range)
	}

	var all []Holding
	for i := range uint64(16) {
		all = append(all, hold(block(i), BlockName(block(i)), []string{"a", "b"}[i%2], live))
	}
	_, err := ChooseBlock(pool, 16, all, now)
	if err == nil || !strings.Contains(err.Error(), "pool 10.0.61.0/24 is used up") || !strings.Contains(err.Error(), "a, b") {
		t.Errorf("every block live: %v, want the pool and its holders named", err)
	}
	all[15].Expires = expired
	if c := choose(all...); c.Range != block(15) || c.TakeOver == nil {
		t.Errorf("the last block expired: %+v", c)
	}
}

func TestParsePoolAndBlockSize(t *testing.T) {
	v4 := mustPool(t, "10.0.61.7/24")
	if v4.String() != "10.0.61.0/24" || v4.First != addr("10.0.61.0") || v4.Last != addr("10.0.61.255") {
		t.Errorf("pool 10.0.61.7/24 = %v %v", v4, v4.Range)
	}
	sizes := map[string]uint64{"/28": 16, "16": 16, "/24": 256, "5": 5}
	for text, want := range sizes {
		var s BlockSize
		if err := s.UnmarshalText([]byte(text)); err != nil {
			t.Fatalf("block size %q: %v", text, err)
		}
		if n, err := s.In(v4); err != nil || n != want {
			t.Errorf("block size %s in %s: %d, %v; want %d", text, v4, n, err, want)
		}
		if back, _ := s.MarshalText(); string(back) != text {
			t.Errorf("block size %q written back as %q", text, back)
		}
	}
	for _, bad := range []string{"0", "/129", "x", "-3", "/"} {
		var s BlockSize
		if err := s.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("block size %q accepted", bad)
		}
	}
	v6 := mustPool(t, "fd00::/64")
	var s BlockSize
	_ = s.UnmarshalText([]byte("/28"))
	if _, err := s.In(v6); err == nil || !strings.Contains(err.Error(), "family") {
		t.Errorf("/28 blocks of an IPv6 pool: %v", err)
	}
	if _, err := BlockOf(512).In(v4); err == nil || !strings.Contains(err.Error(), "larger than pool") {
		t.Errorf("a block larger than its pool: %v", err)
	}
	if r, ok := v4.Block(15, 16); !ok || r != mustRange(t, "10.0.61.240-10.0.61.255") {
		t.Errorf("block 15 = %v, %v", r, ok)
	}
	if _, ok := v4.Block(16, 16); ok {
		t.Error("block 16 of a /24 in blocks of 16")
	}
	short := mustPool(t, "10.0.61.200-10.0.61.220")
	if r, ok := short.Block(1, 16); !ok || r != mustRange(t, "10.0.61.216-10.0.61.220") {
		t.Errorf("a FIRST-LAST pool's last block = %v, %v; want it short", r, ok)
	}
	if r, ok := v6.Block(1<<60-1, 16); !ok || r != mustRange(t, "fd00::ffff:ffff:ffff:fff0-fd00::ffff:ffff:ffff:ffff") {
		t.Errorf("the last block of an IPv6 /64 = %v, %v", r, ok)
	}
	for _, bad := range []string{"fd00::/63", "10.0.61.9-10.0.61.1", "nonsense"} {
		if _, err := ParsePool(bad); err == nil {
			t.Errorf("pool %q accepted", bad)
		}
	}
}

// Lease names come from the range alone, and are DNS subdomains for
// either family.
func TestRangeNames(t *testing.T) {
	subdomain := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	names := map[string]bool{}
	for _, r := range []Range{mustRange(t, "10.0.61.16-10.0.61.31"), mustRange(t, "::-::f"), mustRange(t, "fd00::10-fd00::1f")} {
		for _, n := range []string{BlockName(r), StaticName(r)} {
			if !subdomain.MatchString(n) || len(n) > 253 {
				t.Errorf("%q is not a DNS subdomain", n)
			}
			if names[n] {
				t.Errorf("%q named twice", n)
			}
			names[n] = true
		}
	}
	if BlockName(mustRange(t, "10.0.61.16-10.0.61.31")) != "addr-block.10-0-61-16.10-0-61-31" {
		t.Errorf("block name %q", BlockName(mustRange(t, "10.0.61.16-10.0.61.31")))
	}
}

func TestPoolsForAndCheckPools(t *testing.T) {
	pools := []ClusterPool{mustPool(t, "10.0.61.0/25"), mustPool(t, "10.0.62.0/24"), mustPool(t, "10.0.61.128-10.0.62.10")}
	got := PoolsFor(pools, []netip.Prefix{pfx("10.0.61.5/24")})
	if len(got) != 1 || got[0].String() != "10.0.61.0/25" {
		t.Errorf("pools for 10.0.61.5/24: %v, want the /25 alone (the range crosses into another subnet)", got)
	}
	err := CheckPools(pools, BlockOf(16), map[string][]Range{"eth1": {mustRange(t, "10.0.62.200-10.0.62.220")}})
	for _, want := range []string{"pool 10.0.61.128-10.0.62.10 overlaps pool 10.0.62.0/24", "pool 10.0.62.0/24 overlaps eth1's static range"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckPools: %v, want %q", err, want)
		}
	}
	if err := CheckPools(pools[:2], BlockOf(16), nil); err != nil {
		t.Errorf("disjoint pools: %v", err)
	}
}
