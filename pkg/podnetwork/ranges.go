package podnetwork

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
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

func (r Range) contains(a netip.Addr) bool {
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

// Pool allocates from a node's ranges, skipping addresses in use (those
// the node's attachments hold) and the host netdev's own.
type Pool struct {
	Ranges map[string][]Range
	InUse  map[netip.Addr]bool
}

// Allocate gives the lowest free address of hostNetDev's range inside
// one of its subnets, with the prefix length of that subnet (so the pod
// reaches the fabric's other nodes on link), and marks it in use. Blocks
// in none of its subnets are other nodes'.
func (p *Pool) Allocate(hostNetDev string, hostAddrs []netip.Prefix) (netip.Prefix, error) {
	blocks, ok := p.Ranges[hostNetDev]
	if !ok {
		return netip.Prefix{}, fmt.Errorf("no range for %s in pod_network.ranges, and the claim gives no addresses", hostNetDev)
	}
	own := map[netip.Addr]bool{}
	for _, h := range hostAddrs {
		own[h.Addr()] = true
	}
	var mine []string
	for _, r := range blocks {
		bits, err := subnetBits(r.First, hostAddrs)
		if err != nil {
			continue
		}
		mine = append(mine, fmt.Sprintf("%s-%s", r.First, r.Last))
		for a := r.First; a.IsValid() && r.contains(a); a = a.Next() {
			if p.InUse[a] || own[a] {
				continue
			}
			if _, err := subnetBits(a, hostAddrs); err != nil {
				return netip.Prefix{}, fmt.Errorf("%s's range %s-%s: %w", hostNetDev, r.First, r.Last, err)
			}
			if p.InUse == nil {
				p.InUse = map[netip.Addr]bool{}
			}
			p.InUse[a] = true
			return netip.PrefixFrom(a, bits), nil
		}
	}
	if len(mine) == 0 {
		return netip.Prefix{}, fmt.Errorf("none of %s's ranges in pod_network.ranges is inside its subnets %v", hostNetDev, hostAddrs)
	}
	return netip.Prefix{}, fmt.Errorf("%s's range %s is used up", hostNetDev, strings.Join(mine, ","))
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
