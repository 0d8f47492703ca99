package gpudirect

import (
	"slices"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// C2CPlatform reports a node whose GPUs are attached to its CPUs over
// NVLink-C2C (GH200, GB200, GB300: each GPU to one Grace), told from sysfs
// alone: an arm64 host (MIDR_EL1 in sysfs) with an NVIDIA GPU and a NUMA
// node that holds memory and no CPU. NVIDIA's driver onlines a C2C GPU's
// memory as such a node, which a GPU on PCIe never gets. Memory-only nodes
// exist on x86 too (CXL memory expanders, HBM in flat mode, persistent
// memory used as RAM), hence the architecture; an arm64 server with PCIe
// GPUs and CXL memory would pass, and is not known to exist. A tray whose
// driver has not onlined the GPUs' memory (not loaded, or its NUMA mode
// off) is not recognized, and its pairs stay as far as PCIe puts them.
func C2CPlatform(g model.GPUDirect) bool {
	if g.MIDR == "" || len(g.GPUs) == 0 {
		return false
	}
	return slices.ContainsFunc(g.NUMA, model.NUMANode.MemoryOnly)
}

// c2cCPU is the NUMA node of the CPU a GPU on a C2C platform is attached
// to: its PCI function's node, where that node has CPUs.
func c2cCPU(g model.GPUDirect, gpu model.PCIPlace) (int, bool) {
	n, ok := g.NUMANodeByID(gpu.NUMANode)
	return gpu.NUMANode, ok && n.CPUs
}

// C2CMemoryNodes are, on a C2C platform, the NUMA nodes of the GPU memory
// reached over NVLink-C2C from the CPU of NUMA node cpu: the memory-only
// nodes whose nearest node with CPUs, by the SLIT, is cpu. sysfs does not
// say which GPU's memory a node holds, and on Grace every memory-only node
// is a GPU's. A node equally near two CPUs, or without distances, goes to
// none. nil off a C2C platform or where cpu has no CPUs.
func C2CMemoryNodes(g model.GPUDirect, cpu int) []int {
	if n, ok := g.NUMANodeByID(cpu); !C2CPlatform(g) || !ok || !n.CPUs {
		return nil
	}
	var out []int
	for _, mem := range g.NUMA {
		if !mem.MemoryOnly() || mem.Distance == nil {
			continue
		}
		nearest, best, tie := -1, 0, false
		for _, c := range g.NUMA {
			d, ok := mem.Distance[c.ID]
			switch {
			case !c.CPUs || !ok:
			case nearest < 0 || d < best:
				nearest, best, tie = c.ID, d, false
			case d == best:
				tie = true
			}
		}
		if nearest == cpu && !tie {
			out = append(out, mem.ID)
		}
	}
	return out
}
