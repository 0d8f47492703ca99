// Package dradriver serves RDMA HCAs through Kubernetes Dynamic Resource
// Allocation (resource.k8s.io/v1): one ResourceSlice device per HCA, with
// attributes a claim's CEL selectors and constraints can use, and a kubelet
// plugin whose prepare step answers with the CDI device names of our spec.
// The slice contents and the prepare answer are pure functions of the
// model; the kubelet side and the slice publishing are the
// k8s.io/dynamic-resource-allocation helpers'.
package dradriver

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/gpudirect"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
)

// Inventory is what the driver publishes for one node: the slice's devices
// and, for the prepare step, the HCA behind each device name.
type Inventory struct {
	Devices []resourceapi.Device
	// IBDevs maps a slice device name (mlx5-1) to its HCA (mlx5_1).
	IBDevs map[string]string
	// Problems are the devices' health, by slice device name (SliceDevices
	// turns them into taints).
	Problems map[string]health.Problem
	// Degraded are the devices that work, slower than they should (grey
	// conditions of level Degraded), by slice device name.
	Degraded map[string]health.Problem
	// Warnings are HCAs left out of the slice, and why.
	Warnings []string
	// PFs maps an SR-IOV VF's device name to its PF's, where the PF is a
	// device of the slice too: a claim holding one keeps the other from
	// other claims (holders).
	PFs map[string]string
	// NUMALists are the standard numaNode of each device with a NUMA node
	// as a list, by device name, published where the API server keeps
	// list attributes (Health.Lists): see numaList.
	NUMALists map[string][]int64
}

// BuildInventory returns one device per HCA of node. A device stands for a
// whole HCA, not a port: a container given any port of an HCA opens its one
// uverbs node, which reaches every port, so per-port devices would let two
// claims share an HCA while each believed it had its own. The port
// attributes (netdev, linkLayer, portState, rate, ncclGidIndex) are those
// of the HCA's first active port, else its first port; ports counts them all.
// Every HCA is listed whatever its state, with its health in Problems.
// rails are the HCAs' rails (topology.Rails), by HCA name.
func BuildInventory(node model.Node, cfg config.NCCL, rails map[string]string) Inventory {
	inv := Inventory{IBDevs: map[string]string{}, Problems: map[string]health.Problem{}, Degraded: map[string]health.Problem{}, PFs: map[string]string{},
		NUMALists: map[string][]int64{}}
	names := map[string]string{} // device name by HCA, of the devices listed
	rule := nccl.NodeGIDRule(cfg)
	var gdr *gpudirect.Node
	if node.GPUDirect != nil {
		// A container registers GPU memory with its own image's
		// libibverbs: the host's is not judged (-1).
		n := gpudirect.Decide(*node.GPUDirect, -1)
		gdr = &n
	}
	for _, d := range node.Devices {
		name := DeviceName(d.Name)
		if name == "" {
			inv.Warnings = append(inv.Warnings, fmt.Sprintf("%s left out of the ResourceSlice: its name has no character of an RFC 1123 label", d.Name))
			continue
		}
		if prev, dup := inv.IBDevs[name]; dup {
			inv.Warnings = append(inv.Warnings, fmt.Sprintf("%s left out of the ResourceSlice: its device name %q is %s's too", d.Name, name, prev))
			continue
		}
		inv.IBDevs[name] = d.Name
		names[d.Name] = name
		inv.Problems[name] = health.Check(node, d, d.Ports)
		attrs := attributes(node, d, rule)
		setString(attrs, apis.AttrRail, rails[d.Name])
		if gdr != nil { // on every device, so that a selector needs no has()
			path, _ := gpudirect.ForHCA(*node.GPUDirect, *gdr, d.PCIAddress)
			setString(attrs, apis.AttrGPUDirect, string(path))
		}
		if list := numaList(node, d); list != nil {
			inv.NUMALists[name] = list
		}
		inv.Devices = append(inv.Devices, resourceapi.Device{
			Name:       name,
			Attributes: attrs,
		})
	}
	for _, d := range node.Devices {
		if pf, ok := node.PFOf(d); ok && names[d.Name] != "" && names[pf.Name] != "" {
			inv.PFs[names[d.Name]] = names[pf.Name]
		}
	}
	return inv
}

// WithGrey returns inv with the grey conditions (pkg/health's Tracker, by
// HCA) folded in: an Unhealthy one is a device's problem where the binary
// rule found none (that one says more: a port down, a node gone), a
// Degraded one its degradation. inv is not changed.
func (inv Inventory) WithGrey(grey map[string][]health.Condition) Inventory {
	out := inv
	out.Problems = make(map[string]health.Problem, len(inv.Problems))
	out.Degraded = map[string]health.Problem{}
	for name, ibdev := range inv.IBDevs {
		p := inv.Problems[name]
		unhealthy, degraded := health.Summarize(grey[ibdev], nil)
		if p.Healthy() {
			p = unhealthy
		}
		out.Problems[name] = p
		if !degraded.Healthy() {
			out.Degraded[name] = degraded
		}
	}
	return out
}

func attributes(node model.Node, d model.Device, rule nccl.GIDRule) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	a := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	setString(a, apis.AttrIBDev, d.Name)
	setString(a, apis.AttrPCIAddress, d.PCIAddress)
	setString(a, apis.AttrPCIVendor, d.PCIVendor)
	setString(a, apis.AttrPCIDevice, d.PCIDevice)
	setString(a, apis.AttrFirmware, d.FWVersion)
	// Kubernetes' standard names, which a GPU driver publishes too: a
	// claim's matchAttribute on one of them puts the HCA beside its GPU.
	setString(a, apis.StdAttrPCIeRoot, d.PCIeRoot)
	setString(a, apis.StdAttrPCIBusID, d.PCIAddress)
	if d.NUMANode >= 0 {
		a[apis.AttrNUMANode] = intAttr(int64(d.NUMANode))
		a[apis.StdAttrNUMANode] = intAttr(int64(d.NUMANode))
	}
	a[apis.AttrDefaultRoute] = resourceapi.DeviceAttribute{BoolValue: ptr(node.CarriesDefaultRoute(d.Name))}
	a[apis.AttrPorts] = intAttr(int64(len(d.Ports)))
	setString(a, apis.AttrTransport, string(d.Transport()))
	setSRIOV(a, node, d)
	port, ok := primaryPort(d)
	if !ok {
		return a
	}
	setString(a, apis.AttrNetDev, port.NetDev)
	setString(a, apis.AttrLinkLayer, string(port.LinkLayer))
	setString(a, apis.AttrPortState, string(port.State))
	if port.RateGbps > 0 {
		a[apis.AttrRate] = intAttr(int64(port.RateGbps)) // whole Gb/s, rounded down
	}
	if port.LinkLayer == model.LinkLayerEthernet {
		if idx, ok := nccl.SelectGIDIndex(port, rule); ok {
			a[apis.AttrNCCLGIDIndex] = intAttr(int64(idx))
		}
	}
	return a
}

// numaList is d's standard numaNode as a list: its PCI function's node
// first (a scalar's value, and what a GPU driver's list starts with:
// the node of its own PCI function), then, on a C2C platform, the NUMA
// nodes of the GPU memory reached over NVLink-C2C from that node's CPU
// (gpudirect.C2CMemoryNodes). The API server's matchAttribute on lists
// asks for a value every device shares, so the HCA pairs with a GPU of
// its own Grace whether that GPU's driver lists the Grace's node, the
// GPU's memory node or both, and never with a GPU of the other Grace.
// nil for a device without a NUMA node.
func numaList(node model.Node, d model.Device) []int64 {
	if d.NUMANode < 0 {
		return nil
	}
	out := []int64{int64(d.NUMANode)}
	if node.GPUDirect != nil {
		for _, m := range gpudirect.C2CMemoryNodes(*node.GPUDirect, d.NUMANode) {
			out = append(out, int64(m))
		}
	}
	return out
}

func setSRIOV(a map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, node model.Node, d model.Device) {
	a[apis.AttrIsSRIOVVF] = resourceapi.DeviceAttribute{BoolValue: ptr(d.IsVF())}
	setString(a, apis.AttrPFPCIAddress, d.PhysFn)
	if pf, ok := node.PFOf(d); ok {
		setString(a, apis.AttrPFIBDev, pf.Name)
	}
	if d.NumVFs > 0 {
		a[apis.AttrSRIOVVFs] = intAttr(int64(d.NumVFs))
	}
}

// primaryPort is the port whose attributes describe the HCA: the first
// active one, else the first.
func primaryPort(d model.Device) (model.Port, bool) {
	for _, p := range d.Ports {
		if p.Active() {
			return p, true
		}
	}
	if len(d.Ports) == 0 {
		return model.Port{}, false
	}
	return d.Ports[0], true
}

// DeviceName is ibdev as an RFC 1123 label, the form a ResourceSlice
// device name must take: lower case, every other character than a-z, 0-9
// and '-' as '-', no '-' at either end, at most 63 characters.
func DeviceName(ibdev string) string {
	b := []byte(strings.ToLower(ibdev))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	s := strings.Trim(string(b), "-")
	if len(s) > 63 {
		s = strings.TrimRight(s[:63], "-")
	}
	return s
}

func setString(a map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, name resourceapi.QualifiedName, v string) {
	if v != "" {
		a[name] = resourceapi.DeviceAttribute{StringValue: ptr(v)}
	}
}

func intAttr(v int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: &v} }

func ptr[T any](v T) *T { return &v }

func isTrue(b *bool) bool { return b != nil && *b }
