package gpudirect

import (
	"slices"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// ready is a node where dma-buf is open: the GPU machine of 2026-11-27
// (open module 580, kernel 6.18, its config).
func ready() model.GPUDirect {
	return model.GPUDirect{
		NVIDIA: model.NVIDIADriver{Loaded: true, Open: true, Version: "580.159.04"},
		Kernel: "6.18.44-fc-v657-gpu",
		KernelConfig: map[string]string{"DMA_SHARED_BUFFER": "y", "INFINIBAND_USER_MEM": "y",
			"INFINIBAND_ON_DEMAND_PAGING": "y", "IOMMU_SUPPORT": "y"},
		GPUs: []model.PCIPlace{{Address: "0000:00:06.0", Root: "pci0000:00"}},
	}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(*model.GPUDirect)
		abi      int
		want     Path
		gpus     bool
		inDetail string // in the closed path's detail (dma-buf's unless want is DMABuf)
	}{
		{name: "dma-buf ready, no peermem", edit: func(*model.GPUDirect) {}, abi: 14, want: DMABuf, gpus: true, inDetail: "nvidia_peermem is not loaded"},
		{name: "both: dma-buf wins", edit: func(g *model.GPUDirect) { g.PeerMem, g.MemoryPeers = true, []string{"nv_mem"} }, abi: 14, want: DMABuf, gpus: true, inDetail: "memory_peers: nv_mem"},
		{name: "proprietary module with peermem", edit: func(g *model.GPUDirect) { g.NVIDIA.Open, g.PeerMem = false, true }, abi: -1, want: PeerMem, gpus: true, inDetail: "is the proprietary one"},
		{name: "proprietary, nothing", edit: func(g *model.GPUDirect) { g.NVIDIA.Open = false }, abi: -1, want: None, gpus: true, inDetail: "only the open kernel module exports"},
		{name: "open module too old", edit: func(g *model.GPUDirect) { g.NVIDIA.Version = "510.47.03" }, abi: -1, want: None, gpus: true, inDetail: "older than 515"},
		{name: "kernel too old", edit: func(g *model.GPUDirect) { g.Kernel = "5.10.0-28-amd64" }, abi: -1, want: None, gpus: true, inDetail: "kernel 5.10.0-28-amd64 is older than 5.12"},
		{name: "rc kernel is new enough", edit: func(g *model.GPUDirect) { g.Kernel = "5.12-rc3" }, abi: -1, want: DMABuf, gpus: true},
		{name: "no on-demand paging", edit: func(g *model.GPUDirect) { delete(g.KernelConfig, "INFINIBAND_ON_DEMAND_PAGING") }, abi: -1, want: None, gpus: true, inDetail: "CONFIG_INFINIBAND_ON_DEMAND_PAGING is not set: mlx5 refuses"},
		{name: "old libibverbs", edit: func(*model.GPUDirect) {}, abi: 11, want: None, gpus: true, inDetail: "libibverbs 1.11 has no ibv_reg_dmabuf_mr"},
		{name: "peermem client alone", edit: func(g *model.GPUDirect) { g.NVIDIA = model.NVIDIADriver{}; g.MemoryPeers = []string{"nv_mem"} }, abi: -1, want: PeerMem, gpus: true, inDetail: "not loaded"},
		{name: "no GPU at all", edit: func(g *model.GPUDirect) { *g = model.GPUDirect{} }, abi: 14, want: None, gpus: false, inDetail: "not loaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := ready()
			tc.edit(&g)
			n := Decide(g, tc.abi)
			if n.Path != tc.want || n.GPUs != tc.gpus {
				t.Fatalf("Path %s, GPUs %v; want %s, %v (peermem %+v, dma-buf %+v)", n.Path, n.GPUs, tc.want, tc.gpus, n.PeerMem, n.DMABuf)
			}
			detail := n.DMABuf.Detail
			if tc.want == DMABuf {
				detail = n.PeerMem.Detail
			}
			if !strings.Contains(detail, tc.inDetail) {
				t.Errorf("detail %q lacks %q", detail, tc.inDetail)
			}
		})
	}
	n := Decide(model.GPUDirect{NVIDIA: model.NVIDIADriver{Loaded: true, Open: true, Version: "580.1"}}, -1)
	if n.Path != DMABuf || len(n.Notes) != 2 {
		t.Errorf("unknown kernel and config: path %s, notes %q; want dma-buf with two notes", n.Path, n.Notes)
	}
}

func bridge(addr string, ctrl uint16) model.PCIBridge {
	return model.PCIBridge{Address: addr, ACS: model.ACS{Readable: true, Present: true, Control: ctrl}}
}

func TestNearestAndForHCA(t *testing.T) {
	rp, up := bridge("0000:00:01.0", 0), model.PCIBridge{Address: "0000:01:00.0", ACS: model.ACS{Readable: true}}
	down0, down1 := bridge("0000:02:00.0", 0), bridge("0000:02:01.0", 0)
	hca := model.PCIPlace{Address: "0000:03:00.0", Root: "pci0000:00", Bridges: []model.PCIBridge{rp, up, down0}}
	near := model.PCIPlace{Address: "0000:04:00.0", Root: "pci0000:00", Bridges: []model.PCIBridge{rp, up, down1}}
	sameRootOtherPort := model.PCIPlace{Address: "0000:10:00.0", Root: "pci0000:00", Bridges: []model.PCIBridge{bridge("0000:00:02.0", 0)}}
	otherRoot := model.PCIPlace{Address: "0000:c1:00.0", Root: "pci0000:c0", Bridges: []model.PCIBridge{bridge("0000:c0:01.0", 0)}}
	sibling := model.PCIPlace{Address: "0000:03:00.1", Root: "pci0000:00", Bridges: []model.PCIBridge{rp, up, down0}}

	for _, tc := range []struct {
		name    string
		gpus    []model.PCIPlace
		edit    func(*model.GPUDirect)
		gpu     string
		dist    Distance
		ingress int
		path    Path
		why     string
	}{
		{name: "one switch apart", gpus: []model.PCIPlace{otherRoot, near}, gpu: "0000:04:00.0", dist: PXB, ingress: 2, path: DMABuf, why: "GPU 0000:04:00.0 at PXB"},
		{name: "below the same port", gpus: []model.PCIPlace{sibling}, gpu: "0000:03:00.1", dist: PIX, path: DMABuf},
		{name: "through the host bridge", gpus: []model.PCIPlace{sameRootOtherPort}, gpu: "0000:10:00.0", dist: PHB, ingress: 4, path: None, why: "PHB away"},
		{name: "another root", gpus: []model.PCIPlace{otherRoot}, gpu: "0000:c1:00.0", dist: SYS, path: None, why: "SYS away"},
		{name: "no GPU", dist: SYS, path: None, why: "no GPU on the node"},
		{name: "ACS redirect on the GPU's port", gpus: []model.PCIPlace{near}, gpu: "0000:04:00.0", dist: PXB, ingress: 2,
			edit: func(g *model.GPUDirect) {
				g.GPUs[0].Bridges = []model.PCIBridge{rp, up, bridge("0000:02:01.0", model.ACSSourceValidation|model.ACSRequestRedirect)}
			}, path: None, why: "ACS redirect on 0000:02:01.0 (ACS SrcValid ReqRedir)"},
		{name: "source validation alone", gpus: []model.PCIPlace{near}, gpu: "0000:04:00.0", dist: PXB, ingress: 2,
			edit: func(g *model.GPUDirect) {
				g.GPUs[0].Bridges = []model.PCIBridge{rp, up, bridge("0000:02:01.0", model.ACSSourceValidation)}
			}, path: DMABuf},
		{name: "ACS unreadable does not count", gpus: []model.PCIPlace{near}, gpu: "0000:04:00.0", dist: PXB, ingress: 2,
			edit: func(g *model.GPUDirect) {
				g.GPUs[0].Bridges = []model.PCIBridge{rp, up, {Address: "0000:02:01.0", ACS: model.ACS{Err: "config space holds 64 bytes"}}}
			}, path: DMABuf},
		{name: "IOMMU translating", gpus: []model.PCIPlace{near}, gpu: "0000:04:00.0", dist: PXB, ingress: 2,
			edit: func(g *model.GPUDirect) { g.HCAs[0].IOMMUGroup, g.HCAs[0].IOMMUType = "12", "DMA-FQ" },
			path: None, why: "IOMMU translates 0000:03:00.0 (group 12, DMA-FQ)"},
		{name: "IOMMU passthrough", gpus: []model.PCIPlace{near}, gpu: "0000:04:00.0", dist: PXB, ingress: 2,
			edit: func(g *model.GPUDirect) { g.HCAs[0].IOMMUGroup, g.HCAs[0].IOMMUType = "12", "identity" }, path: DMABuf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := ready()
			g.GPUs, g.HCAs = tc.gpus, []model.PCIPlace{hca}
			if tc.edit != nil {
				tc.edit(&g)
			}
			p, ok := Nearest(g, hca.Address)
			if !ok || p.GPU.Address != tc.gpu || p.Distance != tc.dist || len(p.Ingress) != tc.ingress {
				t.Errorf("Nearest = GPU %q %s, %d ingress bridges, %v; want %q %s, %d", p.GPU.Address, p.Distance, len(p.Ingress), ok, tc.gpu, tc.dist, tc.ingress)
			}
			path, why := ForHCA(g, Decide(g, 14), hca.Address)
			if path != tc.path || !strings.Contains(why, tc.why) {
				t.Errorf("ForHCA = %s (%s), want %s (%s)", path, why, tc.path, tc.why)
			}
		})
	}
	g := ready()
	g.HCAs = []model.PCIPlace{hca}
	if _, ok := Nearest(g, "0000:99:00.0"); ok {
		t.Error("Nearest found a place for an HCA the facts do not have")
	}
	if path, _ := ForHCA(model.GPUDirect{HCAs: g.HCAs}, Decide(model.GPUDirect{}, 14), hca.Address); path != None {
		t.Errorf("a node without a path: %s", path)
	}
}

// grace is a GB200 tray's facts: two Graces (NUMA 0 and 1, arm64), each
// with two GPUs on C2C whose memory is a node of its own (2, 10 near
// Grace 0; 18, 26 near Grace 1), every function in a PCI domain of its
// own, an HCA on each Grace.
func grace() model.GPUDirect {
	g := ready()
	g.Kernel, g.MIDR = "6.8.0-1031-nvidia-64k", "0x00000000410fd4f0"
	dist := func(row ...int) map[int]int {
		out := map[int]int{}
		for i, id := range []int{0, 1, 2, 10, 18, 26} {
			out[id] = row[i]
		}
		return out
	}
	g.NUMA = []model.NUMANode{
		{ID: 0, CPUs: true, Memory: true, Distance: dist(10, 40, 80, 80, 120, 120)},
		{ID: 1, CPUs: true, Memory: true, Distance: dist(40, 10, 120, 120, 80, 80)},
		{ID: 2, Memory: true, Distance: dist(80, 120, 10, 120, 120, 120)},
		{ID: 10, Memory: true, Distance: dist(80, 120, 120, 10, 120, 120)},
		{ID: 18, Memory: true, Distance: dist(120, 80, 120, 120, 10, 120)},
		{ID: 26, Memory: true, Distance: dist(120, 80, 120, 120, 120, 10)},
	}
	place := func(domain string, numa int) model.PCIPlace {
		return model.PCIPlace{Address: domain + ":01:00.0", Root: "pci" + domain + ":00", NUMANode: numa,
			Bridges: []model.PCIBridge{bridge(domain+":00:00.0", model.ACSSourceValidation|model.ACSRequestRedirect)}}
	}
	g.GPUs = []model.PCIPlace{place("0008", 0), place("0009", 0), place("0018", 1), place("0019", 1)}
	g.HCAs = []model.PCIPlace{place("0000", 0), place("0010", 1)}
	return g
}

// TestC2C: on Grace an HCA and a GPU of the same Grace are P2C apart
// (NCCL's GDR over NVLink-C2C, on by default since 2.27), and get the
// node's path; a GPU of the other Grace stays SYS and far. Nothing of it
// fires off arm64, without memory-only nodes, or where the HCA's NUMA
// node is unknown.
func TestC2C(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*model.GPUDirect)
		hca  string
		gpu  string
		dist Distance
		path Path
		why  string
	}{
		{name: "an HCA of Grace 0", hca: "0000:01:00.0", gpu: "0008:01:00.0", dist: P2C, path: DMABuf,
			why: "GPU 0008:01:00.0 at P2C, over NVLink-C2C through the CPU of NUMA node 0"},
		{name: "an HCA of Grace 1", hca: "0010:01:00.0", gpu: "0018:01:00.0", dist: P2C, path: DMABuf, why: "through the CPU of NUMA node 1"},
		{name: "peermem registers it", edit: func(g *model.GPUDirect) { g.NVIDIA.Open, g.PeerMem = false, true },
			hca: "0000:01:00.0", gpu: "0008:01:00.0", dist: P2C, path: PeerMem, why: "over NVLink-C2C"},
		{name: "no way to register GPU memory", edit: func(g *model.GPUDirect) { g.NVIDIA.Open = false },
			hca: "0000:01:00.0", gpu: "0008:01:00.0", dist: P2C, path: None, why: "the node has no GDR path"},
		{name: "only the other Grace's GPUs", edit: func(g *model.GPUDirect) { g.GPUs = g.GPUs[2:] },
			hca: "0000:01:00.0", gpu: "0018:01:00.0", dist: SYS, path: None, why: "no GPU reaches the HCA's CPU (NUMA node 0) over NVLink-C2C"},
		{name: "x86 with CXL memory", edit: func(g *model.GPUDirect) { g.MIDR = "" },
			hca: "0000:01:00.0", gpu: "0008:01:00.0", dist: SYS, path: None, why: "farther than NCCL's GDR level PXB"},
		{name: "arm64, GPU memory not onlined", edit: func(g *model.GPUDirect) { g.NUMA = g.NUMA[:2] },
			hca: "0000:01:00.0", gpu: "0008:01:00.0", dist: SYS, path: None, why: "farther than NCCL's GDR level PXB"},
		{name: "the HCA's NUMA node unknown", edit: func(g *model.GPUDirect) { g.HCAs[0].NUMANode = -1 },
			hca: "0000:01:00.0", gpu: "0008:01:00.0", dist: SYS, path: None, why: "the HCA's NUMA node is unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := grace()
			if tc.edit != nil {
				tc.edit(&g)
			}
			p, ok := Nearest(g, tc.hca)
			if !ok || p.GPU.Address != tc.gpu || p.Distance != tc.dist || p.OverC2C() != (tc.dist == P2C) || len(p.Ingress) != 0 {
				t.Errorf("Nearest = GPU %q %s, %d ingress bridges, %v; want %q %s, none", p.GPU.Address, p.Distance, len(p.Ingress), ok, tc.gpu, tc.dist)
			}
			if redirect, _, far, _ := p.Blockers(); far != (tc.dist != P2C) || len(redirect) != 0 {
				t.Errorf("Blockers: far %v, redirect %q", far, redirect)
			}
			path, why := ForHCA(g, Decide(g, -1), tc.hca)
			if path != tc.path || !strings.Contains(why, tc.why) {
				t.Errorf("ForHCA = %s (%s), want %s (%s)", path, why, tc.path, tc.why)
			}
		})
	}
}

// C2CMemoryNodes are the GPU memory nodes nearest each Grace; a node as
// near to both, or without distances, is nobody's.
func TestC2CMemoryNodes(t *testing.T) {
	g := grace()
	for cpu, want := range map[int][]int{0: {2, 10}, 1: {18, 26}, 2: nil, 7: nil} {
		if got := C2CMemoryNodes(g, cpu); !slices.Equal(got, want) {
			t.Errorf("C2CMemoryNodes(%d) = %v, want %v", cpu, got, want)
		}
	}
	g.NUMA[3].Distance[1] = 80 // node 10 as near Grace 1 as Grace 0
	g.NUMA[4].Distance = nil   // node 18 unread
	if got0, got1 := C2CMemoryNodes(g, 0), C2CMemoryNodes(g, 1); !slices.Equal(got0, []int{2}) || !slices.Equal(got1, []int{26}) {
		t.Errorf("with a tie and a node unread: %v, %v; want [2], [26]", got0, got1)
	}
	g.MIDR = ""
	if got := C2CMemoryNodes(g, 0); got != nil {
		t.Errorf("off arm64: %v", got)
	}
}
