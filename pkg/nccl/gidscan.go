package nccl

import (
	"net/netip"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// GIDScanStop tells a GID table reader (discover.Options.GIDScanStop) where
// NCCL's pick for a container namespace holding the addresses held can no
// longer change, so that the slots after it need not be read: a port's
// table has 128 to 255 slots, and the pick is usually final at index 3.
// The reader calls it after each used GID with those read so far, in index
// order.
//
//   - An InfiniBand port needs no GID index; its first GID (the port GID,
//     which names its IPoIB netdev) is enough.
//   - On a RoCE port, once the pick (SelectGIDIndex's loop over what was
//     read) is of the wanted family, valid and of the wanted RoCE version,
//     no later slot replaces it: a candidate of its family would need to be
//     of another version, or the pick invalid.
//   - When no held address can give such a GID, a later slot can only move
//     the pick to a held GID of the wanted family (valid or not), and only
//     from a pick of another family. With no held address of that family
//     at all (a namespace with only loopback addresses, or only link-local
//     ones under AF_INET), the pick stays at index 0 and the first GID (the
//     port's netdev) is enough. Loopback addresses count as none: they live
//     on lo, which is no RoCE netdev, so the kernel gives them no GID.
//
// held nil (the host's namespace, where every slot counts, empty ones
// included) gives nil: read every slot.
func GIDScanStop(cfg config.NCCL, held []netip.Addr) func(model.Port, []model.GID) bool {
	if held == nil {
		return nil
	}
	rule := gidRule(cfg, Scope{HeldAddrs: held})
	canSettle, canMove := false, false
	for _, a := range held {
		g := gidSlot{gid: gidOf(a), version: rule.RoCEVersion}
		if a.IsLoopback() || gidFamily(g.gid) != rule.Family || !rule.inRange(g.gid) {
			continue
		}
		canMove = true
		canSettle = canSettle || rule.settles(g)
	}
	return func(p model.Port, read []model.GID) bool {
		if p.LinkLayer != model.LinkLayerEthernet || !canMove {
			return true
		}
		p.GIDs, p.GIDTableLen = read, read[len(read)-1].Index+1
		_, pick := selectPick(p, rule)
		if gidFamily(pick.gid) != rule.Family {
			return false
		}
		return !canSettle || (gidValid(pick.gid) && pick.version == rule.RoCEVersion)
	}
}

// settles reports whether a slot is a final pick of NCCL's rule for a
// container: of the wanted family and RoCE version, valid, in range, held.
func (r GIDRule) settles(s gidSlot) bool {
	return gidFamily(s.gid) == r.Family && gidValid(s.gid) && r.inRange(s.gid) && r.held(s.gid) && s.version == r.RoCEVersion
}

// gidOf is the GID the kernel gives an address: IPv4 as IPv4-mapped.
func gidOf(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.AddrFrom16(a.As16())
	}
	return a
}
