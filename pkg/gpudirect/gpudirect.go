// Package gpudirect is the pure GPUDirect RDMA policy: from the facts
// discovery reads (model.GPUDirect), which path NCCL takes to let an HCA
// read and write GPU memory (nvidia-peermem, dma-buf, or none: staging
// through host memory), which GPU each HCA is paired with and how far it is
// by NCCL's measure, and what on the way between them (ACS redirect on a
// bridge, an IOMMU translating) sends the traffic up to the root complex.
package gpudirect

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Path is how GPU memory reaches the HCA.
type Path string

const (
	// PeerMem: nvidia-peermem, the peer-memory client of the RDMA core.
	PeerMem Path = "peermem"
	// DMABuf: the GPU's memory exported as a dma-buf and registered with
	// ibv_reg_dmabuf_mr.
	DMABuf Path = "dmabuf"
	// None: NCCL stages GPU buffers through host memory.
	None Path = "none"
)

// Describe is how doctor names the path.
func (p Path) Describe() string {
	switch p {
	case PeerMem:
		return "GDR via nvidia-peermem"
	case DMABuf:
		return "GDR via dma-buf"
	}
	return "no GDR (host staging)"
}

// Minimums for dma-buf: the first NVIDIA open kernel module that exports
// GPU memory as dma-buf, the first kernel whose RDMA core registers a
// dma-buf (ib_umem_dmabuf, uverbs' reg_dmabuf_mr), and the libibverbs ABI
// that has ibv_reg_dmabuf_mr (IBVERBS_1.12, rdma-core 34).
const (
	minOpenModule     = 515
	minLibibverbsABI  = 12
	minKernelMajor    = 5
	minKernelMinor    = 12
	firstRDMACoreWith = 34
)

// peerMemClients are the peer-memory client names NCCL looks for under
// /sys/kernel/mm/memory_peers (nv_peer_mem's and nvidia-peermem's).
var peerMemClients = []string{"nv_mem", "nv_mem_nc", "nvidia-peermem"}

// Option is one path's availability.
type Option struct {
	OK bool
	// Detail is what was found (OK) or why the path is closed.
	Detail string
}

// Node is the node-wide verdict.
type Node struct {
	// GPUs is false on a node without an NVIDIA GPU or driver.
	GPUs    bool
	PeerMem Option
	DMABuf  Option
	// Path is what NCCL takes: dma-buf where it can (NCCL_DMABUF_ENABLE
	// is on by default and wins over peermem), else peermem, else none.
	Path Path
	// Notes are facts that did not close a path but were not checked
	// (a kernel config that could not be found).
	Notes []string
}

// Decide judges the node. libibverbsABI is the minor of the host's
// libibverbs.so.1.N (14 for rdma-core 50); -1 when unknown: containers
// register with their own image's libibverbs anyway.
func Decide(g model.GPUDirect, libibverbsABI int) Node {
	n := Node{GPUs: len(g.GPUs) > 0 || g.NVIDIA.Loaded}
	n.PeerMem = peerMem(g)
	n.DMABuf, n.Notes = dmaBuf(g, libibverbsABI)
	switch {
	case n.DMABuf.OK:
		n.Path = DMABuf
	case n.PeerMem.OK:
		n.Path = PeerMem
	default:
		n.Path = None
	}
	return n
}

func peerMem(g model.GPUDirect) Option {
	var clients []string
	for _, c := range g.MemoryPeers {
		if slices.Contains(peerMemClients, c) {
			clients = append(clients, c)
		}
	}
	switch {
	case g.PeerMem && len(clients) > 0:
		return Option{OK: true, Detail: "nvidia_peermem is loaded and registered with the RDMA core (memory_peers: " + strings.Join(clients, ", ") + ")"}
	case g.PeerMem:
		return Option{OK: true, Detail: "nvidia_peermem is loaded (/sys/module/nvidia_peermem; no client under /sys/kernel/mm/memory_peers)"}
	case len(clients) > 0:
		return Option{OK: true, Detail: "a peer-memory client is registered (memory_peers: " + strings.Join(clients, ", ") + ")"}
	}
	return Option{Detail: "nvidia_peermem is not loaded (no /sys/module/nvidia_peermem, no nv_mem client in /sys/kernel/mm/memory_peers)"}
}

func dmaBuf(g model.GPUDirect, libibverbsABI int) (Option, []string) {
	var closed, found, notes []string
	drv := g.NVIDIA
	switch {
	case !drv.Loaded:
		closed = append(closed, "the NVIDIA kernel module is not loaded (no /proc/driver/nvidia/version)")
	case !drv.Open:
		closed = append(closed, "the NVIDIA kernel module "+orUnknown(drv.Version)+" is the proprietary one; only the open kernel module exports GPU memory as dma-buf")
	case major(drv.Version) < minOpenModule:
		closed = append(closed, fmt.Sprintf("the NVIDIA open kernel module %s is older than %d, the first that exports dma-buf", orUnknown(drv.Version), minOpenModule))
	default:
		found = append(found, "NVIDIA open kernel module "+drv.Version)
	}
	kmaj, kmin, ok := kernelVersion(g.Kernel)
	switch {
	case !ok:
		notes = append(notes, "kernel release unknown: its dma-buf support unchecked")
	case kmaj < minKernelMajor || kmaj == minKernelMajor && kmin < minKernelMinor:
		closed = append(closed, fmt.Sprintf("kernel %s is older than %d.%d, the first that registers dma-buf memory with an HCA", g.Kernel, minKernelMajor, minKernelMinor))
	default:
		found = append(found, "kernel "+g.Kernel)
	}
	if g.KernelConfig == nil {
		notes = append(notes, "no kernel config (/proc/config.gz, /boot/config-RELEASE): CONFIG_DMA_SHARED_BUFFER and CONFIG_INFINIBAND_ON_DEMAND_PAGING unchecked")
	} else {
		var set []string
		for _, opt := range []struct{ name, why string }{
			{"DMA_SHARED_BUFFER", "the kernel has no dma-buf"},
			{"INFINIBAND_USER_MEM", "the RDMA core registers no user memory"},
			{"INFINIBAND_ON_DEMAND_PAGING", "mlx5 refuses dma-buf registrations"},
		} {
			if v := g.KernelConfig[opt.name]; v != "" {
				set = append(set, "CONFIG_"+opt.name+"="+v)
			} else {
				closed = append(closed, "CONFIG_"+opt.name+" is not set: "+opt.why)
			}
		}
		if g.KernelConfig["DMABUF_MOVE_NOTIFY"] == "" {
			set = append(set, "CONFIG_DMABUF_MOVE_NOTIFY unset (not needed: the buffer is pinned when the HCA maps it)")
		}
		found = append(found, strings.Join(set, ", "))
	}
	switch {
	case libibverbsABI < 0:
	case libibverbsABI < minLibibverbsABI:
		closed = append(closed, fmt.Sprintf("the host's libibverbs 1.%d has no ibv_reg_dmabuf_mr (IBVERBS_1.%d, rdma-core %d)", libibverbsABI, minLibibverbsABI, firstRDMACoreWith))
	default:
		found = append(found, fmt.Sprintf("libibverbs 1.%d (ibv_reg_dmabuf_mr)", libibverbsABI))
	}
	if len(closed) > 0 {
		return Option{Detail: strings.Join(closed, "; ")}, notes
	}
	return Option{OK: true, Detail: strings.Join(found, ", ")}, notes
}

func orUnknown(s string) string {
	if s == "" {
		return "(version unknown)"
	}
	return s
}

// major is a driver version's first number (580 of 580.159.04); 0 when none.
func major(v string) int {
	m, _, _ := strings.Cut(v, ".")
	n, _ := strconv.Atoi(m)
	return n
}

// kernelVersion reads "6.8.0-49-generic" as 6, 8.
func kernelVersion(release string) (int, int, bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	maj, err1 := strconv.Atoi(parts[0])
	digits := strings.IndexFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	if digits < 0 {
		digits = len(parts[1])
	}
	min, err2 := strconv.Atoi(parts[1][:digits])
	return maj, min, err1 == nil && err2 == nil
}
