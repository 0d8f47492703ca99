package gpudirect

import (
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
