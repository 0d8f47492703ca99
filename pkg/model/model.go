// Package model is the pure, in-memory picture of a node's RDMA hardware and
// user-space stack. Discovery fills it; policy and renderers only read it.
package model

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
)

// LinkLayer of an RDMA port as sysfs spells it, but for
// LinkLayerUnspecified.
type LinkLayer string

const (
	LinkLayerInfiniBand LinkLayer = "InfiniBand"
	LinkLayerEthernet   LinkLayer = "Ethernet"
	// LinkLayerUnspecified is a port that is neither: the kernel's
	// IB_LINK_LAYER_UNSPECIFIED, which sysfs prints as "Unknown" (AWS
	// EFA). NCCL's IB transport skips such a port.
	LinkLayerUnspecified LinkLayer = "unspecified"
)

// Transport is what carries a device's RDMA traffic, as a user picks an
// HCA by it: InfiniBand, RoCE (an Ethernet link layer), AWS EFA (its own
// transport, SRD, reached through libfabric), or none the model knows.
type Transport string

const (
	TransportInfiniBand  Transport = "infiniband"
	TransportRoCE        Transport = "roce"
	TransportEFA         Transport = "efa"
	TransportUnspecified Transport = "unspecified"
)

// PCIVendorAmazon is Amazon's (Annapurna Labs') PCI vendor id, as sysfs
// prints it: EFA and ENA functions carry it.
const PCIVendorAmazon = "0x1d0f"

// DriverEFA is the kernel driver of EFA functions.
const DriverEFA = "efa"

// efaPCIDevices are the PCI device ids of EFA functions (the kernel efa
// driver's table), one per hardware generation.
var efaPCIDevices = []string{"0xefa0", "0xefa1", "0xefa2"}

// efaRDMAReadPCIDevices are the EFA generations with RDMA read, which
// libfabric's GPUDirect RDMA (FI_EFA_USE_DEVICE_RDMA=1) needs. The rule,
// as AWS documents the generations: 0xefa0 (the first, p3dn) has none;
// 0xefa1 (p4d) and 0xefa2 (p5, p6) have it.
var efaRDMAReadPCIDevices = []string{"0xefa1", "0xefa2"}

// PortState is a port's logical state as sysfs names it, without its
// number ("4: ACTIVE" is PortActive).
type PortState string

const (
	PortNop         PortState = "NOP"
	PortDown        PortState = "DOWN"
	PortInit        PortState = "INIT"
	PortArmed       PortState = "ARMED"
	PortActive      PortState = "ACTIVE"
	PortActiveDefer PortState = "ACTIVE_DEFER"
)

// GIDType is the RoCE version (or IB) of a GID table entry.
type GIDType string

const (
	GIDTypeIB     GIDType = "IB"
	GIDTypeRoCEv1 GIDType = "RoCE v1"
	GIDTypeRoCEv2 GIDType = "RoCE v2"
	// GIDTypeUnknown marks an entry whose type attribute could not be read
	// (EINVAL on an empty entry, or an unknown string).
	GIDTypeUnknown GIDType = ""
)

// RoCEVersion returns 1 or 2 for RoCE entries, 0 otherwise.
func (t GIDType) RoCEVersion() int {
	switch t {
	case GIDTypeRoCEv1:
		return 1
	case GIDTypeRoCEv2:
		return 2
	}
	return 0
}

// Node is everything rdma-cdi knows about one machine.
type Node struct {
	Devices []Device `json:"devices"`
	// RDMACM is the rdma_cm char device, shared by all HCAs; nil when absent.
	RDMACM *CharDevice `json:"rdmaCM,omitempty"`
	// NetDevs are the netdevs that RDMA ports map to, plus the default-route one.
	NetDevs []NetDev `json:"netDevs"`
	// DefaultRouteNetDev carries the IPv4 (else IPv6) default route; "" when none.
	DefaultRouteNetDev string `json:"defaultRouteNetDev,omitempty"`
	// NetNSMode is "shared" or "exclusive" when known (rdma system netns mode).
	NetNSMode string `json:"netnsMode,omitempty"`
	// GPUDirect are the GPUDirect RDMA facts, read only when discovery was
	// asked for them (doctor, the DRA driver); nil otherwise.
	GPUDirect *GPUDirect `json:"gpuDirect,omitempty"`
}

// Device is one RDMA device (HCA, VF or bond) as /sys/class/infiniband shows it.
type Device struct {
	Name       string `json:"name"`
	NodeGUID   string `json:"nodeGUID,omitempty"`
	NodeType   string `json:"nodeType,omitempty"`
	FWVersion  string `json:"fwVersion,omitempty"`
	BoardID    string `json:"boardID,omitempty"`
	HCAType    string `json:"hcaType,omitempty"`
	PCIAddress string `json:"pciAddress,omitempty"`
	// PCIVendor and PCIDevice are the function's IDs as sysfs prints them ("0x15b3").
	PCIVendor string `json:"pciVendor,omitempty"`
	PCIDevice string `json:"pciDevice,omitempty"`
	// PCIeRoot is the host bridge the function hangs off ("pci0000:53"), the
	// root complex Kubernetes' resource.kubernetes.io/pcieRoot names.
	PCIeRoot string `json:"pcieRoot,omitempty"`
	// NUMANode is -1 when the platform reports none.
	NUMANode int    `json:"numaNode"`
	Driver   string `json:"driver,omitempty"`
	// PhysFn is the PCI address of the parent PF when this device is an SR-IOV VF.
	PhysFn string `json:"physFn,omitempty"`
	// NumVFs is how many SR-IOV VFs the function has enabled (sriov_numvfs),
	// whether or not they are RDMA devices here; 0 for a VF.
	NumVFs int `json:"numVFs,omitempty"`
	// Bond is true for LAG devices such as mlx5_bond_0.
	Bond bool `json:"bond,omitempty"`
	// Verbs is the uverbs char device; nil when the device has none.
	Verbs *CharDevice `json:"verbs,omitempty"`
	Ports []Port      `json:"ports"`
}

// Port is one port of a Device.
type Port struct {
	Number    int       `json:"number"`
	State     PortState `json:"state"`     // e.g. ACTIVE, DOWN (the "4: " prefix removed)
	PhysState string    `json:"physState"` // e.g. LinkUp, Disabled
	LinkLayer LinkLayer `json:"linkLayer"`
	// Rate is the rate as sysfs prints it ("200 Gb/sec (4X HDR)"), shown
	// to users; RateGbps and Width are what discovery read from it: Gb/s
	// and lanes (the 4 of 4X), 0 where the rate is absent or names none.
	Rate     string  `json:"rate,omitempty"`
	RateGbps float64 `json:"rateGbps,omitempty"`
	Width    int     `json:"width,omitempty"`
	// NetDev is the netdev behind this port ("" when none is known).
	NetDev string `json:"netDev,omitempty"`
	// GIDTableLen is the size of the GID table, empty slots included
	// (NCCL walks every index up to it).
	GIDTableLen int   `json:"gidTableLen"`
	GIDs        []GID `json:"gids"`
	// Umad and Issm are the management char devices of this port.
	Umad *CharDevice `json:"umad,omitempty"`
	Issm *CharDevice `json:"issm,omitempty"`
}

// Active reports whether the port can carry traffic.
func (p Port) Active() bool { return p.State == PortActive }

// GID is one non-empty entry of a port's GID table.
type GID struct {
	Index  int        `json:"index"`
	GID    netip.Addr `json:"gid"`
	Type   GIDType    `json:"type"`
	NetDev string     `json:"netDev,omitempty"`
}

// IPv4 returns the IPv4 address of an IPv4-mapped GID.
func (g GID) IPv4() (netip.Addr, bool) {
	if g.GID.Is4In6() {
		return g.GID.Unmap(), true
	}
	return netip.Addr{}, false
}

// CharDevice is a device node under /dev/infiniband (or /dev).
type CharDevice struct {
	// Path is the path on the host as a container sees it, e.g. /dev/infiniband/uverbs0.
	Path  string `json:"path"`
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
	// NodeMissing is true when sysfs has the device but the dev root has no
	// char device node for it (a container given it would fail to start).
	NodeMissing bool `json:"nodeMissing,omitempty"`
}

// NetDev is a network interface with the state rdma-cdi cares about.
type NetDev struct {
	Name      string         `json:"name"`
	Carrier   bool           `json:"carrier"`
	OperState string         `json:"operState,omitempty"`
	HWAddr    string         `json:"hwAddr,omitempty"`
	Addrs     []netip.Prefix `json:"addrs"`
	// Gateways are the next hops of the node's routes through it: a pod's
	// sub-interface address is never one of them.
	Gateways []netip.Addr `json:"gateways,omitempty"`
	// Master is the bridge, bond or team it is a port of, if any; Uppers
	// are the node's netdevs stacked on it (a VLAN, a macvlan). Moving it
	// into a pod would take them from the node.
	Master string   `json:"master,omitempty"`
	Uppers []string `json:"uppers,omitempty"`
	// Multipath says a multipath route of the node has a path through it;
	// RouteTables are the policy routing tables routing through it.
	Multipath   bool  `json:"multipath,omitempty"`
	RouteTables []int `json:"routeTables,omitempty"`
}

// NetDevByName returns the named netdev, if the node has it.
func (n *Node) NetDevByName(name string) (NetDev, bool) {
	for _, d := range n.NetDevs {
		if d.Name == name {
			return d, true
		}
	}
	return NetDev{}, false
}

// DeviceByName returns the named RDMA device, if the node has it.
func (n *Node) DeviceByName(name string) (Device, bool) {
	for _, d := range n.Devices {
		if d.Name == name {
			return d, true
		}
	}
	return Device{}, false
}

// NetDevs are the netdevs of d's ports, each once, in port order.
func (d Device) NetDevs() []string {
	var out []string
	for _, p := range d.Ports {
		if p.NetDev != "" && !slices.Contains(out, p.NetDev) {
			out = append(out, p.NetDev)
		}
	}
	return out
}

// CarriesDefaultRoute reports whether a port of the named device has the
// node's default-route netdev: the TCP/management NIC, which NCCL's HCA
// list leaves out and which is on no rail.
func (n *Node) CarriesDefaultRoute(device string) bool {
	d, ok := n.DeviceByName(device)
	return ok && n.DefaultRouteNetDev != "" && slices.Contains(d.NetDevs(), n.DefaultRouteNetDev)
}

// IsVF reports whether d is an SR-IOV VF whose PF this host sees (its
// function has a physfn link). A VF passed through to a VM has none there:
// inside the VM it is a plain HCA.
func (d Device) IsVF() bool { return d.PhysFn != "" }

// PFOf returns the RDMA device that is vf's PF; false when vf is no VF or
// its PF is not an RDMA device of the node (bound to another driver).
func (n *Node) PFOf(vf Device) (Device, bool) {
	if !vf.IsVF() {
		return Device{}, false
	}
	for _, d := range n.Devices {
		if d.PCIAddress == vf.PhysFn {
			return d, true
		}
	}
	return Device{}, false
}

// VFsOf lists the node's RDMA devices that are VFs of pf, in discovery order.
func (n *Node) VFsOf(pf Device) []Device {
	var out []Device
	for _, d := range n.Devices {
		if pf.PCIAddress != "" && d.PhysFn == pf.PCIAddress {
			out = append(out, d)
		}
	}
	return out
}

// DeviceNames lists the node's RDMA device names in discovery order.
func (n *Node) DeviceNames() []string {
	names := make([]string, 0, len(n.Devices))
	for _, d := range n.Devices {
		names = append(names, d.Name)
	}
	return names
}

// IsEFA reports whether the device is an AWS Elastic Fabric Adapter, by
// its PCI function's ids (or, where those were not read, its driver).
func (d Device) IsEFA() bool {
	if d.PCIVendor == "" {
		return d.Driver == DriverEFA
	}
	return strings.EqualFold(d.PCIVendor, PCIVendorAmazon) &&
		slices.ContainsFunc(efaPCIDevices, func(id string) bool { return strings.EqualFold(id, d.PCIDevice) })
}

// nodeTypeRNIC is the kernel's node type of an iWARP device
// (RDMA_NODE_RNIC), the number sysfs node_type starts with ("4: RNIC").
const nodeTypeRNIC = "4"

// IWARP reports whether the device is an iWARP RNIC by its node type. Its
// ports show link layer Ethernet, as RoCE's do, but its GIDs are none of
// RoCE's: an iWARP port has one, which the kernel fills from the driver
// (erdma in iWARP mode puts the port's MAC there), with no address or
// RoCE version behind it.
func (d Device) IWARP() bool {
	n, _, ok := strings.Cut(d.NodeType, ":")
	return ok && strings.TrimSpace(n) == nodeTypeRNIC
}

// EFARDMARead reports whether the device is an EFA of a generation with
// RDMA read (efaRDMAReadPCIDevices); one whose PCI ids were not read is
// taken to have none, the side on which libfabric still works.
func (d Device) EFARDMARead() bool {
	return d.IsEFA() && slices.ContainsFunc(efaRDMAReadPCIDevices, func(id string) bool { return strings.EqualFold(id, d.PCIDevice) })
}

// Transport says what carries the device's traffic: EFA by its PCI ids,
// else the link layer of its first port.
func (d Device) Transport() Transport {
	if d.IsEFA() {
		return TransportEFA
	}
	if len(d.Ports) == 0 {
		return TransportUnspecified
	}
	switch d.Ports[0].LinkLayer {
	case LinkLayerInfiniBand:
		return TransportInfiniBand
	case LinkLayerEthernet:
		return TransportRoCE
	}
	return TransportUnspecified
}

// CharDevices lists every char device of the device, verbs first.
func (d Device) CharDevices() []CharDevice {
	var out []CharDevice
	if d.Verbs != nil {
		out = append(out, *d.Verbs)
	}
	for _, p := range d.Ports {
		if p.Umad != nil {
			out = append(out, *p.Umad)
		}
		if p.Issm != nil {
			out = append(out, *p.Issm)
		}
	}
	return out
}

// MarshalJSON adds the decoded IPv4 address, as show_gids prints it.
func (g GID) MarshalJSON() ([]byte, error) {
	type plain GID
	out := struct {
		plain
		IPv4 string `json:"ipv4,omitempty"`
	}{plain: plain(g)}
	if v4, ok := g.IPv4(); ok {
		out.IPv4 = v4.String()
	}
	return json.Marshal(out)
}
