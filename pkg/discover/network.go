package discover

import (
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/netinfo"
)

// addNetwork fills the netdevs of the RDMA ports and the default-route netdev
// (with the gateways their routes go through) from the chosen network
// namespace.
func (s *scan) addNetwork(node *model.Node) error {
	h, err := netinfo.Open(s.opts.NetNS)
	if err != nil {
		return err
	}
	defer h.Close()
	if node.DefaultRouteNetDev, err = h.DefaultRouteNetDev(); err != nil {
		return err
	}
	wanted := []string{}
	seen := map[string]bool{}
	add := func(name string) {
		if name != "" && !seen[name] {
			seen[name] = true
			wanted = append(wanted, name)
		}
	}
	add(node.DefaultRouteNetDev)
	for _, d := range node.Devices {
		for _, p := range d.Ports {
			add(p.NetDev)
		}
	}
	model.SortNames(wanted)
	uses, err := h.Uses()
	if err != nil {
		return err
	}
	node.NetDevs = make([]model.NetDev, 0, len(wanted))
	for _, name := range wanted {
		nd, found, err := h.NetDev(name)
		if err != nil {
			return err
		}
		if !found {
			s.warnf("netdev %s (named by sysfs) is not in this network namespace", name)
		}
		uses.Fill(&nd)
		node.NetDevs = append(node.NetDevs, nd)
	}
	return nil
}
