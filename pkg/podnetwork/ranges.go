package podnetwork

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Range is a node's block of addresses for the sub-interfaces of one host
// netdev, First to Last inclusive.
type Range struct {
	First, Last netip.Addr
}

// ParseRange reads "10.0.61.128/27" (its hosts: neither the network's nor,
// for IPv4, the broadcast address) or "10.0.61.200-10.0.61.220".
func ParseRange(s string) (Range, error) {
	if first, last, ok := strings.Cut(s, "-"); ok {
		a, err1 := netip.ParseAddr(strings.TrimSpace(first))
		b, err2 := netip.ParseAddr(strings.TrimSpace(last))
		if err1 != nil || err2 != nil || a.Is4() != b.Is4() || b.Less(a) {
			return Range{}, fmt.Errorf("range %q: want FIRST-LAST of one family, FIRST not above LAST", s)
		}
		return Range{First: a, Last: b}, nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return Range{}, fmt.Errorf("range %q: want a CIDR or FIRST-LAST", s)
	}
	p = p.Masked()
	first, last := p.Addr().Next(), lastAddr(p)
	if p.Addr().Is4() {
		last = last.Prev()
	}
	if !first.IsValid() || !last.IsValid() || last.Less(first) {
		return Range{}, fmt.Errorf("range %q: no host address in it", s)
	}
	return Range{First: first, Last: last}, nil
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := range b {
		bitsHere := min(max(p.Bits()-8*i, 0), 8)
		b[i] |= byte(0xff >> bitsHere)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func (r Range) Contains(a netip.Addr) bool {
	return !a.Less(r.First) && !r.Last.Less(a)
}

func (r Range) overlaps(o Range) bool {
	return !r.Last.Less(o.First) && !o.Last.Less(r.First)
}

// ParseRanges reads the config's netdev -> ranges map (ParseBlocks of
// each) and refuses ranges that overlap one another (CheckOverlaps).
func ParseRanges(m map[string]string) (map[string][]Range, error) {
	out := map[string][]Range{}
	var errs []error
	for _, n := range sortedNames(m) {
		blocks, err := ParseBlocks(m[n])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n, err))
		}
		if len(blocks) > 0 {
			out[n] = blocks
		}
	}
	errs = append(errs, CheckOverlaps(out))
	return out, errors.Join(errs...)
}

// ParseBlocks reads one netdev's ranges. A netdev may have several blocks,
// comma-separated: one config for nodes whose netdevs of that name are in
// different subnets (a routed fabric, a subnet per rack), each node taking
// the block inside its own netdev's subnet. The blocks that parse are
// returned with the error of those that do not.
func ParseBlocks(s string) ([]Range, error) {
	var out []Range
	var errs []error
	for _, block := range strings.Split(s, ",") {
		r, err := ParseRange(strings.TrimSpace(block))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// CheckOverlaps refuses blocks that overlap one another, of one netdev or
// of two: an address must belong to one sub-interface.
func CheckOverlaps(ranges map[string][]Range) error {
	var errs []error
	names := sortedNames(ranges)
	for i, n := range names {
		for j, r := range ranges[n] {
			// Each block against those before it: the earlier netdevs' and
			// its own netdev's earlier blocks.
			for _, o := range names[:i+1] {
				earlier := ranges[o]
				if o == n {
					earlier = earlier[:j]
				}
				for _, q := range earlier {
					if q.overlaps(r) {
						errs = append(errs, fmt.Errorf("%s: range %s overlaps %s's %s", n, r, o, q))
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// String is the range as FIRST-LAST.
func (r Range) String() string { return r.First.String() + "-" + r.Last.String() }

// Pool allocates a node's sub-interface addresses: from its static ranges
// (pod_network.ranges) and the cluster blocks it holds (pod_network.pools,
// ChooseBlock), skipping the addresses its attachments hold and those a
// subnet keeps (reservedIn).
type Pool struct {
	// Ranges are the static ranges, by host netdev.
	Ranges map[string][]Range
	// Blocks are the cluster blocks the node holds: each serves the host
	// netdev whose subnet holds it.
	Blocks []Range
	InUse  map[netip.Addr]bool
	// Claim, when set, gets the node one more range for host when those
	// it holds have no address left for it: its ErrNoClusterPool says
	// that no pool serves host's subnets, any other error why the pool
	// that does has none.
	Claim func(host model.NetDev) (Range, error)
	// Managed is the rest of what the allocators hand out, on this node
	// or another: every static range configured (held or not) and the
	// cluster's pools. An address a config names there is refused.
	Managed []Range
}

// Manages says which range of the allocators' holds a, if one does: a
// static address there would be handed to another pod too.
func (p *Pool) Manages(a netip.Addr) (Range, bool) {
	all := slices.Concat(p.Blocks, p.Managed)
	for _, rs := range p.Ranges {
		all = append(all, rs...)
	}
	for _, r := range all {
		if r.Contains(a) {
			return r, true
		}
	}
	return Range{}, false
}

// ErrNoClusterPool is Claim's answer for a netdev no pool serves.
var ErrNoClusterPool = errors.New("no pod_network.pools entry inside its subnets")

// Allocate gives the lowest free address for a sub-interface of host, from
// its static ranges, then from the blocks held in its subnets, then from a
// block Claim gets, with the prefix length of its subnet (so the pod
// reaches the fabric's other nodes on link), and marks it in use.
func (p *Pool) Allocate(host model.NetDev) (netip.Prefix, error) {
	for {
		a, err := p.allocateHeld(host)
		if err == nil || p.Claim == nil {
			return a, err
		}
		more, cerr := p.Claim(host)
		switch {
		case errors.Is(cerr, ErrNoClusterPool):
			return a, err
		case cerr != nil:
			return netip.Prefix{}, fmt.Errorf("%s: %w", host.Name, cerr)
		case slices.Contains(p.Blocks, more):
			return netip.Prefix{}, fmt.Errorf("%s: claimed %s again, which has no address left", host.Name, more)
		}
		p.Blocks = append(p.Blocks, more)
	}
}

// allocateHeld is Allocate from the ranges held already. Static ranges
// in none of host's subnets are other nodes' (one config for a routed
// fabric), blocks in none of them another netdev's.
func (p *Pool) allocateHeld(host model.NetDev) (netip.Prefix, error) {
	static := p.Ranges[host.Name]
	skip := reservedIn(host)
	var mine []string
	for i, r := range slices.Concat(static, p.Blocks) {
		bits, err := subnetBits(r.First, host.Addrs)
		if err != nil {
			continue
		}
		mine = append(mine, r.String())
		for a := r.First; a.IsValid() && r.Contains(a); a = a.Next() {
			if p.InUse[a] || skip[a] {
				continue
			}
			if _, err := subnetBits(a, host.Addrs); err != nil {
				kind := "range"
				if i >= len(static) {
					kind = "block"
				}
				return netip.Prefix{}, fmt.Errorf("%s's %s %s: %w", host.Name, kind, r, err)
			}
			if p.InUse == nil {
				p.InUse = map[netip.Addr]bool{}
			}
			p.InUse[a] = true
			return netip.PrefixFrom(a, bits), nil
		}
	}
	switch {
	case len(mine) > 0:
		return netip.Prefix{}, fmt.Errorf("%s's addresses %s are used up", host.Name, strings.Join(mine, ","))
	case len(static) > 0:
		return netip.Prefix{}, fmt.Errorf("none of %s's ranges in pod_network.ranges is inside its subnets %v", host.Name, host.Addrs)
	}
	return netip.Prefix{}, fmt.Errorf("no range for %s in pod_network.ranges, nor a cluster block in its subnets %v, and the claim gives no addresses", host.Name, host.Addrs)
}

// reservedIn are the addresses of host's subnets that no pod may take:
// host's own, each subnet's network address, its IPv4 broadcast and its
// first host (the gateway by convention), and the gateways the node's
// routes through host name. A point-to-point subnet (/31, /32, /127,
// /128) has no network, broadcast or gateway address to keep.
func reservedIn(host model.NetDev) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, g := range host.Gateways {
		out[g] = true
	}
	for _, h := range host.Addrs {
		out[h.Addr()] = true
		if h.Addr().BitLen()-h.Bits() < 2 {
			continue
		}
		network := h.Masked().Addr()
		out[network] = true
		out[network.Next()] = true
		if network.Is4() {
			out[lastAddr(h)] = true
		}
	}
	return out
}

// subnetBits is the prefix length of the host's subnet holding a.
func subnetBits(a netip.Addr, hostAddrs []netip.Prefix) (int, error) {
	for _, h := range hostAddrs {
		if h.Masked().Contains(a) {
			return h.Bits(), nil
		}
	}
	return 0, fmt.Errorf("%s is in none of the netdev's subnets", a)
}
