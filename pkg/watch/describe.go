package watch

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
)

// State is what one generation produced. The loop keeps the last good one
// and describes each rewrite as the difference from it.
type State struct {
	// Path is the spec file.
	Path string
	// Changed is true when the spec file was (re)written by this generation.
	Changed bool
	// Removed is true when the spec file was removed (nothing to describe).
	Removed bool
	Node    model.Node
	Stack   model.UserStack
	NCCL    nccl.Settings
}

// Describe lists, in words an operator can act on, what differs between
// two consecutive generations. prev is nil for the first one. It is pure:
// the same inputs give the same lines, in a stable order.
func Describe(prev *State, next State) []string {
	if prev == nil {
		if next.Removed {
			return []string{"no RDMA devices: spec removed"}
		}
		return []string{fmt.Sprintf("initial spec: %s", summary(next))}
	}
	var out []string
	if next.Removed && !prev.Removed {
		out = append(out, "spec removed: no RDMA devices left")
	}
	out = append(out, deviceChanges(prev.Node, next.Node)...)
	if prev.Node.RDMACM == nil && next.Node.RDMACM != nil {
		out = append(out, "rdma_cm device appeared")
	} else if prev.Node.RDMACM != nil && next.Node.RDMACM == nil {
		out = append(out, "rdma_cm device disappeared")
	}
	if prev.Node.NetNSMode != next.Node.NetNSMode {
		out = append(out, fmt.Sprintf("RDMA netns mode changed from %s to %s", orUnknown(prev.Node.NetNSMode), orUnknown(next.Node.NetNSMode)))
	}
	if prev.Node.DefaultRouteNetDev != next.Node.DefaultRouteNetDev {
		out = append(out, fmt.Sprintf("default route moved from %s to %s", orNone(prev.Node.DefaultRouteNetDev), orNone(next.Node.DefaultRouteNetDev)))
	}
	out = append(out, netdevChanges(prev.Node, next.Node)...)
	out = append(out, ncclChanges(prev.NCCL, next.NCCL)...)
	out = append(out, stackChanges(prev.Stack, next.Stack)...)
	if len(out) == 0 && next.Changed {
		out = append(out, "spec content changed (configuration or rendering options)")
	}
	return out
}

func summary(s State) string {
	names := s.Node.DeviceNames()
	dev := "no RDMA devices"
	if len(names) > 0 {
		dev = fmt.Sprintf("%d RDMA device(s) %s", len(names), strings.Join(names, ","))
	}
	parts := []string{dev}
	if s.Stack.Flavor != "" {
		parts = append(parts, fmt.Sprintf("%s with %d file(s)", s.Stack.Flavor, len(s.Stack.Files)))
	} else {
		parts = append(parts, "no RDMA user-space stack")
	}
	for _, v := range s.NCCL.Vars {
		if v.Name == "NCCL_IB_GID_INDEX" || v.Name == "NCCL_IB_HCA" {
			parts = append(parts, v.Name+"="+v.Value)
		}
	}
	return strings.Join(parts, ", ")
}

func deviceChanges(prev, next model.Node) []string {
	var out []string
	for _, d := range next.Devices {
		old, ok := prev.DeviceByName(d.Name)
		if !ok {
			out = append(out, fmt.Sprintf("RDMA device %s added (%s)", d.Name, deviceSummary(d)))
			continue
		}
		out = append(out, oneDeviceChanges(old, d)...)
	}
	for _, d := range prev.Devices {
		if _, ok := next.DeviceByName(d.Name); !ok {
			out = append(out, fmt.Sprintf("RDMA device %s removed", d.Name))
		}
	}
	return out
}

func deviceSummary(d model.Device) string {
	parts := []string{}
	if d.PCIAddress != "" {
		parts = append(parts, d.PCIAddress)
	}
	for _, p := range d.Ports {
		parts = append(parts, fmt.Sprintf("port %d %s %s", p.Number, p.LinkLayer, p.State))
	}
	if d.Verbs != nil {
		parts = append(parts, d.Verbs.Path)
	} else {
		parts = append(parts, "no uverbs")
	}
	return strings.Join(parts, ", ")
}

func oneDeviceChanges(old, cur model.Device) []string {
	var out []string
	name := cur.Name
	switch {
	case old.Verbs == nil && cur.Verbs != nil:
		out = append(out, fmt.Sprintf("%s: uverbs device %s appeared", name, charDev(cur.Verbs)))
	case old.Verbs != nil && cur.Verbs == nil:
		out = append(out, fmt.Sprintf("%s: uverbs device %s disappeared", name, charDev(old.Verbs)))
	case old.Verbs != nil && *old.Verbs != *cur.Verbs:
		out = append(out, fmt.Sprintf("%s: uverbs device changed from %s to %s", name, charDev(old.Verbs), charDev(cur.Verbs)))
	}
	if old.FWVersion != cur.FWVersion {
		out = append(out, fmt.Sprintf("%s: firmware changed from %s to %s", name, orUnknown(old.FWVersion), orUnknown(cur.FWVersion)))
	}
	for _, p := range cur.Ports {
		i := slices.IndexFunc(old.Ports, func(o model.Port) bool { return o.Number == p.Number })
		if i < 0 {
			out = append(out, fmt.Sprintf("%s port %d added (%s %s)", name, p.Number, p.LinkLayer, p.State))
			continue
		}
		out = append(out, portChanges(name, old.Ports[i], p)...)
	}
	for _, p := range old.Ports {
		if !slices.ContainsFunc(cur.Ports, func(c model.Port) bool { return c.Number == p.Number }) {
			out = append(out, fmt.Sprintf("%s port %d removed", name, p.Number))
		}
	}
	return out
}

func portChanges(dev string, old, cur model.Port) []string {
	var out []string
	where := fmt.Sprintf("%s port %d", dev, cur.Number)
	if old.State != cur.State {
		out = append(out, fmt.Sprintf("%s state changed from %s to %s", where, orUnknown(string(old.State)), orUnknown(string(cur.State))))
	}
	if old.LinkLayer != cur.LinkLayer {
		out = append(out, fmt.Sprintf("%s link layer changed from %s to %s", where, old.LinkLayer, cur.LinkLayer))
	}
	if old.NetDev != cur.NetDev {
		out = append(out, fmt.Sprintf("%s netdev changed from %s to %s", where, orNone(old.NetDev), orNone(cur.NetDev)))
	}
	oldG := gidMap(old.GIDs)
	curG := gidMap(cur.GIDs)
	var added, removed []string
	for _, g := range cur.GIDs {
		if o, ok := oldG[g.Index]; !ok || o != g {
			added = append(added, gidString(g))
		}
	}
	for _, g := range old.GIDs {
		if c, ok := curG[g.Index]; !ok || c != g {
			removed = append(removed, gidString(g))
		}
	}
	if len(added)+len(removed) > 0 {
		out = append(out, fmt.Sprintf("%s GID table changed: %s", where, plusMinus(added, removed)))
	}
	return out
}

func gidMap(gids []model.GID) map[int]model.GID {
	m := make(map[int]model.GID, len(gids))
	for _, g := range gids {
		m[g.Index] = g
	}
	return m
}

func gidString(g model.GID) string {
	addr := g.GID.String()
	if v4, ok := g.IPv4(); ok {
		addr = v4.String()
	}
	t := string(g.Type)
	if t == "" {
		t = "unknown type"
	}
	return fmt.Sprintf("[%d] %s %s", g.Index, addr, t)
}

func netdevChanges(prev, next model.Node) []string {
	var out []string
	for _, nd := range next.NetDevs {
		old, ok := prev.NetDevByName(nd.Name)
		if !ok {
			continue // a new netdev comes with a port or route change, described there
		}
		if old.Carrier != nd.Carrier {
			out = append(out, fmt.Sprintf("netdev %s carrier %s", nd.Name, upDown(nd.Carrier)))
		}
		added := prefixDiff(nd.Addrs, old.Addrs)
		removed := prefixDiff(old.Addrs, nd.Addrs)
		if len(added)+len(removed) > 0 {
			out = append(out, fmt.Sprintf("netdev %s addresses changed: %s", nd.Name, plusMinus(added, removed)))
		}
	}
	return out
}

func prefixDiff(a, b []netip.Prefix) []string {
	var out []string
	for _, p := range a {
		if !slices.Contains(b, p) {
			out = append(out, p.String())
		}
	}
	return out
}

func ncclChanges(prev, next nccl.Settings) []string {
	var out []string
	for _, v := range next.Vars {
		old, ok := prev.Get(v.Name)
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s set to %s", v.Name, v.Value))
		case old != v.Value:
			out = append(out, fmt.Sprintf("%s changed from %s to %s", v.Name, old, v.Value))
		}
	}
	for _, v := range prev.Vars {
		if _, ok := next.Get(v.Name); !ok {
			out = append(out, fmt.Sprintf("%s no longer set (was %s)", v.Name, v.Value))
		}
	}
	return out
}

func stackChanges(prev, next model.UserStack) []string {
	var out []string
	if prev.Flavor != next.Flavor {
		out = append(out, fmt.Sprintf("RDMA user-space stack changed from %s to %s", orNone(string(prev.Flavor)), orNone(string(next.Flavor))))
	}
	key := func(f model.HostFile) string {
		if f.Symlink != "" {
			return f.Path + " -> " + f.Symlink
		}
		return f.Path
	}
	oldSet := map[string]bool{}
	for _, f := range prev.Files {
		oldSet[key(f)] = true
	}
	newSet := map[string]bool{}
	for _, f := range next.Files {
		newSet[key(f)] = true
	}
	var added, removed []string
	for _, f := range next.Files {
		if k := key(f); !oldSet[k] {
			added = append(added, k)
		}
	}
	for _, f := range prev.Files {
		if k := key(f); !newSet[k] {
			removed = append(removed, k)
		}
	}
	if len(added)+len(removed) > 0 {
		out = append(out, fmt.Sprintf("library file set changed (rdma-core upgraded or reinstalled?): %s", plusMinus(added, removed)))
	}
	for _, p := range next.Problems {
		if !slices.Contains(prev.Problems, p) {
			out = append(out, "user-space stack problem: "+p)
		}
	}
	for _, p := range prev.Problems {
		if !slices.Contains(next.Problems, p) {
			out = append(out, "user-space stack problem resolved: "+p)
		}
	}
	return out
}

// plusMinus prints "+a +b -c", keeping long lists readable.
func plusMinus(added, removed []string) string {
	const max = 8
	var parts []string
	for i, a := range added {
		if i == max {
			parts = append(parts, fmt.Sprintf("(+%d more)", len(added)-max))
			break
		}
		parts = append(parts, "+"+a)
	}
	for i, r := range removed {
		if i == max {
			parts = append(parts, fmt.Sprintf("(-%d more)", len(removed)-max))
			break
		}
		parts = append(parts, "-"+r)
	}
	return strings.Join(parts, " ")
}

func charDev(c *model.CharDevice) string {
	return fmt.Sprintf("%s (%d:%d)", c.Path, c.Major, c.Minor)
}

func upDown(b bool) string {
	if b {
		return "up"
	}
	return "down"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
