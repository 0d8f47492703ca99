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
	// PCIAddress is the HCA's PCI function, PhysFn its PF's when it is an
	// SR-IOV VF ("" otherwise): a PF and its VFs share one port.
	PCIAddress, PhysFn string
	// Unhealthy says why the HCA cannot serve a container now ("" = healthy).
	Unhealthy string
	// Degraded says why it serves slower than it should (a grey
	// condition of level Degraded): logged and exported, never withheld.
	Degraded string
	// Ports are the port numbers the resource selects, whose grey
	// conditions count.
	Ports []int
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
	var picked []model.Device
	ports := map[string][]model.Port{}
	for _, d := range node.Devices {
		ports[d.Name] = eligiblePorts(node, rules, r, d)
		if len(ports[d.Name]) > 0 && matchesIDs(r, d) {
			picked = append(picked, d)
		}
	}
	for _, d := range picked {
		if !wantsFunction(r.Functions, d, slices.ContainsFunc(picked, model.Device.IsVF)) {
			continue
		}
		pool.HCAs = append(pool.HCAs, HCA{
			Name: d.Name, NUMANode: d.NUMANode, PCIeRoot: d.PCIeRoot, PCIAddress: d.PCIAddress, PhysFn: d.PhysFn,
			Unhealthy: health.Check(node, d, ports[d.Name]).Reason, CharDevices: d.CharDevices(),
			Ports: portNumbers(ports[d.Name]),
		})
	}
	return pool
}

func portNumbers(ports []model.Port) []int {
	out := make([]int, len(ports))
	for i, p := range ports {
		out[i] = p.Number
	}
	return out
}

// WithGrey returns the pool with the grey conditions of its HCAs' selected
// ports (by HCA name, pkg/health's Tracker) folded in: an Unhealthy one
// makes a healthy HCA Unhealthy, as a port down does; a Degraded one is
// recorded, and the HCA is still offered. p is not changed.
func (p Pool) WithGrey(grey map[string][]health.Condition) Pool {
	p.HCAs = slices.Clone(p.HCAs)
	for i, h := range p.HCAs {
		unhealthy, degraded := health.Summarize(grey[h.Name], h.Ports)
		if h.Healthy() {
			p.HCAs[i].Unhealthy = unhealthy.Reason
		}
		p.HCAs[i].Degraded = degraded.Reason
	}
	return p
}

// wantsFunction applies the SR-IOV selector to d; anyVF says whether the
// resource's other selectors picked a VF (the default then takes VFs only).
func wantsFunction(f config.Functions, d model.Device, anyVF bool) bool {
	switch f {
	case config.FunctionsVFs:
		return d.IsVF()
	case config.FunctionsPFs:
		return !d.IsVF()
	case config.FunctionsAll:
		return true
	}
	return d.IsVF() || !anyVF
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

// sharesPort reports whether a and b are a PF and one of its VFs.
func sharesPort(a, b HCA) bool {
	return (a.PhysFn != "" && a.PhysFn == b.PCIAddress) || (b.PhysFn != "" && b.PhysFn == a.PCIAddress)
}

// Held returns the exclusive pool's units that the kubelet holds for
// other containers: those it did not offer as available (nor as already
// this container's). Units it leaves out for another reason (unhealthy,
// off the NUMA node the Topology Manager chose) count as held too, which
// errs on the safe side.
func (p Pool) Held(available, mustInclude []string) []string {
	if p.Resource.Mode != config.ModeExclusive {
		return nil
	}
	var held []string
	for _, h := range p.HCAs {
		if !slices.Contains(available, h.Name) && !slices.Contains(mustInclude, h.Name) {
			held = append(held, h.Name)
		}
	}
	return held
}

// Blocked maps each unit of the pool that shares its port with a held
// unit (a PF held and its VFs, or a VF held and its PF) to that held unit:
// exclusive use of a PF means no other pod gets one of its VFs, and the
// other way round.
func (p Pool) Blocked(held []string) map[string]string {
	out := map[string]string{}
	for _, name := range held {
		h, ok := p.HCA(name)
		if !ok {
			continue
		}
		for _, other := range p.HCAs {
			if sharesPort(h, other) && !slices.Contains(held, other.Name) {
				out[other.Name] = h.Name
			}
		}
	}
	return out
}
