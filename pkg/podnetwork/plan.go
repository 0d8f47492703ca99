package podnetwork

import (
	"fmt"
	"net/netip"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Device is what Plan knows of one allocated HCA on the node.
type Device struct {
	IBDev string
	// NetDev is its port's netdev in the node's namespace; "" when it
	// has none (an InfiniBand port without IPoIB).
	NetDev string
	// RoCE: the port's link layer is Ethernet. An InfiniBand port needs
	// no netdev in the pod.
	RoCE bool
	// Shared: the claim holds a share of the device (consumable
	// capacity), which other pods hold too.
	Shared bool
	// Kept is why the node keeps the netdev for itself (its default route,
	// the node's InternalIP), or "".
	Kept string
	// Addrs are the netdev's addresses in the node's namespace.
	Addrs []netip.Prefix
	// Gateways are the next hops of the node's routes through it.
	Gateways []netip.Addr
	// OperatorMovable: pod_network.movable lists the netdev, so the
	// node's routes and stacked links on it do not keep it.
	OperatorMovable bool
	// MoveKeepsAddresses: a move without addresses of its own keeps the
	// node's; otherwise the allocator gives one, as for a sub-interface.
	MoveKeepsAddresses bool
}

// Attachment is one interface a pod gets, as planned.
type Attachment struct {
	Device     string        `json:"device"`
	HostNetDev string        `json:"hostNetDev"`
	Mode       v1alpha1.Mode `json:"mode"`
	// PodInterface is its name in the pod. DefaultName: no config asked
	// for it, so NameInterfaces may give another (not recorded: a record's
	// name is settled).
	PodInterface string `json:"podInterface"`
	DefaultName  bool   `json:"-"`
	// Addrs: for a sub-interface always set; for a move, nil keeps the
	// netdev's own addresses (pod_network.move_keeps_addresses).
	Addrs  []netip.Prefix   `json:"addrs,omitempty"`
	MTU    int              `json:"mtu,omitempty"`
	Routes []v1alpha1.Route `json:"routes,omitempty"`
	// OperatorMovable is the device's: a move checks the node's uses of
	// the netdev again just before it (podnetwork.UseReason) unless set.
	OperatorMovable bool `json:"operatorMovable,omitempty"`
}

// Allocator hands out an address of the node's for a sub-interface of a
// host netdev, and says which of its ranges holds an address.
type Allocator interface {
	Allocate(host model.NetDev) (netip.Prefix, error)
	Manages(a netip.Addr) (Range, bool)
}

// Plan decides what dev gives the pod under cfg (already merged): ok is
// false when it gives nothing (no RoCE netdev, mode none). A mode the
// device cannot take (a move of a shared or kept netdev), a configured
// address the allocator may hand out too, and a sub-interface without an
// address are errors that say why.
func Plan(dev Device, cfg v1alpha1.PodNetworkConfig, alloc Allocator) (a Attachment, ok bool, err error) {
	if !dev.RoCE || dev.NetDev == "" || cfg.Mode == v1alpha1.ModeNone {
		return Attachment{}, false, nil
	}
	mode, err := resolveMode(dev, cfg.Mode)
	if err != nil {
		return Attachment{}, false, err
	}
	addrs, err := cfg.Prefixes()
	if err != nil {
		return Attachment{}, false, err
	}
	for _, p := range addrs {
		if r, ok := alloc.Manages(p.Addr()); ok {
			return Attachment{}, false, fmt.Errorf("%s: address %s lies in %s, which the node's allocator hands out to pods; a DeviceClass's addresses and allowedPrefixes must stay outside pod_network.ranges and pools", dev.IBDev, p.Addr(), r)
		}
	}
	// The node's own fabric address stays the node's: a moved netdev
	// gets one of the pod's unless the operator lets it keep the node's.
	if len(addrs) == 0 && (mode == v1alpha1.ModeSubInterface || !dev.MoveKeepsAddresses) {
		p, err := alloc.Allocate(model.NetDev{Name: dev.NetDev, Addrs: dev.Addrs, Gateways: dev.Gateways})
		if err != nil {
			what := "its sub-interface"
			if mode == v1alpha1.ModeMove {
				what = "the moved netdev (pod_network.move_keeps_addresses lets it keep the node's)"
			}
			return Attachment{}, false, fmt.Errorf("%s (%s): no address for %s: %w", dev.IBDev, dev.NetDev, what, err)
		}
		addrs = []netip.Prefix{p}
	}
	name := cfg.InterfaceName
	if name == "" {
		name = dev.NetDev
	}
	return Attachment{
		Device: dev.IBDev, HostNetDev: dev.NetDev, Mode: mode, PodInterface: name, DefaultName: cfg.InterfaceName == "",
		Addrs: addrs, MTU: cfg.MTU, Routes: cfg.Routes, OperatorMovable: dev.OperatorMovable,
	}, true, nil
}

// NameInterfaces settles the names of a pod's attachments that no config
// named (DefaultName), in order: each keeps the name it has where keep is
// set and the pod can take it, else takes the first of net1, net2, ...
// the pod can take. The pod cannot take a name the kernel or the pod
// network refuses (v1alpha1.ValidInterfaceName: lo, eth0, its CNI
// interface, among them), a name another of its attachments has, or one
// that taken says its namespace holds already (nil: none known). A name a
// config asked for is left as it is: the attach then fails on a clash,
// naming it.
func NameInterfaces(as []Attachment, keep bool, taken func(name string) bool) {
	used := map[string]bool{}
	for _, a := range as {
		if !a.DefaultName {
			used[a.PodInterface] = true
		}
	}
	free := func(name string) bool {
		return !used[name] && v1alpha1.ValidInterfaceName(name) == nil && (taken == nil || !taken(name))
	}
	next := 1
	for i := range as {
		if !as[i].DefaultName {
			continue
		}
		if !keep || !free(as[i].PodInterface) {
			for !free(fmt.Sprintf("net%d", next)) {
				next++
			}
			as[i].PodInterface = fmt.Sprintf("net%d", next)
		}
		used[as[i].PodInterface] = true
	}
}

// resolveMode turns auto into move or sub-interface, and refuses a move
// that would take a netdev from other pods or from the node.
func resolveMode(dev Device, want v1alpha1.Mode) (v1alpha1.Mode, error) {
	switch {
	case want == v1alpha1.ModeMove && dev.Shared:
		return "", fmt.Errorf("%s: mode move: %s is shared with other pods (consumable capacity); use mode sub-interface", dev.IBDev, dev.NetDev)
	case want == v1alpha1.ModeMove && dev.Kept != "":
		return "", fmt.Errorf("%s: mode move: the node keeps %s (%s); use mode sub-interface", dev.IBDev, dev.NetDev, dev.Kept)
	case want != v1alpha1.ModeAuto:
		return want, nil
	case dev.Shared || dev.Kept != "":
		return v1alpha1.ModeSubInterface, nil
	}
	return v1alpha1.ModeMove, nil
}
