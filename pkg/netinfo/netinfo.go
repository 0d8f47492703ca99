// Package netinfo reads netdev state, addresses and the default route of a
// network namespace through netlink.
package netinfo

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Handle is a netlink handle bound to one network namespace.
type Handle struct{ h *netlink.Handle }

// newRouteHandle opens rtnetlink alone: links, addresses and routes are all
// this package reads (netlink.NewHandle() with no family also opens XFRM
// and netfilter sockets).
func newRouteHandle() (*netlink.Handle, error) { return netlink.NewHandle(unix.NETLINK_ROUTE) }

// Wrap reads through h, a netlink handle the caller keeps and closes.
func Wrap(h *netlink.Handle) *Handle { return &Handle{h} }

// Open returns a handle for the namespace file nsPath ("" = the caller's).
func Open(nsPath string) (*Handle, error) {
	if nsPath == "" {
		h, err := newRouteHandle()
		if err != nil {
			return nil, fmt.Errorf("netlink: %w", err)
		}
		return &Handle{h}, nil
	}
	target, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("network namespace %s: %w", nsPath, err)
	}
	defer target.Close()
	h, err := handleIn(target)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", nsPath, err)
	}
	return &Handle{h}, nil
}

// handleIn opens a netlink socket inside target. A socket stays bound to the
// namespace it was created in, so the thread enters target only for the
// creation.
func handleIn(target netns.NsHandle) (*netlink.Handle, error) {
	var h *netlink.Handle
	err := Within(target, func() (err error) {
		h, err = newRouteHandle()
		return err
	})
	if err != nil && h != nil {
		h.Close()
		h = nil
	}
	return h, err
}

// Within runs fn on a thread in the network namespace target, for what
// binds to the namespace of the thread that opens it: a netlink socket,
// a file under /proc/sys/net. The thread is a goroutine's of its own,
// locked to it: one that cannot go back to its namespace ends with that
// goroutine instead of running the caller's code in target. Its own
// namespace is found through /proc/thread-self, which procfs resolves
// right even when the caller is in another pid namespace than /proc's (a
// createContainer hook), unlike the /proc/PID/task/TID path
// netlink.NewHandleAt builds from getpid().
func Within(target netns.NsHandle, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.GetFromPath("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		fnErr := fn()
		if err := netns.Set(orig); err != nil {
			done <- errors.Join(fnErr, fmt.Errorf("returning to the original network namespace: %w", err))
			return // still locked: the thread ends with this goroutine
		}
		runtime.UnlockOSThread()
		done <- fnErr
	}()
	return <-done
}

// Close releases the netlink socket.
func (h *Handle) Close() { h.h.Close() }

// DefaultRouteNetDev names the netdev of the IPv4 default route, else the
// IPv6 one; "" when the namespace has none.
func (h *Handle) DefaultRouteNetDev() (string, error) {
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := h.h.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return "", fmt.Errorf("list routes: %w", err)
		}
		for _, r := range routes {
			if !isDefault(r.Dst) || r.LinkIndex == 0 {
				continue
			}
			link, err := h.h.LinkByIndex(r.LinkIndex)
			if err != nil {
				return "", fmt.Errorf("default route link %d: %w", r.LinkIndex, err)
			}
			return link.Attrs().Name, nil
		}
	}
	return "", nil
}

func isDefault(dst *net.IPNet) bool {
	if dst == nil {
		return true
	}
	ones, _ := dst.Mask.Size()
	return ones == 0
}

// Routing is what the namespace's routes (any table) say of each netdev,
// by name, read in one dump.
type Routing struct {
	// Gateways are the next hops leaving through it (each path of a
	// multipath route too): a pod's address on that netdev's subnet must
	// never be one of them.
	Gateways map[string][]netip.Addr
	// Multipath: a path of a multipath route goes through it. Tables are
	// the policy routing tables (neither main, local nor default) routing
	// through it. A move into a pod deletes those routes, and nothing
	// brings them back.
	Multipath map[string]bool
	Tables    map[string][]int
}

// Routing reads the namespace's routes once for Routing's facts.
func (h *Handle) Routing() (Routing, error) {
	routes, err := h.h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return Routing{}, fmt.Errorf("list routes: %w", err)
	}
	names := map[int]string{}
	name := func(index int) (string, error) {
		if n, ok := names[index]; ok {
			return n, nil
		}
		link, err := h.h.LinkByIndex(index)
		if err != nil {
			return "", fmt.Errorf("route link %d: %w", index, err)
		}
		names[index] = link.Attrs().Name
		return names[index], nil
	}
	out := Routing{Gateways: map[string][]netip.Addr{}, Multipath: map[string]bool{}, Tables: map[string][]int{}}
	addGateway := func(index int, gw net.IP) error {
		a, ok := netip.AddrFromSlice(gw)
		if !ok || index == 0 {
			return nil
		}
		n, err := name(index)
		if err != nil {
			return err
		}
		if !slices.Contains(out.Gateways[n], a.Unmap()) {
			out.Gateways[n] = append(out.Gateways[n], a.Unmap())
		}
		return nil
	}
	for _, r := range routes {
		paths := []int{r.LinkIndex}
		if err := addGateway(r.LinkIndex, r.Gw); err != nil {
			return Routing{}, err
		}
		for _, nh := range r.MultiPath {
			if err := addGateway(nh.LinkIndex, nh.Gw); err != nil {
				return Routing{}, err
			}
			if n, err := name(nh.LinkIndex); err == nil && nh.LinkIndex != 0 {
				out.Multipath[n] = true
			}
			paths = append(paths, nh.LinkIndex)
		}
		switch r.Table {
		case unix.RT_TABLE_MAIN, unix.RT_TABLE_LOCAL, unix.RT_TABLE_DEFAULT, unix.RT_TABLE_UNSPEC:
			continue
		}
		for _, index := range paths {
			if n, err := name(index); err == nil && index != 0 && !slices.Contains(out.Tables[n], r.Table) {
				out.Tables[n] = append(out.Tables[n], r.Table)
			}
		}
	}
	for _, gws := range out.Gateways {
		slices.SortFunc(gws, netip.Addr.Compare)
	}
	for _, t := range out.Tables {
		slices.Sort(t)
	}
	return out, nil
}

// Uses are what the namespace does with its netdevs besides addressing
// them: routes through them and the links stacked on them, read once.
type Uses struct {
	Routing
	Masters map[string]string
	Uppers  map[string][]string
}

// Uses reads Routing and Stacking.
func (h *Handle) Uses() (Uses, error) {
	routing, err := h.Routing()
	if err != nil {
		return Uses{}, err
	}
	masters, uppers, err := h.Stacking()
	if err != nil {
		return Uses{}, err
	}
	return Uses{Routing: routing, Masters: masters, Uppers: uppers}, nil
}

// Fill sets nd's gateways, master, uppers, multipath and policy tables.
func (u Uses) Fill(nd *model.NetDev) {
	nd.Gateways = u.Gateways[nd.Name]
	nd.Master, nd.Uppers = u.Masters[nd.Name], u.Uppers[nd.Name]
	nd.Multipath, nd.RouteTables = u.Multipath[nd.Name], u.Tables[nd.Name]
}

// stackedTypes are the link kinds whose IFLA_LINK names their lower device
// in this namespace (a veth's names its peer, which may be elsewhere).
var stackedTypes = []string{"macvlan", "macvtap", "vlan", "ipvlan", "ipvtap"}

// Stacking is each netdev's master (a bridge, bond or team it is a port
// of) and uppers (the netdevs stacked on it: VLANs, macvlans), by name.
func (h *Handle) Stacking() (masters map[string]string, uppers map[string][]string, err error) {
	links, err := h.h.LinkList()
	if err != nil {
		return nil, nil, fmt.Errorf("list netdevs: %w", err)
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	masters, uppers = map[string]string{}, map[string][]string{}
	for _, l := range links {
		a := l.Attrs()
		if m, ok := names[a.MasterIndex]; ok && a.MasterIndex != 0 {
			masters[a.Name] = m
		}
		if lower, ok := names[a.ParentIndex]; ok && a.ParentIndex != 0 && slices.Contains(stackedTypes, l.Type()) {
			uppers[lower] = append(uppers[lower], a.Name)
		}
	}
	for _, u := range uppers {
		slices.Sort(u)
	}
	return masters, uppers, nil
}

// NetDev reads one netdev; ok is false when the namespace has no such link.
func (h *Handle) NetDev(name string) (model.NetDev, bool, error) {
	link, err := h.h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return model.NetDev{Name: name}, false, nil
	}
	if err != nil {
		return model.NetDev{}, false, fmt.Errorf("netdev %s: %w", name, err)
	}
	return h.describe(link)
}

// All reads every netdev of the namespace but loopback.
func (h *Handle) All() ([]model.NetDev, error) {
	links, err := h.h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list netdevs: %w", err)
	}
	var out []model.NetDev
	for _, l := range links {
		if l.Attrs().Flags&net.FlagLoopback != 0 {
			continue
		}
		nd, _, err := h.describe(l)
		if err != nil {
			return nil, err
		}
		out = append(out, nd)
	}
	return out, nil
}

func (h *Handle) describe(link netlink.Link) (model.NetDev, bool, error) {
	a := link.Attrs()
	nd := model.NetDev{
		Name:      a.Name,
		Carrier:   a.RawFlags&unix.IFF_LOWER_UP != 0,
		OperState: a.OperState.String(),
		HWAddr:    a.HardwareAddr.String(),
	}
	addrs, err := h.h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nd, true, fmt.Errorf("addresses of %s: %w", a.Name, err)
	}
	for _, ad := range addrs {
		ip, ok := netip.AddrFromSlice(ad.IP)
		if !ok {
			continue
		}
		ones, _ := ad.Mask.Size()
		nd.Addrs = append(nd.Addrs, netip.PrefixFrom(ip.Unmap(), ones))
	}
	slices.SortFunc(nd.Addrs, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	return nd, true, nil
}
