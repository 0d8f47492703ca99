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
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/gpudirect"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// Attributes in the driver's own domain (an unqualified name is the
// driver's: a CEL selector reads device.attributes["rdma.example.com"].rate).
const (
	AttrIBDev        resourceapi.QualifiedName = "ibdev"
	AttrNetDev       resourceapi.QualifiedName = "netdev"
	AttrLinkLayer    resourceapi.QualifiedName = "linkLayer"
	AttrPortState    resourceapi.QualifiedName = "portState"
	AttrRate         resourceapi.QualifiedName = "rate"
	AttrNUMANode     resourceapi.QualifiedName = "numaNode"
	AttrPCIAddress   resourceapi.QualifiedName = "pciAddress"
	AttrPCIVendor    resourceapi.QualifiedName = "pciVendor"
	AttrPCIDevice    resourceapi.QualifiedName = "pciDevice"
	AttrFirmware     resourceapi.QualifiedName = "firmware"
	AttrNCCLGIDIndex resourceapi.QualifiedName = "ncclGidIndex"
	AttrDefaultRoute resourceapi.QualifiedName = "defaultRoute"
	AttrPorts        resourceapi.QualifiedName = "ports"
	// SR-IOV: isSriovVf is set on every device (false on a PF or a plain
	// HCA), so that a selector needs no has(); a VF names its PF by PCI
	// address (pfPciAddress) and, where the PF is an RDMA device here, by
	// name (pfIbdev); a PF with VFs enabled says how many (sriovVfs).
	AttrIsSRIOVVF    resourceapi.QualifiedName = "isSriovVf"
	AttrPFPCIAddress resourceapi.QualifiedName = "pfPciAddress"
	AttrPFIBDev      resourceapi.QualifiedName = "pfIbdev"
	AttrSRIOVVFs     resourceapi.QualifiedName = "sriovVfs"
	// AttrHealthy is false on a device carrying the unhealthy taint: a
	// request with allocationMode All selects it to leave such devices out
	// (a tainted device it selects would fail the claim).
	AttrHealthy resourceapi.QualifiedName = "healthy"
	// AttrDegraded is true on a device carrying the degraded taint (a
	// grey condition: its link or PCIe slot below what it trains at): a
	// selector can avoid it where the API server drops taints.
	AttrDegraded resourceapi.QualifiedName = "degraded"
	// AttrShareable is true on a device several claims may share by
	// bandwidth (Shareable); absent where the API server has no
	// consumable capacity.
	AttrShareable resourceapi.QualifiedName = "shareable"
	// AttrGPUDirect is how the HCA reaches its nearest GPU's memory:
	// "peermem" (nvidia-peermem), "dmabuf" (the open kernel module's
	// dma-buf) or "none" (NCCL stages through host memory: no path on the
	// node, no GPU within a PCIe switch of it, ACS redirect or an IOMMU
	// translating between them; a device on no PCI function). Absent
	// where the facts were not read.
	AttrGPUDirect resourceapi.QualifiedName = "gpuDirect"
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
}

// BuildInventory returns one device per HCA of node. A device stands for a
// whole HCA, not a port: a container given any port of an HCA opens its one
// uverbs node, which reaches every port, so per-port devices would let two
// claims share an HCA while each believed it had its own. The port
// attributes (netdev, linkLayer, portState, rate, ncclGidIndex) are those
// of the HCA's first active port, else its first port; ports counts them all.
// Every HCA is listed whatever its state, with its health in Problems.
func BuildInventory(node model.Node, cfg config.NCCL) Inventory {
	inv := Inventory{IBDevs: map[string]string{}, Problems: map[string]health.Problem{}, Degraded: map[string]health.Problem{}}
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
		inv.Problems[name] = health.Check(node, d, d.Ports)
		attrs := attributes(node, d, rule)
		if gdr != nil { // on every device, so that a selector needs no has()
			path, _ := gpudirect.ForHCA(*node.GPUDirect, *gdr, d.PCIAddress)
			setString(attrs, AttrGPUDirect, string(path))
		}
		inv.Devices = append(inv.Devices, resourceapi.Device{
			Name:       name,
			Attributes: attrs,
		})
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
	setString(a, AttrIBDev, d.Name)
	setString(a, AttrPCIAddress, d.PCIAddress)
	setString(a, AttrPCIVendor, d.PCIVendor)
	setString(a, AttrPCIDevice, d.PCIDevice)
	setString(a, AttrFirmware, d.FWVersion)
	// Kubernetes' standard names, which a GPU driver publishes too: a
	// claim's matchAttribute on one of them puts the HCA beside its GPU.
	setString(a, deviceattribute.StandardDeviceAttributePCIeRoot, d.PCIeRoot)
	setString(a, deviceattribute.StandardDeviceAttributePCIBusID, d.PCIAddress)
	if d.NUMANode >= 0 {
		a[AttrNUMANode] = intAttr(int64(d.NUMANode))
		a[deviceattribute.StandardDeviceAttributeNUMANode] = intAttr(int64(d.NUMANode))
	}
	a[AttrDefaultRoute] = resourceapi.DeviceAttribute{BoolValue: ptr(nccl.CarriesDefaultRoute(node, d.Name))}
	a[AttrPorts] = intAttr(int64(len(d.Ports)))
	setSRIOV(a, node, d)
	port, ok := primaryPort(d)
	if !ok {
		return a
	}
	setString(a, AttrNetDev, port.NetDev)
	setString(a, AttrLinkLayer, string(port.LinkLayer))
	setString(a, AttrPortState, port.State)
	if gbps, ok := RateGbps(port.Rate); ok {
		a[AttrRate] = intAttr(gbps)
	}
	if port.LinkLayer == model.LinkLayerEthernet {
		if idx, ok := nccl.SelectGIDIndex(port, rule); ok {
			a[AttrNCCLGIDIndex] = intAttr(int64(idx))
		}
	}
	return a
}

func setSRIOV(a map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, node model.Node, d model.Device) {
	a[AttrIsSRIOVVF] = resourceapi.DeviceAttribute{BoolValue: ptr(d.IsVF())}
	setString(a, AttrPFPCIAddress, d.PhysFn)
	if pf, ok := node.PFOf(d); ok {
		setString(a, AttrPFIBDev, pf.Name)
	}
	if d.NumVFs > 0 {
		a[AttrSRIOVVFs] = intAttr(int64(d.NumVFs))
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

// RateGbps reads sysfs's port rate ("200 Gb/sec (4X HDR)") as whole Gb/s,
// rounded down ("2.5 Gb/sec" is 2).
func RateGbps(rate string) (int64, bool) {
	v, ok := sysfs.ParseRate(rate)
	return int64(v), ok
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
