// Package deviceplugin serves RDMA HCAs to the kubelet through the device
// plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1). The policy is
// pure (which HCAs a resource selects, the units it advertises, what an
// allocation returns, which units to prefer) and tested without a kubelet;
// the gRPC server and the registration lifecycle sit on top of it.
package deviceplugin

import (
	"slices"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
)

// HCA is one selected RDMA device as the plugin serves it.
type HCA struct {
	Name     string
	NUMANode int    // -1 when the platform reports none
	PCIeRoot string // "" when unknown
	// Unhealthy says why the HCA cannot serve a container now ("" = healthy).
	Unhealthy string
	// CharDevices are the device nodes a container using it needs.
	CharDevices []model.CharDevice
}

// Healthy reports whether the HCA can serve a container now.
func (h HCA) Healthy() bool { return h.Unhealthy == "" }

// Pool is what one resource serves on the node: its HCAs in node order,
// unhealthy ones included (the kubelet must hear that they went bad).
type Pool struct {
	Resource config.Resource
	HCAs     []HCA
	// RDMACM is the node's rdma_cm device; nil when absent.
	RDMACM *model.CharDevice
}

// Select returns the pool of resource r on node. The HCA rules are NCCL's
// (ncclCfg, with r's include/exclude lists in place of NCCL's when r has
// them), whatever the port state, so that a port going down turns its HCA
// unhealthy instead of making it vanish. r's link layer, PCI ID and driver
// selectors narrow the result.
func Select(node model.Node, ncclCfg config.NCCL, r config.Resource) Pool {
	rules := ncclCfg
	if len(r.IncludeHCAs) > 0 {
		rules.IncludeHCAs = r.IncludeHCAs
	}
	if len(r.ExcludeHCAs) > 0 {
		rules.ExcludeHCAs = r.ExcludeHCAs
	}
	pool := Pool{Resource: r, RDMACM: node.RDMACM}
	for _, d := range node.Devices {
		ports := eligiblePorts(node, rules, r, d)
		if len(ports) == 0 || !matchesIDs(r, d) {
			continue
		}
		pool.HCAs = append(pool.HCAs, HCA{
			Name: d.Name, NUMANode: d.NUMANode, PCIeRoot: d.PCIeRoot,
			Unhealthy: health.Check(d, ports, node.RDMACM).Reason, CharDevices: d.CharDevices(),
		})
	}
	return pool
}

func eligiblePorts(node model.Node, rules config.NCCL, r config.Resource, d model.Device) []model.Port {
	var out []model.Port
	for _, p := range d.Ports {
		if ok, _ := nccl.Eligible(node, rules, nccl.PortRef{Device: d.Name, Port: p}); !ok {
			continue
		}
		if len(r.LinkLayers) > 0 && !slices.Contains(r.LinkLayers, string(p.LinkLayer)) {
			continue
		}
		out = append(out, p)
	}
	return out
}

func matchesIDs(r config.Resource, d model.Device) bool {
	return matchesID(r.PCIVendors, d.PCIVendor) && matchesID(r.PCIDevices, d.PCIDevice) &&
		(len(r.Drivers) == 0 || slices.Contains(r.Drivers, d.Driver))
}

// matchesID compares PCI IDs with or without 0x, in any case.
func matchesID(want []string, id string) bool {
	if len(want) == 0 {
		return true
	}
	norm := func(s string) string { return strings.TrimPrefix(strings.ToLower(s), "0x") }
	return slices.ContainsFunc(want, func(w string) bool { return norm(w) == norm(id) })
}

// HCA returns the named HCA of the pool.
func (p Pool) HCA(name string) (HCA, bool) {
	i := slices.IndexFunc(p.HCAs, func(h HCA) bool { return h.Name == name })
	if i < 0 {
		return HCA{}, false
	}
	return p.HCAs[i], true
}

// healthy lists the pool's healthy HCAs.
func (p Pool) healthy() []HCA {
	var out []HCA
	for _, h := range p.HCAs {
		if h.Healthy() {
			out = append(out, h)
		}
	}
	return out
}
