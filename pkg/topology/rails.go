// Package topology is the pure rule for where a node's HCAs sit in the
// fabric. In a rail-optimized cluster NIC i of every node is wired to rail
// i's leaf switch, so two ranks talk within one leaf only when their HCAs
// share a rail: the rail each HCA is on is what a scheduler needs to keep a
// gang's traffic off the spine.
package topology

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Rails returns the rail of each HCA of node that has one, by HCA name, and
// notes saying why the subnet rule named none where it did not. The rules,
// in order:
//   - the first [[topology.rails]] entry of cfg whose selectors all match
//     the HCA names its rail;
//   - an SR-IOV VF none names is on its PF's rail: its traffic leaves
//     through the PF's port;
//   - the node's other RoCE HCAs, but the one carrying the default route
//     (the management NIC, on no rail), are on the rail named after their
//     netdev's IPv4 subnet ("25.11.128.32/27") when each is in a subnet of
//     its own, the addressing of a rail-per-subnet fabric; when two share
//     one, the subnet tells no rail apart and none gets one.
//
// InfiniBand HCAs (and EFA's) get a rail from the config alone.
func Rails(node model.Node, cfg config.Topology) (rails map[string]string, notes []string) {
	rails = map[string]string{}
	var bySubnet []model.Device
	for _, d := range node.Devices {
		if r, ok := configured(d, cfg.Rails); ok {
			rails[d.Name] = r
			continue
		}
		if _, hasPF := node.PFOf(d); hasPF || d.Transport() != model.TransportRoCE || node.CarriesDefaultRoute(d.Name) {
			continue
		}
		bySubnet = append(bySubnet, d)
	}
	subnetRails, notes := railsBySubnet(node, bySubnet)
	for hca, r := range subnetRails {
		rails[hca] = r
	}
	for _, d := range node.Devices {
		if _, named := rails[d.Name]; named {
			continue
		}
		if pf, ok := node.PFOf(d); ok && rails[pf.Name] != "" {
			rails[d.Name] = rails[pf.Name]
		}
	}
	return rails, notes
}

// configured is the rail of the first entry that matches d.
func configured(d model.Device, entries []config.Rail) (string, bool) {
	netdevs := d.NetDevs()
	for _, r := range entries {
		if r.Matches(d.Name, d.PCIAddress, netdevs) {
			return r.Rail, true
		}
	}
	return "", false
}

// railsBySubnet names each HCA's rail after its IPv4 subnet, when no two of
// hcas share one.
func railsBySubnet(node model.Node, hcas []model.Device) (map[string]string, []string) {
	var notes []string
	subnetOf := map[string]netip.Prefix{}
	holders := map[netip.Prefix][]string{}
	for _, d := range hcas {
		subnets := ipv4Subnets(node, d)
		switch len(subnets) {
		case 0:
			notes = append(notes, fmt.Sprintf("%s has no IPv4 address: no rail from its subnet", d.Name))
		case 1:
			subnetOf[d.Name] = subnets[0]
			holders[subnets[0]] = append(holders[subnets[0]], d.Name)
		default:
			notes = append(notes, fmt.Sprintf("%s is in several IPv4 subnets (%s): no rail from its subnet", d.Name, joinPrefixes(subnets)))
		}
	}
	for _, d := range hcas {
		if s, ok := subnetOf[d.Name]; ok && len(holders[s]) > 1 && holders[s][0] == d.Name {
			notes = append(notes, fmt.Sprintf("%s share the subnet %s: the node's subnets tell no rail apart, so no HCA gets one from its subnet; name rails in [[topology.rails]]",
				strings.Join(holders[s], " and "), s))
		}
	}
	if len(holders) < len(subnetOf) {
		return nil, notes
	}
	rails := make(map[string]string, len(subnetOf))
	for hca, s := range subnetOf {
		rails[hca] = s.String()
	}
	return rails, notes
}

// ipv4Subnets are the IPv4 subnets of d's ports' netdevs, each once, in
// the order the ports and addresses come.
func ipv4Subnets(node model.Node, d model.Device) []netip.Prefix {
	var out []netip.Prefix
	for _, name := range d.NetDevs() {
		nd, ok := node.NetDevByName(name)
		if !ok {
			continue
		}
		for _, a := range nd.Addrs {
			if s := a.Masked(); a.Addr().Is4() && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}
