// Package attach does pod networking's netlink work: it moves a host
// netdev into a pod's network namespace and back, or gives the pod a macvlan
// sub-interface of it, with the addresses, MTU and routes that
// pkg/podnetwork planned, and the source routing of interfaces that share
// a subnet (sourceroute.go). Each step that fails undoes the ones before it, and
// every Record says enough to undo the whole attachment later, by another
// process (the driver's checkpoint holds it).
package attach

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/netinfo"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
)

// Record is one attachment as made: the plan, the interface's hardware
// address and, for a move, the host netdev's state to restore and what
// identifies it in the pod's namespace, where the pod may change names
// and hardware addresses but neither an ifindex nor a kind.
type Record struct {
	podnetwork.Attachment
	HWAddr string `json:"hwAddr"`
	// Kind is a moved netdev's link kind (netlink.Link.Type()), from Plan.
	Kind string `json:"kind,omitempty"`
	// PodIndex is a moved netdev's ifindex in the pod's namespace, once
	// it got there. Records from before have neither.
	PodIndex int    `json:"podIndex,omitempty"`
	Saved    *Saved `json:"saved,omitempty"`
	// InPod is the interface as the pod's namespace holds it once set up.
	InPod *Observed `json:"inPod,omitempty"`
	// SourceRouting, when the pod holds other interfaces in its subnet,
	// is the table, rules and ARP settings that keep its traffic on it
	// (PlanSourceRouting): Detach removes the rules.
	SourceRouting *podnetwork.SourceRouting `json:"sourceRouting,omitempty"`
}

// Observed is an interface as read back from the pod's namespace.
type Observed struct {
	Name   string         `json:"name"`
	HWAddr string         `json:"hwAddr"`
	Addrs  []netip.Prefix `json:"addrs,omitempty"`
}

// PodAddrs are the addresses the attachment gives the pod: the planned
// ones, or for a move that plans none, the netdev's own.
func (r Record) PodAddrs() []netip.Prefix {
	if r.Addrs == nil && r.Saved != nil {
		return r.Saved.Addrs
	}
	return r.Addrs
}

// podRoutes are the routes the attachment gives the pod: a moved netdev's
// own whose gateway its addresses in the pod reach (all of them when it
// keeps the node's addresses; those of the subnet when it got another
// address there), then the planned ones.
func (r Record) podRoutes() []SavedRoute {
	var own []SavedRoute
	if r.Mode == v1alpha1.ModeMove && r.Saved != nil {
		addrs := r.PodAddrs()
		for _, route := range r.Saved.Routes {
			if !route.Gw.IsValid() || slices.ContainsFunc(addrs, func(p netip.Prefix) bool { return p.Masked().Contains(route.Gw) }) {
				own = append(own, route)
			}
		}
	}
	return slices.Concat(own, planned(r.Routes))
}

// Saved is a host netdev's state in the node's namespace before a move:
// moving a netdev flushes its addresses and routes.
type Saved struct {
	Name   string         `json:"name"`
	MTU    int            `json:"mtu"`
	Addrs  []netip.Prefix `json:"addrs,omitempty"`
	Routes []SavedRoute   `json:"routes,omitempty"`
}

// SavedRoute is a route through the netdev that its addresses do not
// bring back by themselves (not the kernel's connected routes).
type SavedRoute struct {
	Dst    netip.Prefix `json:"dst"`
	Gw     netip.Addr   `json:"gw,omitempty"`
	Metric int          `json:"metric,omitempty"`
}

// Namespaces are the two network namespaces an attachment joins.
type Namespaces struct {
	Node netns.NsHandle
	Pod  netns.NsHandle
}

// Open opens the node's namespace (the caller's, nodePath "") and the
// pod's, by path.
func Open(nodePath, podPath string) (Namespaces, error) {
	n, err := OpenNode(nodePath)
	if err != nil {
		return Namespaces{}, err
	}
	if n.Pod, err = netns.GetFromPath(podPath); err != nil {
		n.Node.Close()
		return Namespaces{}, fmt.Errorf("pod network namespace %s: %w", podPath, err)
	}
	// A runtime that names the node's own namespace as the pod's (a
	// hostNetwork sandbox reported wrong, a hostile or broken plugin)
	// would have the node's netdev "moved" within the node and given the
	// pod's addresses there.
	if n.Pod.Equal(n.Node) {
		n.Close()
		return Namespaces{}, fmt.Errorf("pod network namespace %s is the node's own: nothing is attached there", podPath)
	}
	return n, nil
}

// OpenNode opens the node's namespace alone, for undoing the attachments
// of a pod whose namespace is gone: Detach then restores a moved netdev
// found back in the node's namespace and finds no sub-interface to delete.
func OpenNode(nodePath string) (Namespaces, error) {
	node, err := netns.Get()
	if nodePath != "" {
		node, err = netns.GetFromPath(nodePath)
	}
	if err != nil {
		return Namespaces{}, fmt.Errorf("node network namespace: %w", err)
	}
	return Namespaces{Node: node, Pod: netns.None()}, nil
}

// Close closes both handles.
func (n Namespaces) Close() {
	n.Node.Close()
	if n.Pod.IsOpen() {
		n.Pod.Close()
	}
}

// PodLinkNames are the names of the links the pod's namespace holds now:
// names a default-named interface must not take (podnetwork.NameInterfaces).
func PodLinkNames(ns Namespaces) (map[string]bool, error) {
	pod, err := netlink.NewHandleAt(ns.Pod)
	if err != nil {
		return nil, fmt.Errorf("netlink in the pod's namespace: %w", err)
	}
	defer pod.Close()
	links, err := pod.LinkList()
	if err != nil {
		return nil, fmt.Errorf("the pod's links: %w", err)
	}
	names := make(map[string]bool, len(links))
	for _, l := range links {
		names[l.Attrs().Name] = true
	}
	return names, nil
}

// handles are netlink sockets in both namespaces.
type handles struct {
	node, pod *netlink.Handle
	podNS     netns.NsHandle
	nodeNS    netns.NsHandle
}

func (n Namespaces) handles() (*handles, error) {
	node, err := netlink.NewHandleAt(n.Node)
	if err != nil {
		return nil, fmt.Errorf("netlink in the node's namespace: %w", err)
	}
	h := &handles{node: node, podNS: n.Pod, nodeNS: n.Node}
	if n.Pod.IsOpen() {
		if h.pod, err = netlink.NewHandleAt(n.Pod); err != nil {
			node.Close()
			return nil, fmt.Errorf("netlink in the pod's namespace: %w", err)
		}
	}
	return h, nil
}

func (h *handles) close() {
	h.node.Close()
	if h.pod != nil {
		h.pod.Close()
	}
}

// Attach plans and applies a: Plan, then Apply.
func Attach(ns Namespaces, a podnetwork.Attachment) (Record, error) {
	r, err := Plan(ns, a)
	if err == nil {
		err = Apply(ns, &r)
	}
	return r, err
}

// Plan reads what a needs before anything changes, so that a caller can
// record how to undo it first: for a move, the host netdev's hardware
// address and its state to restore (Saved); for a sub-interface, that the
// parent exists. A netdev carrying the node's default route is refused.
func Plan(ns Namespaces, a podnetwork.Attachment) (Record, error) {
	h, err := ns.handles()
	if err != nil {
		return Record{}, err
	}
	defer h.close()
	link, err := h.node.LinkByName(a.HostNetDev)
	if err != nil {
		return Record{}, fmt.Errorf("%s: netdev %s: %w", a.Device, a.HostNetDev, err)
	}
	switch a.Mode {
	case v1alpha1.ModeMove:
		if !movable(link) {
			return Record{}, fmt.Errorf("%s: %s is a %s, not a netdev of a device: not moved", a.Device, a.HostNetDev, link.Type())
		}
		if err := refuseDefaultRoute(h.node, link); err != nil {
			return Record{}, err
		}
		if err := refuseNodeUse(h.node, a); err != nil {
			return Record{}, err
		}
		saved, err := snapshot(h.node, link)
		if err != nil {
			return Record{}, fmt.Errorf("%s: reading %s: %w", a.Device, a.HostNetDev, err)
		}
		return Record{Attachment: a, HWAddr: link.Attrs().HardwareAddr.String(), Kind: link.Type(), Saved: &saved}, nil
	case v1alpha1.ModeSubInterface:
		return Record{Attachment: a}, nil
	}
	return Record{}, fmt.Errorf("%s: mode %q is not an attachment", a.Device, a.Mode)
}

// PlanSourceRouting gives the records of one sandbox, from Plan and in
// the order they are applied, the source routing that their addresses in
// the pod call for (podnetwork.PlanSourceRouting), before they are
// recorded and applied.
func PlanSourceRouting(records []Record) {
	addrs := make([][]netip.Prefix, len(records))
	for i, r := range records {
		addrs[i] = r.PodAddrs()
	}
	for i, sr := range podnetwork.PlanSourceRouting(addrs) {
		records[i].SourceRouting = sr
	}
}

// Apply makes r (from Plan) in the pod's namespace; a sub-interface's
// hardware address is recorded in r. On error nothing is left: a moved
// netdev is back with its name, addresses, MTU and routes, a macvlan gone.
func Apply(ns Namespaces, r *Record) error {
	h, err := ns.handles()
	if err != nil {
		return err
	}
	defer h.close()
	if r.Mode == v1alpha1.ModeMove {
		err = h.move(r)
	} else {
		err = h.subInterface(r)
	}
	if err == nil {
		r.InPod = h.observe(r.PodInterface)
	}
	return err
}

// observe reads an interface of the pod back: its name, hardware address
// and global addresses (nil when it cannot be read).
func (h *handles) observe(name string) *Observed {
	link, err := h.pod.LinkByName(name)
	if err != nil {
		return nil
	}
	o := &Observed{Name: name, HWAddr: link.Attrs().HardwareAddr.String()}
	addrs, _ := h.pod.AddrList(link, netlink.FAMILY_ALL)
	for _, a := range addrs {
		if p, ok := prefixOf(a.IPNet); ok && !p.Addr().IsLinkLocalUnicast() {
			o.Addrs = append(o.Addrs, p)
		}
	}
	return o
}

// Detach undoes r. A pod namespace that no longer holds the interface is
// not an error for a sub-interface (it died with the namespace); a moved
// netdev found back in the node's namespace is restored there. The source
// rules go first: they outlive the interface in a live namespace.
func Detach(ns Namespaces, r Record) error {
	h, err := ns.handles()
	if err != nil {
		return err
	}
	defer h.close()
	var rulesErr error
	if h.pod != nil && r.SourceRouting != nil {
		rulesErr = removeSourceRules(h.pod, r.PodInterface, *r.SourceRouting)
	}
	return errors.Join(rulesErr, h.release(r))
}

// release gives r's interface back: a moved netdev to the node, a
// sub-interface deleted.
func (h *handles) release(r Record) error {
	if r.Mode == v1alpha1.ModeMove {
		return h.moveBack(r)
	}
	link, err := h.subInterfaceOf(r)
	if err != nil || link == nil {
		return err
	}
	if err := h.pod.LinkDel(link); err != nil {
		return fmt.Errorf("deleting sub-interface %s of %s: %w", link.Attrs().Name, r.HostNetDev, err)
	}
	return nil
}

// move takes the netdev Plan examined into the pod and records its
// ifindex there in r. It is taken by name and checked, never found by
// hardware address: a bridge or bond shares its port's, and may come
// first.
func (h *handles) move(r *Record) error {
	link, err := h.node.LinkByName(r.HostNetDev)
	if err == nil {
		err = r.identifies(link)
	}
	if err != nil {
		return fmt.Errorf("%s: netdev %s: %w", r.Device, r.HostNetDev, err)
	}
	live := hasCarrier(link)
	in, err := h.transfer(h.node, link, h.podNS, r.PodInterface)
	if in != nil {
		r.PodIndex = in.Attrs().Index
	}
	if err != nil {
		return errors.Join(fmt.Errorf("%s: moving %s into the pod: %w", r.Device, r.HostNetDev, err), h.moveBack(*r))
	}
	if err := h.setUp(in, *r, pick(r.MTU, r.Saved.MTU), live); err != nil {
		return errors.Join(fmt.Errorf("%s: setting up %s in the pod: %w", r.Device, r.PodInterface, err), h.moveBack(*r))
	}
	return nil
}

// identifies says why link is not the netdev r records (nil when it is):
// a movable kind, the recorded one, with the recorded hardware address.
func (r Record) identifies(link netlink.Link) error {
	switch {
	case !movable(link):
		return fmt.Errorf("%s is a %s, not a netdev of a device", link.Attrs().Name, link.Type())
	case r.Kind != "" && link.Type() != r.Kind:
		return fmt.Errorf("%s is a %s, was a %s", link.Attrs().Name, link.Type(), r.Kind)
	case link.Attrs().HardwareAddr.String() != r.HWAddr:
		return fmt.Errorf("%s has hardware address %s, was %s", link.Attrs().Name, link.Attrs().HardwareAddr, r.HWAddr)
	}
	return nil
}

// movable says whether link is of a kind that is moved: a netdev of a
// device (no link kind: a PCI NIC's), IPoIB, or a veth (what soft RoCE and
// iWARP run on in test clusters, and the fixtures' host netdevs). Never
// a master or an upper (bridge, bond, team, VLAN, macvlan, ipvlan...):
// those share a port's or lower's hardware address, hold the node's own
// addresses, and a master cannot leave its namespace.
func movable(link netlink.Link) bool {
	switch link.Type() {
	case "device", "ipoib", "veth":
		return true
	}
	return false
}

// moveBack returns a moved netdev to the node's namespace under its own
// name and hardware address, with its saved addresses, MTU and routes;
// one already there is only restored.
func (h *handles) moveBack(r Record) error {
	link, err := h.inPod(r)
	if err != nil {
		return fmt.Errorf("%s: %w", r.Saved.Name, err)
	}
	var home netlink.Link
	if link != nil {
		// A pod with CAP_NET_ADMIN may have changed it; the node's
		// neighbors and the next lookups know the recorded one.
		if link.Attrs().HardwareAddr.String() != r.HWAddr {
			if err := h.restoreHWAddr(link, r.HWAddr); err != nil {
				return fmt.Errorf("%s: %w", r.Saved.Name, err)
			}
		}
		if home, err = h.transfer(h.pod, link, h.nodeNS, r.Saved.Name); err != nil {
			return fmt.Errorf("moving %s back to the node: %w", r.Saved.Name, err)
		}
	} else if home, err = h.inNode(r); err != nil {
		return err
	}
	if err := r.identifies(home); err != nil {
		return fmt.Errorf("%s back on the node: %w", r.Saved.Name, err)
	}
	if home.Attrs().Name != r.Saved.Name {
		if err := renameDown(h.node, home, r.Saved.Name); err != nil {
			return err
		}
	}
	// The node's own addresses, back where they were: not probed, since
	// a probe that failed would leave the node without them.
	return configure(h.node, home, r.Saved.MTU, r.Saved.Addrs, r.Saved.Routes, nil)
}

// inPod finds r's moved netdev in the pod's namespace, or nil: by the
// ifindex it got there, which the pod cannot change, and of its kind.
// Without a recorded ifindex (an older record, or a move that had not
// reached the pod) it goes by hardware address, over movable links of
// the recorded kind only.
func (h *handles) inPod(r Record) (netlink.Link, error) {
	if h.pod == nil {
		return nil, nil
	}
	if r.PodIndex == 0 {
		return linkByHWAddr(h.pod, r.HWAddr, func(l netlink.Link) bool {
			return movable(l) && (r.Kind == "" || l.Type() == r.Kind)
		})
	}
	link, err := h.pod.LinkByIndex(r.PodIndex)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil, nil // back in the node's namespace, or never left it
	}
	if err != nil {
		return nil, err
	}
	if link.Type() != r.Kind {
		return nil, fmt.Errorf("the pod's link %d is %s, a %s, not the moved %s netdev %s: not given back",
			r.PodIndex, link.Attrs().Name, link.Type(), r.Kind, r.HWAddr)
	}
	return link, nil
}

// inNode finds r's netdev when the pod's namespace does not hold it: under
// its own name with its hardware address (never left, or restored
// before), else by that address under another name (a move that failed
// midway, or a namespace gone and the kernel's name on it), over movable
// links only: the node's bridge or bond shares it.
func (h *handles) inNode(r Record) (netlink.Link, error) {
	link, err := h.node.LinkByName(r.Saved.Name)
	if err == nil && r.identifies(link) == nil {
		return link, nil
	}
	link, err = linkByHWAddr(h.node, r.HWAddr, movable)
	if err == nil && link == nil {
		err = fmt.Errorf("%s (%s) is in neither the pod's nor the node's namespace", r.Saved.Name, r.HWAddr)
	}
	return link, err
}

// restoreHWAddr sets link, in the pod, down and back to hardware address hw.
func (h *handles) restoreHWAddr(link netlink.Link, hw string) error {
	mac, err := net.ParseMAC(hw)
	if err != nil {
		return err
	}
	if err := h.pod.LinkSetDown(link); err != nil {
		return fmt.Errorf("setting %s down: %w", link.Attrs().Name, err)
	}
	if err := h.pod.LinkSetHardwareAddr(link, mac); err != nil {
		return fmt.Errorf("restoring %s's hardware address %s: %w", link.Attrs().Name, hw, err)
	}
	link.Attrs().HardwareAddr = mac
	return nil
}

// transfer moves link from the namespace of from into to, named name
// there, and gives it as found there (nil until it got there). A netdev
// keeps its name across a move, which may be taken on the other side, so
// it travels under a temporary name free on both sides (travelNameFor).
func (h *handles) transfer(from *netlink.Handle, link netlink.Link, to netns.NsHandle, name string) (netlink.Link, error) {
	dst := h.pod
	if to == h.nodeNS {
		dst = h.node
	}
	tmp, err := travelNameFor(from, dst, link)
	if err != nil {
		return nil, err
	}
	if err := renameDown(from, link, tmp); err != nil {
		return nil, err
	}
	if err := from.LinkSetNsFd(link, int(to)); err != nil {
		return nil, fmt.Errorf("changing namespace: %w", err)
	}
	moved, err := dst.LinkByName(tmp)
	if err != nil {
		return nil, fmt.Errorf("finding %s after the move: %w", tmp, err)
	}
	return moved, renameDown(dst, moved, name)
}

// travelName is apis.TravelNetDevPrefix and the hardware address's last 4 bytes in hex:
// 14 bytes, within IFNAMSIZ, and unique per netdev.
func travelName(hw net.HardwareAddr) string {
	tail := hw
	if len(tail) > 4 {
		tail = tail[len(tail)-4:]
	}
	return fmt.Sprintf("%s%x", apis.TravelNetDevPrefix, []byte(tail))
}

// travelNameFor is the name link travels under from from's namespace to
// dst's: travelName, unless another link holds it on either side, then
// the prefix and random bytes. A pod with CAP_NET_ADMIN can make a link
// under its netdev's travelName in its own namespace, which outlives its
// processes while the agent holds it: a fixed name would keep the netdev
// there for good.
func travelNameFor(from, dst *netlink.Handle, link netlink.Link) (string, error) {
	name := travelName(link.Attrs().HardwareAddr)
	for range 8 {
		if !heldByAnother(from, name, link) && !heldByAnother(dst, name, nil) {
			return name, nil
		}
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		name = fmt.Sprintf("%s%x", apis.TravelNetDevPrefix, b)
	}
	return "", fmt.Errorf("moving %s: %s and the other names tried to travel under are taken", link.Attrs().Name, travelName(link.Attrs().HardwareAddr))
}

// heldByAnother says whether a link other than self is called name in h's
// namespace; a lookup that fails otherwise than "not found" counts as
// held.
func heldByAnother(h *netlink.Handle, name string, self netlink.Link) bool {
	l, err := h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		return false
	case err != nil:
		return true
	}
	return self == nil || l.Attrs().Index != self.Attrs().Index
}

// renameDown brings link down (a netdev is renamed only while down) and
// renames it.
func renameDown(h *netlink.Handle, link netlink.Link, name string) error {
	if link.Attrs().Name == name {
		return h.LinkSetDown(link)
	}
	if err := h.LinkSetDown(link); err != nil {
		return fmt.Errorf("setting %s down: %w", link.Attrs().Name, err)
	}
	if err := h.LinkSetName(link, name); err != nil {
		return fmt.Errorf("renaming %s to %s: %w", link.Attrs().Name, name, err)
	}
	link.Attrs().Name = name
	return nil
}

func (h *handles) subInterface(r *Record) error {
	parent, err := h.node.LinkByName(r.HostNetDev)
	if err != nil {
		return fmt.Errorf("%s: netdev %s: %w", r.Device, r.HostNetDev, err)
	}
	if err := refuseParentAddrs(h.node, parent, r.PodAddrs()); err != nil {
		return fmt.Errorf("%s: %w", r.Device, err)
	}
	mv := &netlink.Macvlan{
		LinkAttrs: netlink.LinkAttrs{Name: r.PodInterface, ParentIndex: parent.Attrs().Index, MTU: r.MTU, Namespace: netlink.NsFd(h.podNS)},
		Mode:      netlink.MACVLAN_MODE_BRIDGE,
	}
	if err := h.node.LinkAdd(mv); err != nil {
		return fmt.Errorf("%s: macvlan %s of %s in the pod: %w", r.Device, r.PodInterface, r.HostNetDev, err)
	}
	in, err := h.pod.LinkByName(r.PodInterface)
	if err != nil {
		return fmt.Errorf("%s: finding the new macvlan %s in the pod: %w", r.Device, r.PodInterface, err)
	}
	r.HWAddr = in.Attrs().HardwareAddr.String()
	if err := h.setUp(in, *r, r.MTU, hasCarrier(parent)); err != nil {
		return errors.Join(fmt.Errorf("%s: setting up %s in the pod: %w", r.Device, r.PodInterface, err), h.pod.LinkDel(in))
	}
	return nil
}

// setUp gives r's interface in the pod its MTU, addresses and routes and,
// where it shares its subnet with others of the pod, its source routing.
// live says whether the link was carrying (the netdev before its move, a
// sub-interface's parent): only then are its addresses probed.
func (h *handles) setUp(in netlink.Link, r Record, mtu int, live bool) error {
	routes := r.podRoutes()
	check := &addressCheck{h: h.pod, ns: h.podNS, live: live}
	if err := configure(h.pod, in, mtu, r.PodAddrs(), routes, check); err != nil {
		return err
	}
	if r.SourceRouting == nil {
		return nil
	}
	return h.routeBySource(in, *r.SourceRouting, routes)
}

// configure sets link's MTU (0 keeps it), brings it up and adds addrs and
// routes; with check (the pod's addresses), once none of addrs is found in
// use on the link.
func configure(h *netlink.Handle, link netlink.Link, mtu int, addrs []netip.Prefix, routes []SavedRoute, check *addressCheck) error {
	if mtu != 0 && mtu != link.Attrs().MTU {
		if err := h.LinkSetMTU(link, mtu); err != nil {
			return fmt.Errorf("MTU %d: %w", mtu, err)
		}
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("setting %s up: %w", link.Attrs().Name, err)
	}
	if check != nil {
		if err := check.probeIPv4(link, addrs); err != nil {
			return err
		}
	}
	for _, p := range addrs {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if p.Addr().Is6() && check == nil {
			a.Flags = unix.IFA_F_NODAD // the node's own: usable at once, as before the move
		}
		if err := h.AddrReplace(link, a); err != nil {
			return fmt.Errorf("address %s: %w", p, err)
		}
	}
	if check != nil {
		if err := check.awaitDAD(link, addrs); err != nil {
			return err
		}
	}
	for _, r := range routes {
		if err := h.RouteReplace(r.through(link, unix.RT_TABLE_MAIN)); err != nil {
			return fmt.Errorf("route %s: %w", r.Dst, err)
		}
	}
	return nil
}

// through is r as a route through link in table.
func (r SavedRoute) through(link netlink.Link, table int) *netlink.Route {
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: ipNet(r.Dst), Priority: r.Metric, Table: table}
	if r.Gw.IsValid() {
		route.Gw = r.Gw.AsSlice()
	}
	return route
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Masked().Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// planned turns the claim's routes (checked by v1alpha1.PodNetworkConfig.Validate) into
// routes to add.
func planned(routes []v1alpha1.Route) []SavedRoute {
	var out []SavedRoute
	for _, r := range routes {
		dst, err := netip.ParsePrefix(r.Destination)
		if err != nil {
			continue
		}
		gw, _ := netip.ParseAddr(r.Gateway)
		out = append(out, SavedRoute{Dst: dst.Masked(), Gw: gw})
	}
	return out
}

func pick(v, fallback int) int {
	if v != 0 {
		return v
	}
	return fallback
}

// snapshot reads what a move flushes: the addresses (but the IPv6
// link-local one, which the kernel makes again) and the main table's
// routes through the netdev that are not the kernel's connected ones.
func snapshot(h *netlink.Handle, link netlink.Link) (Saved, error) {
	s := Saved{Name: link.Attrs().Name, MTU: link.Attrs().MTU}
	addrs, err := h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return Saved{}, err
	}
	for _, a := range addrs {
		p, ok := prefixOf(a.IPNet)
		if ok && !p.Addr().IsLinkLocalUnicast() {
			s.Addrs = append(s.Addrs, p)
		}
	}
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: link.Attrs().Index}, netlink.RT_FILTER_OIF)
	if err != nil {
		return Saved{}, err
	}
	for _, r := range routes {
		if r.Protocol == unix.RTPROT_KERNEL || r.Table != unix.RT_TABLE_MAIN || r.Type != unix.RTN_UNICAST {
			continue
		}
		sr := SavedRoute{Metric: r.Priority}
		if r.Dst != nil {
			sr.Dst, _ = prefixOf(r.Dst)
		} else if r.Family == netlink.FAMILY_V6 {
			sr.Dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		} else {
			sr.Dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		}
		if gw, ok := netip.AddrFromSlice(r.Gw); ok {
			sr.Gw = gw.Unmap()
		}
		s.Routes = append(s.Routes, sr)
	}
	return s, nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

// refuseDefaultRoute is the last check before a move: a netdev that holds
// the namespace's default route is the node's way out.
func refuseDefaultRoute(h *netlink.Handle, link netlink.Link) error {
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: link.Attrs().Index}, netlink.RT_FILTER_OIF)
	if err != nil {
		return err
	}
	for _, r := range routes {
		if r.Table == unix.RT_TABLE_MAIN && (r.Dst == nil || isDefault(r.Dst)) {
			return fmt.Errorf("%s carries the node's default route: not moved", link.Attrs().Name)
		}
	}
	return nil
}

// refuseNodeUse reads the node's routes and stacked links now: the
// planner's view is the last scan's, and a bridge, bond, VLAN or policy
// route set up since would be unplugged or deleted by the move.
func refuseNodeUse(h *netlink.Handle, a podnetwork.Attachment) error {
	if a.OperatorMovable {
		return nil
	}
	uses, err := netinfo.Wrap(h).Uses()
	if err != nil {
		return fmt.Errorf("%s: reading the node's use of %s: %w", a.Device, a.HostNetDev, err)
	}
	nd := model.NetDev{Name: a.HostNetDev}
	uses.Fill(&nd)
	if why := podnetwork.UseReason(nd); why != "" {
		return fmt.Errorf("%s: mode move: the node keeps %s (%s); not moved", a.Device, a.HostNetDev, why)
	}
	return nil
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}

// subInterfaceOf finds r's macvlan in the pod: by its hardware address,
// or, when a crash came before that was recorded, by its name and kind.
// nil when the pod's namespace is gone (the macvlan died with it).
func (h *handles) subInterfaceOf(r Record) (netlink.Link, error) {
	if h.pod == nil {
		return nil, nil
	}
	if r.HWAddr != "" {
		return linkByHWAddr(h.pod, r.HWAddr, isMacvlan)
	}
	link, err := h.pod.LinkByName(r.PodInterface)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) || (err == nil && !isMacvlan(link)) {
		return nil, nil
	}
	return link, err
}

func isMacvlan(link netlink.Link) bool { return link.Type() == "macvlan" }

// linkByHWAddr finds the first link that has hardware address hw and that
// accept takes, or nil. A hardware address alone is not unique: masters
// and uppers share their port's or lower's.
func linkByHWAddr(h *netlink.Handle, hw string, accept func(netlink.Link) bool) (netlink.Link, error) {
	if h == nil {
		return nil, nil
	}
	links, err := h.LinkList()
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		if l.Attrs().HardwareAddr.String() == hw && accept(l) {
			return l, nil
		}
	}
	return nil, nil
}
