package apis

import "strings"

// Attributes of a device in the DRA driver's ResourceSlice, in the driver's
// own domain (a CEL selector reads device.attributes["rdma.example.com"].rate).
// Untyped constants: each is a resourceapi.QualifiedName where the DRA API
// wants one, without this package linking that API.
const (
	AttrIBDev        = "ibdev"
	AttrNetDev       = "netdev"
	AttrLinkLayer    = "linkLayer"
	AttrPortState    = "portState"
	AttrRate         = "rate"
	AttrNUMANode     = "numaNode"
	AttrPCIAddress   = "pciAddress"
	AttrPCIVendor    = "pciVendor"
	AttrPCIDevice    = "pciDevice"
	AttrFirmware     = "firmware"
	AttrNCCLGIDIndex = "ncclGidIndex"
	AttrDefaultRoute = "defaultRoute"
	AttrPorts        = "ports"
	AttrIsSRIOVVF    = "isSriovVf"
	AttrPFPCIAddress = "pfPciAddress"
	AttrPFIBDev      = "pfIbdev"
	AttrSRIOVVFs     = "sriovVfs"
	AttrHealthy      = "healthy"
	AttrDegraded     = "degraded"
	AttrShareable    = "shareable"
	AttrGPUDirect    = "gpuDirect"
	AttrTransport    = "transport"
	AttrRail         = "rail"
)

// Standard attributes (resource.kubernetes.io) the driver publishes too.
const (
	StdAttrPCIeRoot = "resource.kubernetes.io/pcieRoot"
	StdAttrPCIBusID = "resource.kubernetes.io/pciBusID"
	StdAttrNUMANode = "resource.kubernetes.io/numaNode"
)

// CapacityBandwidth is the capacity a shareable HCA offers: its port's rate
// in Gb/s. A claim that asks for none of it takes all of it (the request
// policy's default), so a plain claim still has its HCA alone.
const CapacityBandwidth = "bandwidth"

// Attribute documents one published attribute: the help texts and the
// docs are generated from this table, and a test holds it to what the
// driver publishes.
type Attribute struct {
	Name string
	Help string
}

// Attributes is every attribute the driver may publish, in the order the
// help lists them.
var Attributes = []Attribute{
	{AttrIBDev, "the HCA's name (mlx5_1)"},
	{AttrNetDev, "the netdev of its primary port (the first active one, else the first)"},
	{AttrLinkLayer, "the primary port's link layer: InfiniBand, Ethernet (RoCE) or unspecified (EFA)"},
	{AttrTransport, "what carries its traffic: infiniband, roce, efa (AWS EFA, by PCI id) or unspecified"},
	{AttrPortState, "the primary port's state (ACTIVE, DOWN, ...)"},
	{AttrRate, "the primary port's rate in whole Gb/s"},
	{AttrNUMANode, "the NUMA node of its PCI function"},
	{AttrPCIAddress, "its PCI address"},
	{AttrPCIVendor, "its PCI vendor id"},
	{AttrPCIDevice, "its PCI device id"},
	{AttrFirmware, "its firmware version"},
	{AttrNCCLGIDIndex, "the GID index NCCL picks on the primary port (RoCE ports only)"},
	{AttrDefaultRoute, "true where one of its netdevs carries the node's default route"},
	{AttrPorts, "how many ports it has (a device is a whole HCA)"},
	{AttrIsSRIOVVF, "true on an SR-IOV virtual function (set on every device, so a selector needs no has())"},
	{AttrPFPCIAddress, "a VF's physical function's PCI address"},
	{AttrPFIBDev, "a VF's physical function's name, where the PF is an RDMA device here"},
	{AttrSRIOVVFs, "how many VFs a PF has enabled"},
	{AttrHealthy, "false on a device carrying the unhealthy taint"},
	{AttrDegraded, "true on a device carrying the degraded taint"},
	{AttrShareable, "true on a device claims may share by bandwidth"},
	{AttrGPUDirect, "how it reaches its nearest GPU's memory: peermem, dmabuf or none (on Grace-Blackwell, a GPU of its own Grace is near: over NVLink-C2C)"},
	{AttrRail, "the rail (leaf switch) it is wired to: a [[topology.rails]] name, else its IPv4 subnet (25.11.128.32/27) where each RoCE HCA has one of its own; absent where unknown"},
	{StdAttrPCIeRoot, "the PCIe root complex (standard)"},
	{StdAttrPCIBusID, "its PCI address (standard)"},
	{StdAttrNUMANode, "its NUMA node (standard); where the API server keeps list attributes (DRAListTypeAttributes) a list: that node, then on Grace-Blackwell the NUMA nodes of the GPU memory its CPU reaches over NVLink-C2C"},
}

// AttributeHelp lists Attributes one per line, for a command's help.
func AttributeHelp() string {
	var b strings.Builder
	for _, a := range Attributes {
		b.WriteString("  " + a.Name + ": " + a.Help + "\n")
	}
	return b.String()
}
