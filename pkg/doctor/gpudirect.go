package doctor

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/gpudirect"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// checkGPUDirect judges GPUDirect RDMA: the path NCCL takes (gpudirect),
// each HCA's nearest GPU and the ACS controls between them
// (gpudirect-acs), and the IOMMU (gpudirect-iommu). A node without an
// NVIDIA GPU gets one line.
func checkGPUDirect(f Facts) []Result {
	g := f.Node.GPUDirect
	if g == nil {
		return nil
	}
	n := gpudirect.Decide(*g, libibverbsABI(f.Stack))
	if !n.GPUs {
		return []Result{{Status: Pass, Name: "gpudirect", Detail: "no NVIDIA GPU (no /proc/driver/nvidia/version, no NVIDIA display or 3D controller on PCI): nothing to check"}}
	}
	path := gdrPath(n)
	if gpudirect.C2CPlatform(*g) {
		path.Detail += "; " + c2cNote(*g)
	}
	return []Result{path, gdrPairs(f, *g), gdrIOMMU(*g)}
}

// c2cNote says what made the node a C2C platform and where its GPUs'
// memory is.
func c2cNote(g model.GPUDirect) string {
	var cpus, mem []string
	for _, n := range g.NUMA {
		switch {
		case n.CPUs:
			cpus = append(cpus, strconv.Itoa(n.ID))
		case n.MemoryOnly():
			mem = append(mem, strconv.Itoa(n.ID))
		}
	}
	return fmt.Sprintf("C2C platform (arm64, MIDR %s; CPUs on NUMA nodes %s, GPU memory on memory-only nodes %s): "+
		"each GPU reaches the CPU of its NUMA node over NVLink-C2C, and NCCL 2.27 and later count it near that CPU's "+
		"HCAs (P2C; NCCL_NET_GDR_C2C, on by default) and register its memory for them as above", g.MIDR, strings.Join(cpus, ", "), strings.Join(mem, ", "))
}

func gdrPath(n gpudirect.Node) Result {
	r := Result{Name: "gpudirect", Status: Pass}
	switch n.Path {
	case gpudirect.DMABuf:
		r.Detail = fmt.Sprintf("NCCL takes %s: %s; nvidia-peermem: %s", n.Path.Describe(), n.DMABuf.Detail, n.PeerMem.Detail)
	case gpudirect.PeerMem:
		r.Detail = fmt.Sprintf("NCCL takes %s: %s; dma-buf is closed: %s", n.Path.Describe(), n.PeerMem.Detail, n.DMABuf.Detail)
	default:
		r.Status = Fail
		r.Detail = fmt.Sprintf("NCCL takes %s: it copies GPU buffers through host memory: %s; dma-buf is closed: %s", n.Path.Describe(), n.PeerMem.Detail, n.DMABuf.Detail)
		r.Fix = "modprobe nvidia-peermem (it needs the RDMA core's peer-memory API: MLNX_OFED or DOCA-OFED), or run the NVIDIA open kernel module 515 or later (dma-buf) on a kernel 5.12 or later with CONFIG_DMA_SHARED_BUFFER and CONFIG_INFINIBAND_ON_DEMAND_PAGING"
	}
	if len(n.Notes) > 0 {
		r.Detail += "; " + strings.Join(n.Notes, "; ")
	}
	return r
}

// gdrPairs pairs each HCA with its nearest GPU, by NCCL's distance, and
// reads the ACS controls on the way between them. On a C2C platform a GPU
// on the HCA's CPU is near (P2C), whatever lies on PCIe.
func gdrPairs(f Facts, g model.GPUDirect) Result {
	r := Result{Name: "gpudirect-acs"}
	if len(f.Node.Devices) == 0 {
		r.Status, r.Detail = Warn, "no RDMA device: no HCA and GPU pair to check"
		return r
	}
	var redirected, far, unknown, fine []string
	for _, hca := range g.HCAs {
		names := hcaNames(f.Node, hca.Address)
		p, ok := gpudirect.Nearest(g, hca.Address)
		if !ok {
			continue
		}
		redirect, _, isFar, unread := p.Blockers()
		pair := fmt.Sprintf("%s ↔ GPU %s (%s)", names, p.GPU.Address, p.Distance)
		switch {
		case p.GPU.Address == "":
			far = append(far, names+": no GPU on the node")
		case isFar:
			far = append(far, fmt.Sprintf("%s: nearest GPU %s is %s away, %s", names, p.GPU.Address, p.Distance, gpudirect.FartherThanLevel(g, p.HCA)))
		case p.OverC2C():
			fine = append(fine, fmt.Sprintf("%s ↔ GPU %s (P2C): over NVLink-C2C through the CPU of NUMA node %d, no PCIe bridge between them", names, p.GPU.Address, p.HCA.NUMANode))
		case len(redirect) > 0:
			redirected = append(redirected, pair+": redirected to the root complex by "+strings.Join(redirect, ", "))
		case len(unread) > 0:
			unknown = append(unknown, pair+": ACS of "+strings.Join(unread, ", ")+" unreadable (config space past 64 bytes needs root)")
		default:
			fine = append(fine, pair+bridgesNote(p.Ingress))
		}
	}
	r.Detail = strings.Join(append(append(append(append([]string{}, redirected...), unknown...), far...), fine...), "; ")
	switch {
	case len(redirected) > 0:
		r.Status = Fail
		r.Fix = "clear the redirect on each bridge named: setpci -s BRIDGE ECAP_ACS+0x6.w=0000 (until reboot), or disable ACS in the BIOS (PCIe ACS, or IO virtualization)"
	case len(unknown) > 0:
		r.Status, r.Fix = Warn, "run doctor as root to read the bridges' config space"
	case len(far) > 0 && gpudirect.C2CPlatform(g):
		r.Status = Warn
		r.Fix = "give a job an HCA and a GPU of one Grace (the same NUMA node): NCCL's GDR over NVLink-C2C goes through the GPU's own CPU only"
	case len(far) > 0:
		r.Status = Warn
		r.Fix = "give a job an HCA and a GPU under one PCIe switch; NCCL_NET_GDR_LEVEL=PHB forces GDR through the CPU, often slower than staging"
	default:
		r.Status = Pass
	}
	return r
}

func bridgesNote(ingress []model.PCIBridge) string {
	if len(ingress) == 0 {
		return ", one bridge apart"
	}
	addrs := make([]string, len(ingress))
	for i, b := range ingress {
		addrs[i] = b.Address
	}
	return ", no ACS redirect on " + strings.Join(addrs, ", ")
}

// hcaNames are the RDMA devices on the PCI function at addr (a bond's
// device and its function's share it).
func hcaNames(node model.Node, addr string) string {
	var names []string
	for _, d := range node.Devices {
		if d.PCIAddress == addr {
			names = append(names, d.Name)
		}
	}
	if len(names) == 0 {
		return addr
	}
	return strings.Join(names, "+")
}

func gdrIOMMU(g model.GPUDirect) Result {
	r := Result{Name: "gpudirect-iommu"}
	var translating, unknown, passthrough []string
	for _, p := range append(append([]model.PCIPlace{}, g.GPUs...), g.HCAs...) {
		switch {
		case p.IOMMUGroup == "":
		case p.IOMMUTranslates():
			translating = append(translating, fmt.Sprintf("%s (group %s, %s)", p.Address, p.IOMMUGroup, p.IOMMUType))
		case p.IOMMUType == "":
			unknown = append(unknown, fmt.Sprintf("%s (group %s)", p.Address, p.IOMMUGroup))
		default:
			passthrough = append(passthrough, fmt.Sprintf("%s %s", p.Address, p.IOMMUType))
		}
	}
	switch {
	case len(translating) > 0:
		r.Status = Fail
		r.Detail = "the IOMMU translates the DMA of " + strings.Join(translating, ", ") + ": peer-to-peer requests go up to the root complex to be translated, and GDR slows down or fails"
		r.Fix = "boot with iommu=pt (intel_iommu=on iommu=pt, or amd_iommu=pt) so that devices' DMA passes through, or turn the IOMMU off"
	case len(unknown) > 0:
		r.Status, r.Detail = Warn, "IOMMU group type unreadable for "+strings.Join(unknown, ", ")
	case len(passthrough) > 0:
		r.Status, r.Detail = Pass, "IOMMU "+strings.Join(g.IOMMUUnits, " ")+" in passthrough: "+strings.Join(passthrough, ", ")
	default:
		r.Status, r.Detail = Pass, "no IOMMU translates the GPUs' and HCAs' DMA (no IOMMU group; /sys/class/iommu: "+orDash(strings.Join(g.IOMMUUnits, " "))+")"
	}
	return r
}

// libibverbsABI is N of the host's libibverbs.so.1.N.M.K file (its
// IBVERBS_1.N symbol versions); -1 when it is not found.
func libibverbsABI(s model.UserStack) int {
	for _, f := range s.Files {
		if f.Role != model.RoleLibibverbs || f.Symlink != "" {
			continue
		}
		rest, ok := strings.CutPrefix(path.Base(f.Path), "libibverbs.so.1.")
		if !ok {
			continue
		}
		minor, _, _ := strings.Cut(rest, ".")
		if n, err := strconv.Atoi(minor); err == nil {
			return n
		}
	}
	return -1
}
