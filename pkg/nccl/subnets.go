package nccl

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// defaultSubnetPrefixLen is NCCL_IB_SUBNET_PREFIX_LEN's default: NCCL
// compares IPv4 GIDs under this many bits.
const defaultSubnetPrefixLen = 24

// subnetRouting returns NCCL_IB_SUBNET_AWARE_ROUTING=1 (NCCL >= 2.30.7) when
// the selected RoCE ports' GIDs (NCCL's picks) sit in different subnets, as
// on a fabric with a subnet per rail: NCCL then connects each peer through
// the local HCA in that peer HCA's subnet, not the one of the same index.
// NCCL compares IPv4 GIDs under NCCL_IB_SUBNET_PREFIX_LEN bits (24 unless
// set) and IPv6 ones by their /64, so the netdevs' own prefix length goes
// with it where it is not 24 (seed 002's /27s all lie in one /24). Nothing
// is returned for InfiniBand or iWARP ports (no IP subnets in their GIDs),
// for ports in one subnet,
// or where a subnet is unknown: a port without a usable GID, an address no
// netdev of node holds. Ports whose prefix lengths differ get a warning and
// nothing: NCCL takes one length per process.
func subnetRouting(node model.Node, ports []PortRef, rule GIDRule, warnings *[]string) []Var {
	subnets := map[netip.Prefix]bool{}
	byLen := map[int][]string{}
	for _, p := range ports {
		if !p.roce() {
			continue
		}
		gid, ok := selectedGID(p.Port, rule)
		if !ok {
			return nil
		}
		if gid.Is4In6() {
			v4 := gid.Unmap()
			bits, known := prefixLen(node, v4)
			if !known {
				return nil
			}
			subnets[netip.PrefixFrom(v4, bits).Masked()] = true
			byLen[bits] = append(byLen[bits], p.String())
			continue
		}
		subnets[netip.PrefixFrom(gid, 64).Masked()] = true
	}
	if len(subnets) < 2 {
		return nil
	}
	if len(byLen) > 1 {
		parts := make([]string, 0, len(byLen))
		for _, bits := range slices.Sorted(maps.Keys(byLen)) {
			parts = append(parts, fmt.Sprintf("/%d on %s", bits, strings.Join(byLen[bits], ",")))
		}
		*warnings = append(*warnings, fmt.Sprintf("selected HCAs are in different subnets of different prefix lengths (%s); NCCL_IB_SUBNET_PREFIX_LEN is one value per process: NCCL_IB_SUBNET_AWARE_ROUTING not set", strings.Join(parts, "; ")))
		return nil
	}
	vars := []Var{{"NCCL_IB_SUBNET_AWARE_ROUTING", "1"}}
	for bits := range byLen {
		if bits != defaultSubnetPrefixLen {
			vars = append(vars, Var{"NCCL_IB_SUBNET_PREFIX_LEN", strconv.Itoa(bits)})
		}
	}
	return vars
}

// prefixLen is the prefix length a netdev of node has addr with.
func prefixLen(node model.Node, addr netip.Addr) (int, bool) {
	for _, nd := range node.NetDevs {
		for _, p := range nd.Addrs {
			if p.Addr() == addr {
				return p.Bits(), true
			}
		}
	}
	return 0, false
}
