package podnetwork

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// NodeFacts are what decides whether the node keeps a netdev for itself.
type NodeFacts struct {
	Node model.Node
	// NodeIPs are the Node's addresses (the kubelet's among them), and
	// NodeIPsKnown whether they have been read: until then any netdev may
	// hold one, and none is moved.
	NodeIPs      []netip.Addr
	NodeIPsKnown bool
	// Movable are the netdevs the operator lets pods take although the
	// node uses them (pod_network.movable).
	Movable []string
	// MoveKeepsAddresses: a moved netdev keeps the node's addresses
	// (pod_network.move_keeps_addresses).
	MoveKeepsAddresses bool
}

// keptReason says why the node keeps netdev, the port netdev of dev, or
// "". A netdev the operator lists as movable is kept only for the node's
// default route.
func (f NodeFacts) keptReason(dev model.Device, netdev string) string {
	if netdev == f.Node.DefaultRouteNetDev {
		return "it carries the node's default route"
	}
	if slices.Contains(f.Movable, netdev) {
		return ""
	}
	if !f.NodeIPsKnown {
		return "the Node's addresses are not known yet"
	}
	nd, _ := f.Node.NetDevByName(netdev)
	for _, p := range nd.Addrs {
		if slices.Contains(f.NodeIPs, p.Addr()) {
			return "it holds the Node's address " + p.Addr().String()
		}
	}
	if dev.NumVFs > 0 {
		// Its VFs serve other pods, and what a tenant sets on a PF (DCB,
		// PFC, its MAC, its VFs' settings) outlives the pod.
		return fmt.Sprintf("it is a physical function with %d SR-IOV VFs enabled", dev.NumVFs)
	}
	return UseReason(nd)
}

// UseReason says why the node's routes or stacked links keep nd (as a
// scan or a live read just before a move found them), or "": a move would
// delete those routes or unplug those links, and nothing brings them back.
func UseReason(nd model.NetDev) string {
	switch {
	case nd.Multipath:
		return "a multipath route of the node has a path through it"
	case len(nd.RouteTables) > 0:
		return fmt.Sprintf("the node's policy routing tables %v route through it", nd.RouteTables)
	case nd.Master != "":
		return "it is a port of the node's " + nd.Master
	case len(nd.Uppers) > 0:
		return "the node's " + strings.Join(nd.Uppers, ", ") + " sit on it"
	}
	return ""
}

// Device is what Plan knows of ibdev on the node: its first port's
// netdev, whether the node keeps it, and shared as the caller says.
func (f NodeFacts) Device(ibdev string, shared bool) Device {
	d := Device{IBDev: ibdev, Shared: shared, MoveKeepsAddresses: f.MoveKeepsAddresses}
	dev, ok := f.Node.DeviceByName(ibdev)
	if !ok || len(dev.Ports) == 0 {
		return d
	}
	port := dev.Ports[0]
	d.RoCE = port.LinkLayer == model.LinkLayerEthernet
	d.NetDev = port.NetDev
	if nd, ok := f.Node.NetDevByName(port.NetDev); ok {
		d.Addrs, d.Gateways = nd.Addrs, nd.Gateways
	}
	d.Kept = f.keptReason(dev, port.NetDev)
	d.OperatorMovable = slices.Contains(f.Movable, port.NetDev)
	return d
}
