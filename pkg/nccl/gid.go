// Package nccl computes NCCL settings from a model.Node. Everything here is
// pure: data in, data out.
package nccl

import (
	"net/netip"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Family is the address family NCCL_IB_ADDR_FAMILY names.
type Family int

const (
	FamilyIPv4 Family = 4
	FamilyIPv6 Family = 6
)

// GIDRule holds the inputs of NCCL's GID choice for RoCE ports.
type GIDRule struct {
	Family      Family       // NCCL_IB_ADDR_FAMILY
	Range       netip.Prefix // NCCL_IB_ADDR_RANGE; invalid (zero) means unset
	RoCEVersion int          // NCCL_IB_ROCE_VERSION_NUM
	// Held, when set, keeps only GIDs whose address the container's network
	// namespace holds. It is rdma-cdi's addition: NCCL sees only its own
	// namespace's table, which on a shared-mode host is the whole port's.
	Held func(netip.Addr) bool
}

// gidFamily is NCCL's getGidAddrFamily: IPv4-mapped (and the IPv4-mapped
// multicast form) is IPv4, anything else IPv6.
func gidFamily(g netip.Addr) Family {
	b := g.As16()
	zero := func(s []byte) bool {
		for _, x := range s {
			if x != 0 {
				return false
			}
		}
		return true
	}
	mappedTail := b[10] == 0xff && b[11] == 0xff
	if mappedTail && (zero(b[:10]) || (b[0] == 0xff && b[1] == 0x0e && zero(b[2:10]))) {
		return FamilyIPv4
	}
	return FamilyIPv6
}

// gidValid is NCCL's validGid: configured (neither all zero nor the bare
// fe80:: prefix) and not link-local (fe80::/64).
func gidValid(g netip.Addr) bool {
	b := g.As16()
	linkLocalPrefix := b[0] == 0xfe && b[1] == 0x80 && b[2] == 0 && b[3] == 0 && b[4] == 0 && b[5] == 0 && b[6] == 0 && b[7] == 0
	if linkLocalPrefix {
		return false
	}
	for _, x := range b {
		if x != 0 {
			return true
		}
	}
	return false
}

// inRange is NCCL's matchGidAddrPrefix: true when no range is set.
func (r GIDRule) inRange(g netip.Addr) bool {
	if !r.Range.IsValid() {
		return true
	}
	if r.Family == FamilyIPv4 {
		return g.Is4In6() && r.Range.Contains(g.Unmap())
	}
	return r.Range.Contains(g)
}

func (r GIDRule) held(g netip.Addr) bool {
	if r.Held == nil {
		return true
	}
	if g.Is4In6() {
		return r.Held(g.Unmap())
	}
	return r.Held(g)
}

type gidSlot struct {
	gid     netip.Addr
	version int // -1 when unknown (empty slot, EINVAL)
}

// SelectGIDIndex applies NCCL's rule (ncclIbGetGidIndex/ncclUpdateGidIndex,
// NCCL >= 2.21) to a RoCE port: start at index 0 and let each later index
// replace the pick when it is of the wanted family while the pick is not, or
// when it is a valid in-range GID of the wanted RoCE version and the pick is
// invalid or of another version. ok is false when the final pick is not a
// valid GID of the wanted family (NCCL would then use an unusable GID).
func SelectGIDIndex(port model.Port, rule GIDRule) (index int, ok bool) {
	pick, final := selectPick(port, rule)
	return pick, rule.usable(final.gid)
}

// selectedGID is the GID at SelectGIDIndex's pick, and whether it is usable.
func selectedGID(port model.Port, rule GIDRule) (netip.Addr, bool) {
	_, final := selectPick(port, rule)
	return final.gid, rule.usable(final.gid)
}

// usable reports whether a pick is a valid GID of the wanted family that
// the namespace holds.
func (r GIDRule) usable(g netip.Addr) bool {
	return gidValid(g) && gidFamily(g) == r.Family && r.held(g)
}

// selectPick is NCCL's loop; it returns the pick and its slot.
func selectPick(port model.Port, rule GIDRule) (int, gidSlot) {
	n := max(port.GIDTableLen, 1)
	slots := make([]gidSlot, n)
	for i := range slots {
		slots[i] = gidSlot{gid: netip.IPv6Unspecified(), version: -1}
	}
	for _, g := range port.GIDs {
		if g.Index >= 0 && g.Index < n {
			v := g.Type.RoCEVersion()
			if v == 0 {
				v = -1
			}
			slots[g.Index] = gidSlot{gid: g.GID, version: v}
		}
	}
	pick := 0
	for cand := 1; cand < n; cand++ {
		cur, c := slots[pick], slots[cand]
		candFam := gidFamily(c.gid)
		candOK := rule.inRange(c.gid) && rule.held(c.gid)
		if candFam != gidFamily(cur.gid) && candFam == rule.Family && candOK {
			pick = cand
			continue
		}
		if candFam != rule.Family || !gidValid(c.gid) || !candOK {
			continue
		}
		if (cur.version != c.version || !gidValid(cur.gid)) && c.version == rule.RoCEVersion {
			pick = cand
		}
	}
	return pick, slots[pick]
}
