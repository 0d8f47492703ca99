package nccl

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Var is one NCCL setting.
type Var struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Settings are the computed variables, in a stable order, and the reasons
// an operator should look closer.
type Settings struct {
	Vars     []Var
	Warnings []string
}

// Get returns the value of name and whether it is set.
func (s Settings) Get(name string) (string, bool) {
	for _, v := range s.Vars {
		if v.Name == name {
			return v.Value, true
		}
	}
	return "", false
}

// Scope narrows the computation to one container. The zero Scope is the
// whole node as seen from the host's network namespace.
type Scope struct {
	// Devices limits NCCL_IB_HCA to the RDMA devices the container got; nil = all.
	Devices []string
	// HeldAddrs are the addresses of the container's network namespace; nil
	// means "the host's namespace" and leaves NCCL's rule alone.
	HeldAddrs []netip.Addr
	// DefaultRouteNetDev is the container's default-route netdev when
	// computed for a container namespace; "" falls back to the node's.
	DefaultRouteNetDev string
}

// PortRef names one port of one device.
type PortRef struct {
	Device string
	Port   model.Port
	// IWARP is set for a port of an iWARP device (model.Device.IWARP),
	// whose Ethernet link layer is not RoCE's.
	IWARP bool
}

// roce reports whether NCCL's RoCE GID rule is the port's: an Ethernet
// port of a device that is not iWARP. NCCL itself applies that rule to
// every Ethernet port, but on an iWARP port it has one GID to walk (the
// table holds one entry), so its pick is index 0 whatever the rule says;
// that GID is no address's (erdma in iWARP mode puts its MAC there), so no
// container address can be matched to it either.
func (p PortRef) roce() bool {
	return p.Port.LinkLayer == model.LinkLayerEthernet && !p.IWARP
}

func (p PortRef) String() string { return p.Device + ":" + strconv.Itoa(p.Port.Number) }

// Compute returns the NCCL settings for node under cfg and scope.
func Compute(node model.Node, cfg config.NCCL, scope Scope) Settings {
	var s Settings
	rule := gidRule(cfg, scope)
	ports := SelectPorts(node, cfg, scope.Devices, &s.Warnings)
	if scope.HeldAddrs != nil {
		ports = dropUnreachableRoCE(ports, rule, &s.Warnings)
	}
	if len(ports) > 0 {
		s.Vars = append(s.Vars, Var{"NCCL_IB_DISABLE", "0"}, Var{"NCCL_IB_HCA", hcaList(node, ports)})
		if idx, ok := gidIndex(ports, rule, &s.Warnings); ok {
			s.Vars = append(s.Vars, Var{"NCCL_IB_GID_INDEX", strconv.Itoa(idx)})
		}
		s.Vars = append(s.Vars, subnetRouting(node, ports, rule, &s.Warnings)...)
	} else if others := otherTransportPorts(node, scope.Devices); others > 0 {
		s.Warnings = append(s.Warnings, fmt.Sprintf("no active InfiniBand or RoCE port selected (%d of link layer %s, e.g. EFA, which NCCL's IB transport skips): NCCL_IB_HCA not set", others, model.LinkLayerUnspecified))
	} else {
		s.Warnings = append(s.Warnings, "no active RDMA port selected: NCCL_IB_HCA not set")
	}
	ifname := cfg.SocketIfname
	if ifname == "" {
		ifname = scope.DefaultRouteNetDev
	}
	if ifname == "" {
		ifname = node.DefaultRouteNetDev
	}
	if ifname != "" {
		s.Vars = append(s.Vars, Var{"NCCL_SOCKET_IFNAME", ifname})
	} else {
		s.Warnings = append(s.Warnings, "no default route: NCCL_SOCKET_IFNAME not set")
	}
	s.Vars = withTunables(s.Vars, cfg.Tunables)
	return s
}

// otherTransportPorts counts the ports in scope that NCCL's IB transport
// cannot use (IBTransportPort).
func otherTransportPorts(node model.Node, inScope []string) int {
	n := 0
	for _, d := range node.Devices {
		if inScope != nil && !slices.Contains(inScope, d.Name) {
			continue
		}
		for _, p := range d.Ports {
			if !IBTransportPort(p) {
				n++
			}
		}
	}
	return n
}

// NodeGIDRule is NCCL's GID rule under cfg for a process in the host's
// network namespace (the index a ResourceSlice advertises per port).
func NodeGIDRule(cfg config.NCCL) GIDRule { return gidRule(cfg, Scope{}) }

func gidRule(cfg config.NCCL, scope Scope) GIDRule {
	rule := GIDRule{Family: FamilyIPv4, RoCEVersion: cfg.RoCEVersion}
	if cfg.AddrFamily == config.AddrFamilyIPv6 {
		rule.Family = FamilyIPv6
	}
	rule.Range = cfg.AddrRange.Prefix // zero: no range
	if scope.HeldAddrs != nil {
		held := map[netip.Addr]bool{}
		for _, a := range scope.HeldAddrs {
			held[a.Unmap()] = true
		}
		rule.Held = func(a netip.Addr) bool { return held[a] }
	}
	return rule
}

// dropUnreachableRoCE leaves out the RoCE ports that have no usable GID for
// a container's network namespace, when at least one RoCE port has one: the
// kernel refuses a RoCE GID whose netdev lives in another namespace, so NCCL
// would fail on such a port instead of using the ones that work. When no
// RoCE port has a usable GID the list is left whole (and gidIndex says why):
// dropping all would leave NCCL_IB_HCA unset, which means every HCA.
func dropUnreachableRoCE(ports []PortRef, rule GIDRule, warnings *[]string) []PortRef {
	var kept []PortRef
	var dropped []string
	reachable := false
	for _, p := range ports {
		if p.roce() {
			if _, ok := SelectGIDIndex(p.Port, rule); !ok {
				dropped = append(dropped, p.String())
				continue
			}
			reachable = true
		}
		kept = append(kept, p)
	}
	if !reachable || len(dropped) == 0 {
		return ports
	}
	*warnings = append(*warnings, fmt.Sprintf("left out of NCCL_IB_HCA: %s (RoCE, no GID for the container's addresses)", strings.Join(dropped, ",")))
	return kept
}

// withTunables adds the site's settings; a tunable naming a computed key
// replaces it, because the site's word is final on its own fabric.
func withTunables(vars []Var, tunables map[string]string) []Var {
	names := make([]string, 0, len(tunables))
	for k := range tunables {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		i := slices.IndexFunc(vars, func(v Var) bool { return v.Name == name })
		if i >= 0 {
			vars[i].Value = tunables[name]
		} else {
			vars = append(vars, Var{name, tunables[name]})
		}
	}
	return vars
}

// gidIndex computes NCCL's pick on every selected RoCE port. It returns
// false when no selected port is RoCE (InfiniBand needs no GID index, and
// an iWARP port's only GID is index 0, which NCCL picks by itself) or no
// RoCE port has a usable GID: a value then would only pin NCCL to a GID that
// cannot route, so the choice is left to NCCL and a warning says why.
func gidIndex(ports []PortRef, rule GIDRule, warnings *[]string) (int, bool) {
	byIndex := map[int][]string{}
	var iwarp []string
	for _, p := range ports {
		if p.IWARP {
			iwarp = append(iwarp, p.String())
		}
		if !p.roce() {
			continue
		}
		idx, ok := SelectGIDIndex(p.Port, rule)
		if !ok {
			*warnings = append(*warnings, fmt.Sprintf("%s has no usable %s RoCE v%d GID (NCCL would pick index %d)", p, familyName(rule.Family), rule.RoCEVersion, idx))
			continue
		}
		byIndex[idx] = append(byIndex[idx], p.String())
	}
	if len(byIndex) == 0 {
		if len(*warnings) > 0 {
			*warnings = append(*warnings, "NCCL_IB_GID_INDEX not set: no selected RoCE port has a usable GID")
		}
		return 0, false
	}
	chosen, most := -1, 0
	for idx, refs := range byIndex {
		if len(refs) > most || (len(refs) == most && idx < chosen) {
			chosen, most = idx, len(refs)
		}
	}
	if len(byIndex) > 1 {
		*warnings = append(*warnings, disagreement(byIndex, chosen))
	}
	if len(iwarp) > 0 && chosen != 0 {
		*warnings = append(*warnings, fmt.Sprintf("NCCL_IB_GID_INDEX=%d is one value per process, and the iWARP ports %s hold GID index 0 alone: NCCL would ask them for an index they do not have (leave them or the RoCE ports out with nccl.exclude_hcas)", chosen, strings.Join(iwarp, ",")))
	}
	return chosen, true
}

func disagreement(byIndex map[int][]string, chosen int) string {
	idxs := make([]int, 0, len(byIndex))
	for idx := range byIndex {
		idxs = append(idxs, idx)
	}
	sort.Ints(idxs)
	parts := make([]string, 0, len(idxs))
	for _, idx := range idxs {
		parts = append(parts, fmt.Sprintf("index %d on %s", idx, strings.Join(byIndex[idx], ",")))
	}
	return fmt.Sprintf("selected HCAs disagree on the RoCE GID index (%s); NCCL_IB_GID_INDEX is one value per process, using %d",
		strings.Join(parts, "; "), chosen)
}

func familyName(f Family) string {
	if f == FamilyIPv6 {
		return "AF_INET6"
	}
	return "AF_INET"
}
