package podnetwork

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ClusterPool is one entry of pod_network.pools: addresses the cluster's
// nodes share, each node taking blocks of them (ChooseBlock) for the
// sub-interfaces of the host netdev whose subnet holds the pool. A CIDR
// pool's blocks align to its network address, which, like the subnet's
// broadcast and gateway, the allocation skips (Pool.Allocate).
type ClusterPool struct {
	Range
	text string
}

// maxPoolBits bounds a pool to 2^64 addresses, so that an address's
// offset in it is a uint64.
const maxPoolBits = 64

// ParsePool reads "10.0.61.0/24" (every address of the prefix) or
// "10.0.61.64-10.0.61.127".
func ParsePool(s string) (ClusterPool, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "-") {
		r, err := ParseRange(s)
		if err != nil {
			return ClusterPool{}, fmt.Errorf("pool %w", err)
		}
		return ClusterPool{Range: r, text: r.String()}, nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return ClusterPool{}, fmt.Errorf("pool %q: want a CIDR or FIRST-LAST", s)
	}
	p = p.Masked()
	if p.Addr().BitLen()-p.Bits() > maxPoolBits {
		return ClusterPool{}, fmt.Errorf("pool %q: more than 2^%d addresses; split it", s, maxPoolBits)
	}
	return ClusterPool{Range: Range{First: p.Addr(), Last: lastAddr(p)}, text: p.String()}, nil
}

// String is the pool as the config writes it (a CIDR stays one).
func (p ClusterPool) String() string { return p.text }

// MarshalText and UnmarshalText make a pool a config value.
func (p ClusterPool) MarshalText() ([]byte, error) { return []byte(p.text), nil }

func (p *ClusterPool) UnmarshalText(text []byte) error {
	q, err := ParsePool(string(text))
	if err == nil {
		*p = q
	}
	return err
}

// size is how many addresses p holds, less one (a 2^64 pool would not fit).
func (p ClusterPool) sizeLessOne() uint64 {
	n, _ := addrDiff(p.First, p.Last) // ParsePool bounds it
	return n
}

// BlockSize is pod_network.block_size: how many addresses a node takes of
// a pool at once, as a prefix length ("/28": 16 addresses of an IPv4 pool)
// or a count ("16", of either family).
type BlockSize struct {
	bits  int
	count uint64
}

// BlockOf is a count-of-addresses BlockSize.
func BlockOf(count uint64) BlockSize { return BlockSize{count: count} }

func (s *BlockSize) UnmarshalText(text []byte) error {
	t := strings.TrimSpace(string(text))
	if b, ok := strings.CutPrefix(t, "/"); ok {
		n, err := strconv.Atoi(b)
		if err != nil || n < 0 || n > 128 {
			return fmt.Errorf("block size %q: want a prefix length /0 to /128, or a count of addresses", t)
		}
		*s = BlockSize{bits: n}
		return nil
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || n == 0 {
		return fmt.Errorf("block size %q: want a prefix length (/28) or a count of addresses (16)", t)
	}
	*s = BlockSize{count: n}
	return nil
}

func (s BlockSize) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s BlockSize) String() string {
	if s.count != 0 {
		return strconv.FormatUint(s.count, 10)
	}
	return "/" + strconv.Itoa(s.bits)
}

// In is how many addresses a block of pool p holds: a count as it is, a
// prefix length in p's family. A block larger than the pool is an error:
// the pool could not be shared.
func (s BlockSize) In(p ClusterPool) (uint64, error) {
	n := s.count
	if n == 0 {
		host := p.First.BitLen() - s.bits
		if host < 0 || host >= 64 {
			return 0, fmt.Errorf("block size %s does not fit pool %s's family", s, p)
		}
		n = 1 << host
	}
	if n-1 > p.sizeLessOne() {
		return 0, fmt.Errorf("block size %s is larger than pool %s", s, p)
	}
	return n, nil
}

// Block is the index'th block of size addresses of p; false past its end.
// The last block may be short (a FIRST-LAST pool).
func (p ClusterPool) Block(index, size uint64) (Range, bool) {
	hi, off := bits.Mul64(index, size)
	if hi != 0 || off > p.sizeLessOne() {
		return Range{}, false
	}
	first, _ := addrAdd(p.First, off)
	last, ok := addrAdd(first, size-1)
	if !ok || p.Last.Less(last) {
		last = p.Last
	}
	return Range{First: first, Last: last}, true
}

// blockIndex is the index of the block of size addresses that holds a,
// an address of p.
func (p ClusterPool) blockIndex(a netip.Addr, size uint64) uint64 {
	off, _ := addrDiff(p.First, a)
	return off / size
}

// Lease names: one per range, from the range alone, so that two nodes
// racing for one block create the same name and one of them is refused.
const (
	blockNamePrefix  = "addr-block"
	staticNamePrefix = "addr-static"
)

// BlockName is the lease name of a cluster block.
func BlockName(r Range) string { return rangeName(blockNamePrefix, r) }

// StaticName is the lease name of a node's static range.
func StaticName(r Range) string { return rangeName(staticNamePrefix, r) }

// rangeName writes r into a DNS subdomain: IPv4 dotted with dashes,
// IPv6 as 32 hex digits (a colon cannot be written, and "::" would leave
// a label that starts with a dash).
func rangeName(prefix string, r Range) string {
	word := func(a netip.Addr) string {
		if a.Is4() {
			return strings.ReplaceAll(a.String(), ".", "-")
		}
		b := a.As16()
		return hex.EncodeToString(b[:])
	}
	return prefix + "." + word(r.First) + "." + word(r.Last)
}

// Holding is a range a node holds in the cluster, as its lease says.
type Holding struct {
	// Name is its lease's.
	Name   string
	Range  Range
	Holder string
	// Expires is when the lease runs out unless its holder renews it.
	Expires time.Time
}

// Live says whether the holding's lease still runs at now.
func (h Holding) Live(now time.Time) bool { return now.Before(h.Expires) }

// BlockChoice is the block ChooseBlock picked: a new lease, or the expired
// one TakeOver names, of the same range.
type BlockChoice struct {
	Range    Range
	Name     string
	TakeOver *Holding
}

// ChooseBlock picks the lowest block of p that no live holding overlaps:
// free, or held by an expired lease of exactly that block, which the
// caller takes over. An expired holding of another shape (a static range,
// a block of another size) is left to its owner's deletion. A pool with no
// such block is used up: the error names it and its holders.
func ChooseBlock(p ClusterPool, size uint64, held []Holding, now time.Time) (BlockChoice, error) {
	if size == 0 {
		return BlockChoice{}, errors.New("block size 0")
	}
	for i := uint64(0); ; {
		r, ok := p.Block(i, size)
		if !ok {
			return BlockChoice{}, usedUp(p, size, held)
		}
		var over []Holding
		for _, h := range held {
			if h.Range.overlaps(r) {
				over = append(over, h)
			}
		}
		name := BlockName(r)
		switch {
		case len(over) == 0:
			return BlockChoice{Range: r, Name: name}, nil
		case len(over) == 1 && over[0].Name == name && over[0].Range == r && !over[0].Live(now):
			return BlockChoice{Range: r, Name: name, TakeOver: &over[0]}, nil
		}
		// Past the furthest overlapping holding: a large static range
		// inside the pool is skipped in one step.
		furthest := r.Last
		for _, h := range over {
			if furthest.Less(h.Range.Last) {
				furthest = h.Range.Last
			}
		}
		if p.Last.Less(furthest) {
			return BlockChoice{}, usedUp(p, size, held)
		}
		i = p.blockIndex(furthest, size) + 1
	}
}

// usedUp is the error of a pool without a block to take.
func usedUp(p ClusterPool, size uint64, held []Holding) error {
	var holders []string
	for _, h := range held {
		if h.Range.overlaps(p.Range) && !slices.Contains(holders, h.Holder) {
			holders = append(holders, h.Holder)
		}
	}
	slices.Sort(holders)
	blocks := p.sizeLessOne()/size + 1
	return fmt.Errorf("pool %s is used up: its %d blocks of %d addresses are held by %s", p, blocks, size, strings.Join(holders, ", "))
}

// PoolsFor are the pools that serve a host netdev with addrs: those
// inside one of its subnets, whole.
func PoolsFor(pools []ClusterPool, addrs []netip.Prefix) []ClusterPool {
	var out []ClusterPool
	for _, p := range pools {
		for _, h := range addrs {
			if s := h.Masked(); s.Contains(p.First) && s.Contains(p.Last) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// Conflicts are the holdings of other holders that overlap r.
func Conflicts(r Range, holder string, held []Holding) []Holding {
	var out []Holding
	for _, h := range held {
		if h.Holder != holder && h.Range.overlaps(r) {
			out = append(out, h)
		}
	}
	return out
}

// CheckPools refuses pools that overlap one another or a static range,
// and a block size that does not fit a pool.
func CheckPools(pools []ClusterPool, size BlockSize, static map[string][]Range) error {
	var errs []error
	for i, p := range pools {
		if _, err := size.In(p); err != nil {
			errs = append(errs, err)
		}
		for _, q := range pools[:i] {
			if q.overlaps(p.Range) {
				errs = append(errs, fmt.Errorf("pool %s overlaps pool %s", p, q))
			}
		}
		for _, netdev := range sortedNames(static) {
			for _, r := range static[netdev] {
				if r.overlaps(p.Range) {
					errs = append(errs, fmt.Errorf("pool %s overlaps %s's static range %s: a node would hand out its addresses twice", p, netdev, r))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// u128 is a as a 128-bit number (an IPv4 address in its mapped form).
func u128(a netip.Addr) (hi, lo uint64) {
	b := a.As16()
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}

// addrAdd is a+n in a's family; false past the family's last address.
func addrAdd(a netip.Addr, n uint64) (netip.Addr, bool) {
	hi, lo := u128(a)
	lo, carry := bits.Add64(lo, n, 0)
	hi, carry = bits.Add64(hi, 0, carry)
	if carry != 0 {
		return netip.Addr{}, false
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	out := netip.AddrFrom16(b)
	if a.Is4() {
		if !out.Is4In6() {
			return netip.Addr{}, false
		}
		out = out.Unmap()
	}
	return out, true
}

// addrDiff is b-a for a not above b of one family; false when it is more
// than a uint64 holds.
func addrDiff(a, b netip.Addr) (uint64, bool) {
	ahi, alo := u128(a)
	bhi, blo := u128(b)
	lo, borrow := bits.Sub64(blo, alo, 0)
	hi, _ := bits.Sub64(bhi, ahi, borrow)
	return lo, hi == 0
}
