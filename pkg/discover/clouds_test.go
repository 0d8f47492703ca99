package discover_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/cdispec"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/gpudirect"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/topology"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// portList is "NAME:1,..." of the named devices, as NCCL_IB_HCA lists them.
func portList(names ...string) string {
	for i, n := range names {
		names[i] = n + ":1"
	}
	return strings.Join(names, ",")
}

// seq is prefix0..prefix(n-1).
func seq(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// checkDevices asserts every device's driver, PCI vendor and the link
// layer of its one port.
func checkDevices(t *testing.T, node model.Node, n int, driver, vendor string, ll model.LinkLayer) {
	t.Helper()
	if len(node.Devices) != n {
		t.Fatalf("devices %v, want %d", node.DeviceNames(), n)
	}
	for _, d := range node.Devices {
		if d.Driver != driver || d.PCIVendor != vendor || len(d.Ports) != 1 || d.Ports[0].LinkLayer != ll || !d.Ports[0].Active() {
			t.Errorf("%s: driver %s vendor %s ports %+v; want %s %s, one ACTIVE %s port", d.Name, d.Driver, d.PCIVendor, d.Ports, driver, vendor, ll)
		}
	}
}

// TestGCPA3Ultra: the eight ConnectX-7 VFs are RoCE HCAs (a VF passed into
// a VM has no PF there), all eight in NCCL_IB_HCA with the mlx5 GID index,
// NCCL's socket on the gVNIC eth0, and one rail per RoCE subnet.
func TestGCPA3Ultra(t *testing.T) {
	_, res := discoverFixture(t, "gcp-a3-ultra")
	node := res.Node
	checkDevices(t, node, 8, "mlx5_core", "0x15b3", model.LinkLayerEthernet)
	for _, d := range node.Devices {
		if d.PCIDevice != "0x101e" || d.IsVF() || d.Transport() != model.TransportRoCE || d.Ports[0].RateGbps != 400 {
			t.Errorf("%s: PCI device %s, VF %v, transport %s, %g Gb/s; want a 400 Gb/s RoCE 0x101e with no PF in the VM", d.Name, d.PCIDevice, d.IsVF(), d.Transport(), d.Ports[0].RateGbps)
		}
	}
	s := computeDefault(node)
	wantVar(t, s, "NCCL_IB_HCA", portList(seq("mlx5_", 8)...))
	wantVar(t, s, "NCCL_IB_GID_INDEX", "3")
	wantVar(t, s, "NCCL_SOCKET_IFNAME", "eth0")

	rails, notes := topology.Rails(node, config.Topology{})
	want := map[string]string{}
	for i := range 8 {
		want[fmt.Sprintf("mlx5_%d", i)] = fmt.Sprintf("192.168.%d.0/24", i+1)
	}
	if !maps.Equal(rails, want) || len(notes) != 0 {
		t.Errorf("rails %v (notes %q), want one per subnet %v", rails, notes, want)
	}
	if g := discover.GPUDirect(model.Roots{Sysfs: fixture.BuildBundledTrees(t, "gcp-a3-ultra", false).Sys}, node.Devices); len(g.GPUs) != 8 {
		t.Errorf("%d NVIDIA GPUs found, want the 8 H200", len(g.GPUs))
	}
}

// TestAzureNDv5: the eight InfiniBand VFs mlx5_ib0..7, each in its own PCI
// domain as Hyper-V gives them, go to NCCL whole; InfiniBand takes no GID
// index, and the IB HCAs are on no rail unless the config names one.
func TestAzureNDv5(t *testing.T) {
	_, res := discoverFixture(t, "azure-ndv5")
	node := res.Node
	checkDevices(t, node, 8, "mlx5_core", "0x15b3", model.LinkLayerInfiniBand)
	roots := map[string]bool{}
	for _, d := range node.Devices {
		roots[d.PCIeRoot] = true
		if d.Ports[0].NetDev == "" || !strings.HasPrefix(d.Ports[0].NetDev, "ib") {
			t.Errorf("%s: IPoIB netdev %q", d.Name, d.Ports[0].NetDev)
		}
	}
	if len(roots) != 8 {
		t.Errorf("PCIe roots %v, want a root per VF (a Hyper-V PCI domain each)", slices.Sorted(maps.Keys(roots)))
	}
	s := computeDefault(node)
	wantVar(t, s, "NCCL_IB_HCA", portList(seq("mlx5_ib", 8)...))
	wantVar(t, s, "NCCL_IB_GID_INDEX", "")
	wantVar(t, s, "NCCL_SOCKET_IFNAME", "eth0")
	if rails, _ := topology.Rails(node, config.Topology{}); len(rails) != 0 {
		t.Errorf("rails %v: InfiniBand HCAs get a rail from the config alone", rails)
	}
	cfg := config.Topology{Rails: []config.Rail{{Rail: "rail-3", IBDev: "mlx5_ib3"}}}
	if rails, _ := topology.Rails(node, cfg); len(rails) != 1 || rails["mlx5_ib3"] != "rail-3" {
		t.Errorf("configured rails %v, want mlx5_ib3 on rail-3", rails)
	}
}

// TestGB200: the four ConnectX-7 InfiniBand HCAs go to NCCL, the
// BlueField-3 carrying the default route does not; each function is
// behind a host bridge of its own, as on Grace; the four B200 are found.
// No HCA shares a PCIe root with a GPU, yet the tray is a C2C platform:
// each HCA is P2C from the GPUs of its own Grace, and GDR (dma-buf) is on
// for that pair, as NCCL 2.27 and later take it.
func TestGB200(t *testing.T) {
	tr := fixture.BuildBundledTrees(t, "gb200", false)
	_, res := discoverFixture(t, "gb200")
	node := res.Node
	if len(node.Devices) != 5 {
		t.Fatalf("devices %v, want 4 ConnectX-7 and a BlueField-3", node.DeviceNames())
	}
	wantRoots := map[string]string{"mlx5_0": "pci0000:00", "mlx5_1": "pci0002:00", "mlx5_2": "pci0010:00", "mlx5_3": "pci0012:00", "mlx5_4": "pci0006:00"}
	for _, d := range node.Devices {
		if d.PCIeRoot != wantRoots[d.Name] {
			t.Errorf("%s: PCIe root %q, want %q", d.Name, d.PCIeRoot, wantRoots[d.Name])
		}
	}
	if bf3, _ := node.DeviceByName("mlx5_4"); bf3.PCIDevice != "0xa2dc" || bf3.Ports[0].LinkLayer != model.LinkLayerEthernet || !node.CarriesDefaultRoute("mlx5_4") {
		t.Errorf("BlueField-3: %+v", bf3)
	}
	s := computeDefault(node)
	wantVar(t, s, "NCCL_IB_HCA", portList(seq("mlx5_", 4)...))
	wantVar(t, s, "NCCL_IB_GID_INDEX", "")
	wantVar(t, s, "NCCL_SOCKET_IFNAME", "enP6p3s0f0np0")

	g := discover.GPUDirect(model.Roots{Sysfs: tr.Sys, Proc: tr.Proc}, node.Devices)
	if len(g.GPUs) != 4 {
		t.Fatalf("%d GPUs, want the 4 B200", len(g.GPUs))
	}
	if !gpudirect.C2CPlatform(g) {
		t.Fatalf("not taken for a C2C platform: MIDR %q, NUMA %+v", g.MIDR, g.NUMA)
	}
	gdr := gpudirect.Decide(g, -1)
	wantGPU := map[string]string{"mlx5_0": "0008:01:00.0", "mlx5_1": "0008:01:00.0", "mlx5_2": "0018:01:00.0", "mlx5_3": "0018:01:00.0", "mlx5_4": "0008:01:00.0"}
	for _, d := range node.Devices {
		p, ok := gpudirect.Nearest(g, d.PCIAddress)
		if !ok || p.Distance != gpudirect.P2C || p.GPU.Address != wantGPU[d.Name] {
			t.Errorf("%s: nearest GPU %s at %s (%v), want %s at P2C: over C2C through its own Grace", d.Name, p.GPU.Address, p.Distance, ok, wantGPU[d.Name])
		}
		if path, why := gpudirect.ForHCA(g, gdr, d.PCIAddress); path != gpudirect.DMABuf || !strings.Contains(why, "over NVLink-C2C") {
			t.Errorf("%s: GPUDirect %s (%s), want dmabuf over NVLink-C2C", d.Name, path, why)
		}
	}
	// The other Grace's GPUs are as far as PCIe says.
	other := g
	other.GPUs = g.GPUs[2:]
	if p, _ := gpudirect.Nearest(other, "0000:03:00.0"); p.Distance != gpudirect.SYS {
		t.Errorf("mlx5_0 and Grace 1's GPU %s: %s, want SYS", p.GPU.Address, p.Distance)
	}
	if mem := gpudirect.C2CMemoryNodes(g, 1); !slices.Equal(mem, []int{18, 26}) {
		t.Errorf("GPU memory near Grace 1: %v, want [18 26]", mem)
	}
	// What tells C2C: arm64 (Neoverse V2's MIDR), memory-only NUMA nodes,
	// each GPU's and HCA's function on its Grace's node.
	if g.MIDR != "0x00000000410fd4f0" {
		t.Errorf("MIDR %q, want Neoverse V2's", g.MIDR)
	}
	var cpus, memOnly []int
	for _, n := range g.NUMA {
		if n.CPUs {
			cpus = append(cpus, n.ID)
		}
		if n.MemoryOnly() {
			memOnly = append(memOnly, n.ID)
		}
	}
	if !slices.Equal(cpus, []int{0, 1}) || !slices.Equal(memOnly, []int{2, 10, 18, 26}) {
		t.Errorf("NUMA nodes with CPUs %v, memory-only %v; want [0 1], [2 10 18 26]", cpus, memOnly)
	}
	if n, _ := g.NUMANodeByID(18); n.Distance[1] != 80 || n.Distance[0] != 120 || n.Distance[18] != 10 {
		t.Errorf("node 18's distances %v, want 80 to Grace 1, 120 to Grace 0", n.Distance)
	}
	for i, want := range []int{0, 0, 1, 1} {
		if g.GPUs[i].NUMANode != want {
			t.Errorf("GPU %s on NUMA node %d, want %d", g.GPUs[i].Address, g.GPUs[i].NUMANode, want)
		}
	}
	if hca, _ := model.PlaceOf(g.HCAs, "0010:03:00.0"); hca.NUMANode != 1 {
		t.Errorf("mlx5_2's place on NUMA node %d, want 1", hca.NUMANode)
	}
}

// TestNUMAFactsOffGrace: the fixtures of x86 nodes write no
// devices/system/node nor an arm64 MIDR, discovery reads neither, and
// none is taken for a C2C platform: its pairs are as far as PCIe puts
// them (gpu-pair's HCA PXB from its GPU, no pair P2C). A
// GB200 tree whose has_cpu cannot be read has no NUMA facts at all (every
// node would pass for memory-only), and one whose distance row is broken
// keeps the node without it.
func TestNUMAFactsOffGrace(t *testing.T) {
	for _, name := range []string{"gpu-pair", "two-socket", "seed002", "azure-ndv5", "gcp-a3-ultra"} {
		tr := fixture.BuildBundledTrees(t, name, false)
		_, res := discoverFixture(t, name)
		g := discover.GPUDirect(model.Roots{Sysfs: tr.Sys, Proc: tr.Proc}, res.Node.Devices)
		if g.NUMA != nil || g.MIDR != "" || gpudirect.C2CPlatform(g) {
			t.Errorf("%s: NUMA %+v, MIDR %q, C2C %v; want none", name, g.NUMA, g.MIDR, gpudirect.C2CPlatform(g))
		}
		for _, d := range res.Node.Devices {
			p, ok := gpudirect.Nearest(g, d.PCIAddress)
			if ok && p.Distance == gpudirect.P2C || name == "gpu-pair" && (!ok || p.Distance != gpudirect.PXB) {
				t.Errorf("%s: %s at %s from GPU %s", name, d.Name, p.Distance, p.GPU.Address)
			}
		}
	}
	tr := fixture.BuildBundledTrees(t, "gb200", false)
	node := filepath.Join(tr.Sys, "devices/system/node")
	row := filepath.Join(node, "node10/distance")
	if err := os.Remove(row); err != nil { // read-only, as sysfs
		t.Fatal(err)
	}
	if err := os.WriteFile(row, []byte("10 20\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	g := discover.GPUDirect(model.Roots{Sysfs: tr.Sys, Proc: tr.Proc}, nil)
	if n, ok := g.NUMANodeByID(10); !ok || !n.MemoryOnly() || n.Distance != nil {
		t.Errorf("node 10 with a short distance row: %+v, %v; want memory-only without distances", n, ok)
	}
	if n, _ := g.NUMANodeByID(2); n.Distance[0] != 80 {
		t.Errorf("node 2's distances %v lost with node 10's", n.Distance)
	}
	if err := os.Remove(filepath.Join(node, "has_cpu")); err != nil {
		t.Fatal(err)
	}
	if g := discover.GPUDirect(model.Roots{Sysfs: tr.Sys, Proc: tr.Proc}, nil); g.NUMA != nil {
		t.Errorf("without has_cpu: NUMA %+v, want none", g.NUMA)
	}
}

// TestAMDPollara: ionic RDMA devices (Pensando, 1dd8) are RoCE HCAs of the
// ionic provider. Their ports are RoCE v2 only, so the IPv4 GID is at 1,
// not at mlx5's 3, and that is the index NCCL is given; each NIC's subnet
// is its rail.
func TestAMDPollara(t *testing.T) {
	_, res := discoverFixture(t, "amd-pollara")
	node := res.Node
	checkDevices(t, node, 8, "ionic", "0x1dd8", model.LinkLayerEthernet)
	for _, d := range node.Devices {
		p := d.Ports[0]
		if d.Transport() != model.TransportRoCE || len(p.GIDs) < 2 {
			t.Errorf("%s: transport %s, GIDs %+v", d.Name, d.Transport(), p.GIDs)
			continue
		}
		for _, g := range p.GIDs {
			if g.Type != model.GIDTypeRoCEv2 {
				t.Errorf("%s: GID %d of type %s on a RoCE v2-only port", d.Name, g.Index, g.Type)
			}
		}
	}
	if got := cdispec.NodeProviders(node.Devices); !slices.Equal(got, []string{"ionic"}) {
		t.Errorf("providers %v, want ionic alone", got)
	}
	s := computeDefault(node)
	wantVar(t, s, "NCCL_IB_HCA", portList(seq("ionic_", 8)...))
	wantVar(t, s, "NCCL_IB_GID_INDEX", "1")
	wantVar(t, s, "NCCL_SOCKET_IFNAME", "eno1np0")
	rails, notes := topology.Rails(node, config.Topology{})
	if len(rails) != 8 || rails["ionic_0"] != "10.100.0.0/24" || rails["ionic_7"] != "10.107.0.0/24" || len(notes) != 0 {
		t.Errorf("rails %v (notes %q), want one per /24", rails, notes)
	}
}
