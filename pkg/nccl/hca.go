package nccl

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// SelectPorts returns the active ports that go into NCCL_IB_HCA: every
// active InfiniBand or RoCE port of the devices in scope that NCCL's rule
// lets in (Eligible). A port of another link layer (EFA's, unspecified)
// is never one: NCCL's IB transport skips it.
func SelectPorts(node model.Node, cfg config.NCCL, inScope []string, warnings *[]string) []PortRef {
	var out []PortRef
	for _, d := range node.Devices {
		if inScope != nil && !slices.Contains(inScope, d.Name) {
			continue
		}
		for _, p := range d.Ports {
			ref := PortRef{Device: d.Name, Port: p, IWARP: d.IWARP()}
			eligible, named := Eligible(node, cfg, ref)
			switch {
			case !eligible:
				continue
			case !IBTransportPort(p):
				if named {
					*warnings = append(*warnings, fmt.Sprintf("%s has link layer %s, which NCCL's IB transport skips; left out of NCCL_IB_HCA", ref, p.LinkLayer))
				}
				continue
			case !p.Active():
				if named {
					*warnings = append(*warnings, fmt.Sprintf("%s is %s; left out of NCCL_IB_HCA", ref, p.State))
				}
				continue
			}
			out = append(out, ref)
		}
	}
	return out
}

// IBTransportPort reports whether NCCL's IB transport (NCCL_IB_*) can use
// the port: InfiniBand or Ethernet (RoCE). NCCL skips a port of any other
// link layer, such as an EFA port, which NCCL reaches only through a net
// plugin (aws-ofi-nccl).
func IBTransportPort(p model.Port) bool {
	return p.LinkLayer == model.LinkLayerInfiniBand || p.LinkLayer == model.LinkLayerEthernet
}

// Eligible reports whether the config lets ref into NCCL_IB_HCA, whatever
// its state: not the default-route device (the TCP/management NIC) unless
// the config keeps it, filtered by the include and exclude lists (entries
// NAME or NAME:PORT). named is true when the include list names it.
func Eligible(node model.Node, cfg config.NCCL, ref PortRef) (eligible, named bool) {
	named = matchesAny(cfg.IncludeHCAs, ref)
	switch {
	case len(cfg.IncludeHCAs) > 0 && !named:
		return false, false
	case matchesAny(cfg.ExcludeHCAs, ref):
		return false, named
	case !named && cfg.ExcludeDefaultRouteHCA && node.CarriesDefaultRoute(ref.Device):
		return false, false
	}
	return true, named
}

func matchesAny(patterns []string, ref PortRef) bool {
	for _, pat := range patterns {
		name, port, hasPort := strings.Cut(pat, ":")
		if name == ref.Device && (!hasPort || port == strconv.Itoa(ref.Port.Number)) {
			return true
		}
	}
	return false
}

// hcaList renders NCCL_IB_HCA. NCCL matches names by prefix unless the list
// starts with "=", so "mlx5_1" would also select mlx5_10; the exact form is
// used only when the node has such names, keeping the familiar form elsewhere.
func hcaList(node model.Node, ports []PortRef) string {
	refs := make([]string, len(ports))
	for i, p := range ports {
		refs[i] = p.String()
	}
	list := strings.Join(refs, ",")
	if prefixAmbiguous(node.DeviceNames(), ports) {
		return "=" + list
	}
	return list
}

func prefixAmbiguous(all []string, ports []PortRef) bool {
	for _, p := range ports {
		for _, other := range all {
			if other != p.Device && strings.HasPrefix(other, p.Device) {
				return true
			}
		}
	}
	return false
}
