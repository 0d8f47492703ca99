package model

import "strings"

// GPUDirect are the facts that decide whether an HCA can read and write GPU
// memory directly (GPUDirect RDMA), as discovery reads them: the NVIDIA
// kernel module and its peer-memory client, what the kernel can do with
// dma-buf, where the GPUs and HCAs sit on PCIe, the ACS controls of the
// bridges between them and what the IOMMU does with their DMA. The verdict
// on them is pkg/gpudirect's.
type GPUDirect struct {
	// NVIDIA is the GPU kernel module as /proc/driver/nvidia/version shows it.
	NVIDIA NVIDIADriver `json:"nvidia"`
	// PeerMem is true when nvidia-peermem is loaded (/sys/module/nvidia_peermem).
	PeerMem bool `json:"peerMem"`
	// MemoryPeers are the peer-memory clients registered with the RDMA core
	// (/sys/kernel/mm/memory_peers/NAME: nv_mem, nv_mem_nc, nvidia-peermem).
	MemoryPeers []string `json:"memoryPeers,omitempty"`
	// Kernel is the running kernel's release ("" when unknown).
	Kernel string `json:"kernel,omitempty"`
	// KernelConfig holds the CONFIG_ options that matter here (name without
	// CONFIG_ -> "y", "m"; an option that is not set is absent), read from
	// KernelConfigSource; nil when no config was found.
	KernelConfig       map[string]string `json:"kernelConfig,omitempty"`
	KernelConfigSource string            `json:"kernelConfigSource,omitempty"`
	// IOMMUUnits are the IOMMU hardware units the kernel drives
	// (/sys/class/iommu: dmar0, ivhd0); empty when no IOMMU is on.
	IOMMUUnits []string `json:"iommuUnits,omitempty"`
	// GPUs are the NVIDIA display and 3D controllers on PCI; HCAs the PCI
	// functions of the node's RDMA devices, in discovery order.
	GPUs []PCIPlace `json:"gpus,omitempty"`
	HCAs []PCIPlace `json:"hcas,omitempty"`
	// MIDR is MIDR_EL1 of the first online CPU as arm64 kernels show it
	// (devices/system/cpu/cpuN/regs/identification/midr_el1,
	// "0x00000000410fd4f0"); "" on any other architecture, which has no
	// such file.
	MIDR string `json:"midr,omitempty"`
	// NUMA are the kernel's online NUMA nodes (devices/system/node), in ID
	// order; nil where it lists none (no NUMA, or its lists unreadable).
	NUMA []NUMANode `json:"numa,omitempty"`
}

// NUMANode is one online NUMA node.
type NUMANode struct {
	ID int `json:"id"`
	// CPUs and Memory: the kernel lists the node in has_cpu, has_memory.
	CPUs   bool `json:"cpus,omitempty"`
	Memory bool `json:"memory,omitempty"`
	// Distance is its SLIT row by node ID (nodeN/distance: 10 to itself);
	// nil where it could not be read.
	Distance map[int]int `json:"distance,omitempty"`
}

// MemoryOnly reports a node with memory and no CPU: GPU memory the
// driver onlined on Grace, a CXL memory expander, HBM in flat mode.
func (n NUMANode) MemoryOnly() bool { return n.Memory && !n.CPUs }

// NUMANodeByID returns the online node id.
func (g GPUDirect) NUMANodeByID(id int) (NUMANode, bool) {
	for _, n := range g.NUMA {
		if n.ID == id {
			return n, true
		}
	}
	return NUMANode{}, false
}

// NVIDIADriver is the loaded NVIDIA GPU kernel module.
type NVIDIADriver struct {
	Loaded bool `json:"loaded"`
	// Open is true for the open kernel module ("Open Kernel Module" in its
	// version line), false for the proprietary one.
	Open    bool   `json:"open,omitempty"`
	Version string `json:"version,omitempty"`
}

// PCIPlace is where a PCI function sits: its host bridge, the bridges from
// the root port down to it, and its IOMMU group.
type PCIPlace struct {
	Address string `json:"address"`
	// Root is the host bridge directory ("pci0000:00"); "" for a virtual device.
	Root string `json:"root,omitempty"`
	// Bridges are the PCI bridges above the function, the root port first.
	Bridges []PCIBridge `json:"bridges,omitempty"`
	// NUMANode is the function's numa_node: the node of the CPU it is
	// attached to, -1 where the platform reports none.
	NUMANode int `json:"numaNode"`
	// IOMMUGroup is the function's group ("" when it has none: no IOMMU);
	// IOMMUType the group's type file: identity, DMA, DMA-FQ, ...
	IOMMUGroup string `json:"iommuGroup,omitempty"`
	IOMMUType  string `json:"iommuType,omitempty"`
}

// PCIBridge is one bridge (root port or switch port) and its ACS controls.
type PCIBridge struct {
	Address string `json:"address"`
	ACS     ACS    `json:"acs"`
}

// ACS is a bridge's Access Control Services capability as its config space
// shows it. Reading past the first 64 bytes of config space needs root:
// Readable is false where they could not be read, and nothing is known.
type ACS struct {
	Readable bool `json:"readable"`
	// Present is true when the extended capability list has ACS.
	Present bool `json:"present,omitempty"`
	// Capability and Control are its two 16-bit registers.
	Capability uint16 `json:"capability,omitempty"`
	Control    uint16 `json:"control,omitempty"`
	// Err says why the config space could not be read or walked.
	Err string `json:"err,omitempty"`
}

// The ACS control register's enable bits (PCIe base specification, ACS
// Extended Capability).
const (
	ACSSourceValidation   uint16 = 1 << 0
	ACSTranslationBlock   uint16 = 1 << 1
	ACSRequestRedirect    uint16 = 1 << 2
	ACSCompletionRedirect uint16 = 1 << 3
	ACSUpstreamForwarding uint16 = 1 << 4
	ACSEgressControl      uint16 = 1 << 5
	ACSDirectTranslated   uint16 = 1 << 6
)

var acsBitNames = []struct {
	bit  uint16
	name string
}{
	{ACSSourceValidation, "SrcValid"}, {ACSTranslationBlock, "TransBlk"}, {ACSRequestRedirect, "ReqRedir"},
	{ACSCompletionRedirect, "CmpltRedir"}, {ACSUpstreamForwarding, "UpstreamFwd"}, {ACSEgressControl, "EgressCtrl"},
	{ACSDirectTranslated, "DirectTrans"},
}

// Redirects reports whether the bridge sends peer-to-peer requests or
// completions up to the root complex instead of across to the peer.
func (a ACS) Redirects() bool {
	return a.Present && a.Control&(ACSRequestRedirect|ACSCompletionRedirect|ACSEgressControl) != 0
}

// Enabled names the control bits that are set, as lspci names them
// ("SrcValid ReqRedir"); "none" when none is.
func (a ACS) Enabled() string {
	var on []string
	for _, b := range acsBitNames {
		if a.Control&b.bit != 0 {
			on = append(on, b.name)
		}
	}
	if len(on) == 0 {
		return "none"
	}
	return strings.Join(on, " ")
}

// IOMMUTranslates reports whether the group's DMA goes through IOMMU page
// tables (DMA, DMA-FQ) rather than passthrough (identity) or no IOMMU.
func (p PCIPlace) IOMMUTranslates() bool {
	return p.IOMMUGroup != "" && strings.HasPrefix(p.IOMMUType, "DMA")
}

// PlaceOf returns the place of the PCI function at addr among places.
func PlaceOf(places []PCIPlace, addr string) (PCIPlace, bool) {
	for _, p := range places {
		if p.Address == addr {
			return p, true
		}
	}
	return PCIPlace{}, false
}
