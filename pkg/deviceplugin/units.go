package deviceplugin

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
)

// Devices are the units the kubelet is told about. An exclusive resource
// has one per HCA, named after it, with its NUMA node; a shared one has
// max_pods identical units, healthy while one of its HCAs is, spanning the
// NUMA nodes of its HCAs. A shared pool without HCAs advertises nothing.
func (p Pool) Devices() []*pluginapi.Device {
	if p.Resource.Mode == config.ModeExclusive {
		out := make([]*pluginapi.Device, len(p.HCAs))
		for i, h := range p.HCAs {
			out[i] = &pluginapi.Device{ID: h.Name, Health: pluginHealth(h.Healthy()), Topology: topology(h.NUMANode)}
		}
		return out
	}
	if len(p.HCAs) == 0 {
		return nil
	}
	healthy := len(p.healthy()) > 0
	var numa []int
	for _, h := range p.HCAs {
		numa = append(numa, h.NUMANode)
	}
	topo := topology(numa...)
	out := make([]*pluginapi.Device, p.Resource.MaxPods)
	for i := range out {
		out[i] = &pluginapi.Device{ID: p.unitID(i), Health: pluginHealth(healthy), Topology: topo}
	}
	return out
}

func pluginHealth(ok bool) string {
	if ok {
		return pluginapi.Healthy
	}
	return pluginapi.Unhealthy
}

// topology lists the NUMA nodes; nil when one is unknown (-1), which tells
// the topology manager nothing rather than something false.
func topology(nodes ...int) *pluginapi.TopologyInfo {
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	if len(nodes) == 0 || nodes[0] < 0 {
		return nil
	}
	info := &pluginapi.TopologyInfo{}
	for _, n := range nodes {
		info.Nodes = append(info.Nodes, &pluginapi.NUMANode{ID: int64(n)})
	}
	return info
}

// unitPrefix names a shared resource's units after its name: rdma/hca
// gives hca-0, hca-1, ...
func (p Pool) unitPrefix() string {
	_, name, _ := strings.Cut(p.Resource.Name, "/")
	return name + "-"
}

func (p Pool) unitID(i int) string { return p.unitPrefix() + strconv.Itoa(i) }

// isUnit reports whether id is one of the shared units advertised.
func (p Pool) isUnit(id string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(id, p.unitPrefix()))
	return strings.HasPrefix(id, p.unitPrefix()) && err == nil && n >= 0 && n < p.Resource.MaxPods && p.unitID(n) == id
}

// HCAsFor returns the HCAs that the units ids give a container: for a
// shared resource every healthy HCA of the pool, for an exclusive one the
// HCAs named. An unknown, unhealthy or missing unit is an error that names
// it, so a container is never started with less than it asked for.
func (p Pool) HCAsFor(ids []string) ([]HCA, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s: no device IDs in the request", p.Resource.Name)
	}
	var unknown []string
	if p.Resource.Mode != config.ModeExclusive {
		for _, id := range ids {
			if !p.isUnit(id) {
				unknown = append(unknown, id)
			}
		}
		if len(unknown) > 0 {
			return nil, fmt.Errorf("%s: unknown device IDs %s (units are %s0..%s)", p.Resource.Name, strings.Join(unknown, ","), p.unitPrefix(), p.unitID(p.Resource.MaxPods-1))
		}
		hcas := p.healthy()
		if len(hcas) == 0 {
			return nil, fmt.Errorf("%s: no healthy HCA on this node (%s)", p.Resource.Name, p.why())
		}
		return hcas, nil
	}
	var hcas []HCA
	var sick []string
	for _, id := range ids {
		h, ok := p.HCA(id)
		switch {
		case !ok:
			unknown = append(unknown, id)
		case !h.Healthy():
			sick = append(sick, h.Name+": "+h.Unhealthy)
		case !slices.ContainsFunc(hcas, func(x HCA) bool { return x.Name == id }):
			hcas = append(hcas, h)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("%s: unknown device IDs %s (this node has %s)", p.Resource.Name, strings.Join(unknown, ","), strings.Join(p.names(), ","))
	}
	if len(sick) > 0 {
		return nil, fmt.Errorf("%s: unhealthy: %s", p.Resource.Name, strings.Join(sick, "; "))
	}
	return hcas, nil
}

func (p Pool) names() []string {
	out := make([]string, len(p.HCAs))
	for i, h := range p.HCAs {
		out[i] = h.Name
	}
	return out
}

func (p Pool) why() string {
	if len(p.HCAs) == 0 {
		return "the resource selects none"
	}
	var out []string
	for _, h := range p.HCAs {
		out = append(out, h.Name+": "+h.Unhealthy)
	}
	return strings.Join(out, "; ")
}
