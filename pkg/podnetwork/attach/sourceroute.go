package attach

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/netinfo"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
)

// arpSettings keep ARP on the interface that holds the address, for a pod
// with several interfaces in one subnet (where every interface would
// otherwise answer for every address, and ask with any of them):
// arp_ignore=1 answers a request only on the interface holding the
// address asked for; arp_announce=2 asks with the address of the
// interface the request leaves by. rp_filter is left as the namespace has
// it: a packet to an interface's address comes back, on the reverse-path
// check, by that address's rule to that interface's table, so even the
// strict mode (1) finds the interface the packet came in by. Keyed by
// the kernel's index of each in ipv4_devconf (IPV4_DEVCONF_*).
var arpSettings = []struct {
	name    string
	devconf int
	value   uint32
}{
	{"arp_ignore", ipv4DevconfARPIgnore, 1},
	{"arp_announce", ipv4DevconfARPAnnounce, 2},
}

// From linux/ip.h and linux/if_link.h; x/sys/unix has neither.
const (
	ipv4DevconfARPAnnounce = 18
	ipv4DevconfARPIgnore   = 19
	iflaInetConf           = 1
)

// routeBySource puts into sr's table the connected route of each of
// sr.From's subnets through link, as the kernel makes it in the main
// table, and link's other routes of those families (routes); then a rule
// from each address of sr.From to that table, and, for IPv4, the ARP
// settings of link. On error the rules added are removed again; the
// table's routes go with the link, which the caller gives back.
func (h *handles) routeBySource(link netlink.Link, sr podnetwork.SourceRouting, routes []SavedRoute) error {
	name := link.Attrs().Name
	fail := func(err error) error {
		return errors.Join(fmt.Errorf("source routing of %s (table %d): %w", name, sr.Table, err),
			removeSourceRules(h.pod, name, sr))
	}
	for _, p := range sr.From {
		if err := h.pod.RouteReplace(connectedRoute(link, p, sr.Table)); err != nil {
			return fail(fmt.Errorf("route %s: %w", p.Masked(), err))
		}
	}
	for _, r := range routes {
		if !hasFamilyOf(sr.From, r.Dst.Addr()) {
			continue
		}
		if err := h.pod.RouteReplace(r.through(link, sr.Table)); err != nil {
			return fail(fmt.Errorf("route %s: %w", r.Dst, err))
		}
	}
	for _, p := range sr.From {
		if err := h.pod.RuleAdd(sourceRule(sr, p.Addr())); err != nil && !errors.Is(err, unix.EEXIST) {
			return fail(fmt.Errorf("rule from %s: %w", p.Addr(), err))
		}
	}
	if !hasFamilyOf(sr.From, netip.IPv4Unspecified()) {
		return nil
	}
	if err := netinfo.Within(h.podNS, func() error { return setARP(link) }); err != nil {
		return fail(err)
	}
	return nil
}

// removeSourceRules removes the rules routeBySource added for the
// interface name; rules already gone are not an error.
func removeSourceRules(h *netlink.Handle, name string, sr podnetwork.SourceRouting) error {
	var errs []error
	for _, p := range sr.From {
		if err := h.RuleDel(sourceRule(sr, p.Addr())); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("removing the rule from %s to table %d of %s: %w", p.Addr(), sr.Table, name, err))
		}
	}
	return errors.Join(errs...)
}

// connectedRoute is p's subnet through link in table, as the kernel's own
// route in the main table: for IPv4 of link scope, from p's address.
func connectedRoute(link netlink.Link, p netip.Prefix, table int) *netlink.Route {
	r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: ipNet(p), Table: table}
	if p.Addr().Is4() {
		r.Scope = netlink.SCOPE_LINK
		r.Src = p.Addr().AsSlice()
	}
	return r
}

// sourceRule is "from addr lookup sr.Table" at sr.Priority.
func sourceRule(sr podnetwork.SourceRouting, addr netip.Addr) *netlink.Rule {
	rule := netlink.NewRule()
	rule.Priority = sr.Priority
	rule.Table = sr.Table
	rule.Src = &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(addr.BitLen(), addr.BitLen())} // its family the rule's
	return rule
}

func hasFamilyOf(prefixes []netip.Prefix, a netip.Addr) bool {
	return slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Addr().Is4() == a.Is4() })
}

// setARP sets arpSettings on link through rtnetlink (RTM_SETLINK with the
// interface's IPv4 devconf), not /proc/sys, which a container mounts
// read-only. It runs in the pod's namespace (netinfo.Within), where the
// request's socket is opened.
func setARP(link netlink.Link) error {
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(link.Attrs().Index)
	req.AddData(msg)
	spec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
	conf := spec.AddRtAttr(unix.AF_INET, nil).AddRtAttr(iflaInetConf, nil)
	var set []string
	for _, s := range arpSettings {
		conf.AddRtAttr(s.devconf, nl.Uint32Attr(s.value))
		set = append(set, fmt.Sprintf("net.ipv4.conf.%s.%s=%d", link.Attrs().Name, s.name, s.value))
	}
	req.AddData(spec)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("%s: %w", strings.Join(set, ", "), err)
	}
	return nil
}
