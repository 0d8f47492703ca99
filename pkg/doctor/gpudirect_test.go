package doctor

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// TestGatherGPUDirectOnFixture reads gpu-pair (an HCA and a GPU below one
// PCIe switch) through discovery's real code and judges it.
func TestGatherGPUDirectOnFixture(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for mknod")
	}
	tr := fixture.BuildBundledTrees(t, "gpu-pair", true)
	look, run := fakeEngines(nil)
	f := Gather(context.Background(), Options{Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev, Proc: tr.Proc, Host: t.TempDir()},
		SpecPath: t.TempDir() + "/spec.yaml", LookPath: look, Run: run})
	g := f.Node.GPUDirect
	if g == nil || !g.NVIDIA.Open || g.NVIDIA.Version != "580.159.04" || g.Kernel != "6.8.0-49-generic" || g.KernelConfig["INFINIBAND_ON_DEMAND_PAGING"] != "y" {
		t.Fatalf("GPUDirect facts: %+v", g)
	}
	if len(g.GPUs) != 1 || len(g.HCAs) != 1 || len(g.GPUs[0].Bridges) != 3 || g.GPUs[0].IOMMUType != "identity" {
		t.Fatalf("places: GPUs %+v, HCAs %+v", g.GPUs, g.HCAs)
	}
	if acs := g.GPUs[0].Bridges[2].ACS; !acs.Readable || !acs.Present || acs.Control != 0 {
		t.Errorf("the GPU's downstream port: ACS %+v", acs)
	}
	f.Stack = model.UserStack{} // the host's libibverbs is not the fixture's
	for _, name := range []string{"gpudirect", "gpudirect-acs", "gpudirect-iommu"} {
		r := find(Check(f), name)
		if len(r) != 1 || r[0].Status != Pass {
			t.Errorf("%s: %v", name, r)
		}
	}
}

func gdrFacts() Facts {
	f := goodFacts()
	hca := model.PCIPlace{Address: "0000:03:00.0", Root: "pci0000:00", Bridges: []model.PCIBridge{
		{Address: "0000:00:01.0", ACS: model.ACS{Readable: true, Present: true}},
		{Address: "0000:01:00.0", ACS: model.ACS{Readable: true}},
		{Address: "0000:02:00.0", ACS: model.ACS{Readable: true, Present: true}},
	}}
	gpu := hca
	gpu.Address = "0000:04:00.0"
	gpu.Bridges = append(append([]model.PCIBridge{}, hca.Bridges[:2]...), model.PCIBridge{Address: "0000:02:01.0", ACS: model.ACS{Readable: true, Present: true}})
	f.Node.Devices[0].PCIAddress = hca.Address
	f.Node.GPUDirect = &model.GPUDirect{
		NVIDIA: model.NVIDIADriver{Loaded: true, Open: true, Version: "580.159.04"}, Kernel: "6.8.0-49-generic",
		KernelConfig: map[string]string{"DMA_SHARED_BUFFER": "y", "INFINIBAND_USER_MEM": "y", "INFINIBAND_ON_DEMAND_PAGING": "y"},
		GPUs:         []model.PCIPlace{gpu}, HCAs: []model.PCIPlace{hca},
	}
	return f
}

func TestCheckGPUDirect(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(*Facts)
		check  string
		status Status
		detail string
		fix    string
	}{
		{name: "dma-buf", check: "gpudirect", status: Pass, detail: "NCCL takes GDR via dma-buf: NVIDIA open kernel module 580.159.04, kernel 6.8.0-49-generic, CONFIG_DMA_SHARED_BUFFER=y"},
		{name: "the host's libibverbs is read", check: "gpudirect", status: Pass, detail: "libibverbs 1.14 (ibv_reg_dmabuf_mr)"},
		{name: "peermem", edit: func(f *Facts) { f.Node.GPUDirect.NVIDIA.Open, f.Node.GPUDirect.PeerMem = false, true },
			check: "gpudirect", status: Pass, detail: "NCCL takes GDR via nvidia-peermem: nvidia_peermem is loaded"},
		{name: "none", edit: func(f *Facts) { f.Node.GPUDirect.Kernel = "5.4.0-150-generic" },
			check: "gpudirect", status: Fail, detail: "NCCL takes no GDR (host staging)", fix: "modprobe nvidia-peermem"},
		{name: "no GPU: one line", edit: func(f *Facts) { f.Node.GPUDirect = &model.GPUDirect{} },
			check: "gpudirect", status: Pass, detail: "no NVIDIA GPU"},
		{name: "pair", check: "gpudirect-acs", status: Pass, detail: "mlx5_0 ↔ GPU 0000:04:00.0 (PXB), no ACS redirect on 0000:02:00.0, 0000:02:01.0"},
		{name: "redirect", edit: func(f *Facts) {
			f.Node.GPUDirect.GPUs[0].Bridges[2].ACS.Control = model.ACSRequestRedirect | model.ACSCompletionRedirect
		}, check: "gpudirect-acs", status: Fail, detail: "redirected to the root complex by 0000:02:01.0 (ACS ReqRedir CmpltRedir)", fix: "setpci -s BRIDGE ECAP_ACS+0x6.w=0000"},
		{name: "unreadable ACS", edit: func(f *Facts) {
			f.Node.GPUDirect.GPUs[0].Bridges[2].ACS = model.ACS{Err: "config space holds 64 bytes"}
		}, check: "gpudirect-acs", status: Warn, detail: "ACS of 0000:02:01.0 unreadable", fix: "run doctor as root"},
		{name: "GPU through the CPU", edit: func(f *Facts) {
			f.Node.GPUDirect.GPUs[0].Bridges = []model.PCIBridge{{Address: "0000:00:02.0"}}
		}, check: "gpudirect-acs", status: Warn, detail: "nearest GPU 0000:04:00.0 is PHB away"},
		{name: "no HCA", edit: func(f *Facts) { f.Node.Devices = nil }, check: "gpudirect-acs", status: Warn, detail: "no RDMA device"},
		{name: "no IOMMU", check: "gpudirect-iommu", status: Pass, detail: "no IOMMU translates"},
		{name: "IOMMU translates", edit: func(f *Facts) {
			f.Node.GPUDirect.GPUs[0].IOMMUGroup, f.Node.GPUDirect.GPUs[0].IOMMUType = "7", "DMA"
		}, check: "gpudirect-iommu", status: Fail, detail: "the IOMMU translates the DMA of 0000:04:00.0 (group 7, DMA)", fix: "iommu=pt"},
		{name: "IOMMU passthrough", edit: func(f *Facts) {
			f.Node.GPUDirect.IOMMUUnits = []string{"dmar0"}
			f.Node.GPUDirect.GPUs[0].IOMMUGroup, f.Node.GPUDirect.GPUs[0].IOMMUType = "7", "identity"
		}, check: "gpudirect-iommu", status: Pass, detail: "IOMMU dmar0 in passthrough: 0000:04:00.0 identity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := gdrFacts()
			if tc.edit != nil {
				tc.edit(&f)
			}
			r := find(Check(f), tc.check)
			if len(r) != 1 {
				t.Fatalf("%d %s results", len(r), tc.check)
			}
			if r[0].Status != tc.status || !strings.Contains(r[0].Detail, tc.detail) || !strings.Contains(r[0].Fix, tc.fix) {
				t.Errorf("got %s\nwant %s with %q, fix %q", r[0], tc.status, tc.detail, tc.fix)
			}
		})
	}
	f := gdrFacts()
	f.Node.GPUDirect = &model.GPUDirect{}
	if r := find(Check(f), "gpudirect-acs"); len(r) != 0 {
		t.Errorf("a node without a GPU printed %v", r)
	}
	f.Node.GPUDirect = nil
	if r := find(Check(f), "gpudirect"); len(r) != 0 {
		t.Errorf("facts not gathered printed %v", r)
	}
}

// TestCheckGPUDirectOnGB200: on the gb200 tray, discovered from its
// fixture, doctor names the C2C platform and pairs each HCA with a GPU of
// its own Grace over NVLink-C2C; an HCA whose Grace has no GPU left is far,
// and the fix says to keep a job on one Grace.
func TestCheckGPUDirectOnGB200(t *testing.T) {
	tr := fixture.BuildBundledTrees(t, "gb200", false)
	res, err := discover.Discover(discover.Options{Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev}, SkipNet: true})
	if err != nil {
		t.Fatal(err)
	}
	g := discover.GPUDirect(model.Roots{Sysfs: tr.Sys, Proc: tr.Proc}, res.Node.Devices)
	f := goodFacts()
	f.Node = res.Node
	f.Node.GPUDirect = &g
	byName := func(f Facts) map[string]Result {
		out := map[string]Result{}
		for _, r := range checkGPUDirect(f) {
			out[r.Name] = r
		}
		return out
	}
	r := byName(f)
	if p := r["gpudirect"]; p.Status != Pass || !strings.Contains(p.Detail, "NCCL takes GDR via dma-buf") ||
		!strings.Contains(p.Detail, "C2C platform (arm64, MIDR 0x00000000410fd4f0; CPUs on NUMA nodes 0, 1, GPU memory on memory-only nodes 2, 10, 18, 26)") {
		t.Errorf("gpudirect: %s", p)
	}
	pairs := r["gpudirect-acs"]
	for _, want := range []string{
		"mlx5_0 ↔ GPU 0008:01:00.0 (P2C): over NVLink-C2C through the CPU of NUMA node 0",
		"mlx5_2 ↔ GPU 0018:01:00.0 (P2C): over NVLink-C2C through the CPU of NUMA node 1",
		"mlx5_4 ↔ GPU 0008:01:00.0 (P2C)",
	} {
		if pairs.Status != Pass || !strings.Contains(pairs.Detail, want) {
			t.Errorf("gpudirect-acs: %s\nwant Pass with %q", pairs, want)
		}
	}
	g.GPUs = g.GPUs[:2] // Grace 1's GPUs gone
	pairs = byName(f)["gpudirect-acs"]
	if pairs.Status != Warn || !strings.Contains(pairs.Detail, "mlx5_2: nearest GPU 0008:01:00.0 is SYS away, farther than NCCL's GDR level P2C: on this C2C platform no GPU reaches the HCA's CPU (NUMA node 1)") ||
		!strings.Contains(pairs.Fix, "an HCA and a GPU of one Grace") {
		t.Errorf("Grace 1 without GPUs: %s", pairs)
	}
}
