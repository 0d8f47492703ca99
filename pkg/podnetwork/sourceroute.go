package podnetwork

import "net/netip"

// Source routing of a pod's interfaces that share a subnet. With two of
// them in one subnet, the main table holds one connected route per
// interface for the same destination and the kernel uses the first for
// every source address: the RoCE traffic of the second HCA, and its ARP
// replies, would leave by the first one's netdev. Each such interface
// therefore gets a table of its own, reached by a rule per address.
//
// The numbers come from the interface's position in the sandbox's plan
// (the order its attachments are applied in), so the same plan always
// gets the same tables, and they are recorded with each attachment for
// whoever undoes it. Both stay clear of the kernel's own: tables 253-255
// (default, main, local) and rules 0 (local), 32766 (main) and 32767
// (default); every rule here comes before main's.
const (
	// SourceTableBase is the table of the interface at position 0;
	// position i gets SourceTableBase+i.
	SourceTableBase = 1000
	// SourceRulePriorityBase is the priority of the rules of the interface
	// at position 0; position i gets SourceRulePriorityBase+i.
	SourceRulePriorityBase = 1000
)

// SourceRouting is how one interface of a pod keeps its own traffic: a
// rule "from <addr> lookup Table" at Priority for each of From, and in
// Table the connected route of each of From's subnets through the
// interface, with the interface's other routes of those families.
type SourceRouting struct {
	Table    int            `json:"table"`
	Priority int            `json:"priority"`
	From     []netip.Prefix `json:"from"`
}

// PlanSourceRouting decides, for the interfaces of one pod, which need
// source routing: podAddrs[i] are the addresses of the interface at
// position i of the sandbox's plan. An address whose subnet overlaps one
// of another interface's (same family; link-local ones left out: every
// IPv6 interface has fe80::/64, and a link-local route names its
// interface anyway) is routed by its source; the result has the
// interface's SourceRouting at i, nil where no address needs it. One
// interface in a subnet, or interfaces in different subnets, get none.
func PlanSourceRouting(podAddrs [][]netip.Prefix) []*SourceRouting {
	out := make([]*SourceRouting, len(podAddrs))
	for i, addrs := range podAddrs {
		var from []netip.Prefix
		for _, a := range addrs {
			if routable(a) && sharesSubnet(a, i, podAddrs) {
				from = append(from, a)
			}
		}
		if from != nil {
			out[i] = &SourceRouting{Table: SourceTableBase + i, Priority: SourceRulePriorityBase + i, From: from}
		}
	}
	return out
}

// sharesSubnet: a's subnet overlaps that of an address of an interface
// other than the one at position self.
func sharesSubnet(a netip.Prefix, self int, podAddrs [][]netip.Prefix) bool {
	for j, others := range podAddrs {
		if j == self {
			continue
		}
		for _, b := range others {
			if routable(b) && a.Masked().Overlaps(b.Masked()) {
				return true
			}
		}
	}
	return false
}

func routable(p netip.Prefix) bool {
	return p.IsValid() && !p.Addr().IsLinkLocalUnicast()
}
