package discover_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// discoverFixture builds a bundled topology (sysfs tree, dev nodes, netdevs
// in a fresh network namespace) and runs the production discovery on it.
func discoverFixture(t *testing.T, name string) (fixture.Topology, discover.Result) {
	t.Helper()
	tr := fixture.BuildBundledTrees(t, name, os.Geteuid() == 0)
	topo := tr.Topo
	h, nsPath := fixture.NewNetNS(t)
	if err := fixture.SetupNetNS(topo, h); err != nil {
		t.Fatal(err)
	}
	res, err := discover.Discover(discover.Options{
		Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev, NetNS: nsPath},
	})
	if err != nil {
		t.Fatalf("discover %s: %v", name, err)
	}
	return topo, res
}

// TestEveryFixtureMatchesItsTopology checks what every node shares: the
// devices, ports, netdevs, carrier and char devices the topology declares.
func TestEveryFixtureMatchesItsTopology(t *testing.T) {
	for _, name := range fixture.Bundled() {
		t.Run(name, func(t *testing.T) {
			topo, res := discoverFixture(t, name)
			node := res.Node
			if len(node.Devices) != len(topo.Devices) {
				t.Fatalf("%d devices, topology has %d", len(node.Devices), len(topo.Devices))
			}
			for _, want := range topo.Devices {
				got, ok := node.DeviceByName(want.Name)
				if !ok {
					t.Fatalf("device %s missing; got %v", want.Name, node.DeviceNames())
				}
				checkDevice(t, got, want, node)
			}
			if os.Geteuid() == 0 {
				for _, w := range res.Warnings {
					if strings.Contains(w, "device nodes") {
						t.Errorf("real mknod nodes must not warn: %s", w)
					}
				}
			}
		})
	}
}

func checkDevice(t *testing.T, got model.Device, want fixture.Device, node model.Node) {
	t.Helper()
	if got.PhysFn != want.PhysFn || got.Bond != want.Bond || got.PCIAddress != want.PCI {
		t.Errorf("%s: physfn %q bond %v pci %q; want %q %v %q", want.Name, got.PhysFn, got.Bond, got.PCIAddress, want.PhysFn, want.Bond, want.PCI)
	}
	if got.Verbs == nil || got.Verbs.Major != 231 || got.Verbs.Minor < 192 {
		t.Errorf("%s: uverbs %+v", want.Name, got.Verbs)
	}
	if len(got.Ports) != len(want.Ports) {
		t.Fatalf("%s: %d ports, want %d", want.Name, len(got.Ports), len(want.Ports))
	}
	for i, wp := range want.Ports {
		gp := got.Ports[i]
		if gp.Number != wp.Number || string(gp.State) != wp.State || gp.LinkLayer != modelLinkLayer(wp.LinkLayer) || gp.NetDev != wp.NetDev {
			t.Errorf("%s port %d: got %s %s %s %q; want %s %s %s %q", want.Name, wp.Number,
				gp.State, gp.PhysState, gp.LinkLayer, gp.NetDev, wp.State, wp.PhysState, wp.LinkLayer, wp.NetDev)
		}
		if wp.Umad == nil { // a port without MAD (EFA): no umad, no issm, no netdev
			if gp.Umad != nil || gp.Issm != nil || gp.NetDev != "" {
				t.Errorf("%s port %d: umad %+v issm %+v netdev %q, want none", want.Name, wp.Number, gp.Umad, gp.Issm, gp.NetDev)
			}
		} else if gp.Umad == nil || gp.Issm == nil || gp.Issm.Minor != gp.Umad.Minor+64 {
			t.Errorf("%s port %d: umad %+v issm %+v", want.Name, wp.Number, gp.Umad, gp.Issm)
		}
		if gp.GIDTableLen != wp.GIDTableLen || len(gp.GIDs) == 0 {
			t.Errorf("%s port %d: table %d with %d GIDs, want table %d", want.Name, wp.Number, gp.GIDTableLen, len(gp.GIDs), wp.GIDTableLen)
		}
		if wp.NetDev == "" && wp.Umad == nil {
			continue
		}
		if nd, ok := node.NetDevByName(wp.NetDev); !ok || len(nd.Addrs) == 0 && wp.State == "ACTIVE" {
			t.Errorf("%s port %d: netdev %q not discovered with addresses (%+v)", want.Name, wp.Number, wp.NetDev, nd)
		}
	}
}

// modelLinkLayer is the model's name for a link layer as sysfs prints it.
func modelLinkLayer(sysfs string) model.LinkLayer {
	if sysfs == "Unknown" {
		return model.LinkLayerUnspecified
	}
	return model.LinkLayer(sysfs)
}

// TestAWSP5 is an AWS p5 node as the kernel shows it: 32 EFA devices with
// link layer "Unknown", which discovery failed on whole. Each is an HCA of
// transport efa, with its uverbs device and no netdev; NCCL gets no
// NCCL_IB_* (its IB transport skips such ports), only the ENA's eth0.
func TestAWSP5(t *testing.T) {
	_, res := discoverFixture(t, "aws-p5")
	node := res.Node
	if len(node.Devices) != 32 || node.Devices[0].Name != "rdmap79s0" || node.Devices[31].Name != "rdmap201s0" {
		t.Fatalf("devices %v, want 32 from rdmap79s0 to rdmap201s0", node.DeviceNames())
	}
	numa := map[int]int{}
	for _, d := range node.Devices {
		numa[d.NUMANode]++
		if d.Transport() != model.TransportEFA || d.Driver != "efa" || d.PCIVendor != "0x1d0f" || d.PCIDevice != "0xefa1" {
			t.Errorf("%s: transport %s driver %s PCI %s:%s", d.Name, d.Transport(), d.Driver, d.PCIVendor, d.PCIDevice)
		}
		if d.Verbs == nil || len(d.Ports) != 1 || d.Ports[0].LinkLayer != model.LinkLayerUnspecified || !d.Ports[0].Active() || d.Ports[0].RateGbps != 100 {
			t.Errorf("%s: verbs %+v ports %+v", d.Name, d.Verbs, d.Ports)
		}
	}
	if numa[0] != 16 || numa[1] != 16 {
		t.Errorf("NUMA nodes %v, want 16 on each of 0 and 1", numa)
	}
	if node.DefaultRouteNetDev != "eth0" {
		t.Errorf("default route on %q, want the ENA's eth0", node.DefaultRouteNetDev)
	}
	for _, w := range res.Warnings {
		if !strings.Contains(w, "device nodes") { // placeholders without root
			t.Errorf("unexpected warning: %s", w)
		}
	}
	s := computeDefault(node)
	for _, v := range s.Vars {
		if strings.HasPrefix(v.Name, "NCCL_IB_") {
			t.Errorf("EFA node sets %s=%s", v.Name, v.Value)
		}
	}
	wantVar(t, s, "NCCL_SOCKET_IFNAME", "eth0")
}

func computeDefault(node model.Node) nccl.Settings {
	return nccl.Compute(node, config.Default().NCCL, nccl.Scope{})
}

func wantVar(t *testing.T, s nccl.Settings, name, want string) {
	t.Helper()
	got, ok := s.Get(name)
	if want == "" && ok {
		t.Errorf("%s = %q, want it unset", name, got)
	} else if want != "" && got != want {
		t.Errorf("%s = %q, want %q (all: %v, warnings: %v)", name, got, want, s.Vars, s.Warnings)
	}
}

func TestSeed002GivesTheSeedsSettings(t *testing.T) {
	_, res := discoverFixture(t, "seed002")
	s := computeDefault(res.Node)
	wantVar(t, s, "NCCL_IB_HCA", "mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1,mlx5_8:1")
	wantVar(t, s, "NCCL_IB_GID_INDEX", "3")
	wantVar(t, s, "NCCL_SOCKET_IFNAME", "eth0")
	g := res.Node.Devices[1].Ports[0].GIDs[3]
	if v4, _ := g.IPv4(); v4.String() != "25.11.128.2" || g.Type != model.GIDTypeRoCEv2 || g.NetDev != "eth1" {
		t.Errorf("mlx5_1 GID 3 = %+v, want 25.11.128.2 RoCE v2 on eth1 as show_gids shows", g)
	}
	if res.Node.RDMACM == nil || res.Node.NetNSMode != "shared" {
		t.Errorf("rdma_cm %+v netns mode %q", res.Node.RDMACM, res.Node.NetNSMode)
	}
}

func TestSeed004HasTenDevices(t *testing.T) {
	_, res := discoverFixture(t, "seed004")
	if len(res.Node.Devices) != 10 || res.Node.Devices[9].Ports[0].NetDev != "eth9" {
		t.Fatalf("devices %v", res.Node.DeviceNames())
	}
}

func TestGIDNotAtIndex3(t *testing.T) {
	_, res := discoverFixture(t, "gid-not-3")
	s := computeDefault(res.Node)
	wantVar(t, s, "NCCL_IB_GID_INDEX", "5")
	dual, _ := res.Node.DeviceByName("mlx4_0")
	if len(dual.Ports) != 2 || dual.Ports[1].NetDev != "eth3" {
		t.Fatalf("dual-port device: %+v", dual.Ports)
	}
	if hca, _ := s.Get("NCCL_IB_HCA"); !strings.Contains(hca, "mlx4_0:1") || !strings.Contains(hca, "mlx4_0:2") {
		t.Errorf("both ports of the dual-port device belong in NCCL_IB_HCA: %q", hca)
	}
}

func TestInfiniBandIPoIB(t *testing.T) {
	_, res := discoverFixture(t, "ib-ipoib")
	for _, d := range res.Node.Devices {
		for _, p := range d.Ports {
			if p.LinkLayer != model.LinkLayerInfiniBand || !strings.HasPrefix(p.NetDev, "ib") {
				t.Errorf("%s:%d: link layer %s netdev %q; want InfiniBand and an IPoIB netdev matched by port GUID", d.Name, p.Number, p.LinkLayer, p.NetDev)
			}
		}
	}
	s := computeDefault(res.Node)
	wantVar(t, s, "NCCL_IB_GID_INDEX", "")
	if _, ok := s.Get("NCCL_IB_HCA"); !ok {
		t.Errorf("IB ports belong in NCCL_IB_HCA: %v", s.Vars)
	}
}

func TestMixedStateSkipsDownPorts(t *testing.T) {
	_, res := discoverFixture(t, "mixed-state")
	hca, _ := computeDefault(res.Node).Get("NCCL_IB_HCA")
	if strings.Contains(hca, "mlx5_2") || strings.Contains(hca, "mlx5_3") || !strings.Contains(hca, "mlx5_4:1") {
		t.Errorf("NCCL_IB_HCA = %q: DOWN ports must be left out", hca)
	}
	eth2, _ := res.Node.NetDevByName("eth2")
	if eth2.Carrier {
		t.Errorf("eth2 has no carrier in the fixture: %+v", eth2)
	}
}

func TestBondAndSRIOV(t *testing.T) {
	_, bond := discoverFixture(t, "bond")
	d, ok := bond.Node.DeviceByName("mlx5_bond_0")
	if !ok || !d.Bond || d.Ports[0].NetDev != "bond0" {
		t.Fatalf("bond device: %+v", d)
	}
	if hca, _ := computeDefault(bond.Node).Get("NCCL_IB_HCA"); hca != "mlx5_bond_0:1" {
		t.Errorf("NCCL_IB_HCA = %q", hca)
	}

	_, sriov := discoverFixture(t, "sriov")
	var vfs []string
	for _, d := range sriov.Node.Devices {
		if d.PhysFn != "" {
			vfs = append(vfs, d.Name)
		}
	}
	if len(vfs) != 16 || !slices.Contains(vfs, "mlx5_17") {
		t.Fatalf("VFs = %v", vfs)
	}
	pf, _ := sriov.Node.DeviceByName("mlx5_0")
	other, _ := sriov.Node.DeviceByName("mlx5_1")
	if pf.NumVFs != 16 || other.NumVFs != 0 || len(sriov.Node.VFsOf(pf)) != 16 || len(sriov.Node.VFsOf(other)) != 0 {
		t.Errorf("sriov_numvfs: mlx5_0 %d (%d VFs found), mlx5_1 %d; want 16 and 0", pf.NumVFs, len(sriov.Node.VFsOf(pf)), other.NumVFs)
	}
	vf, _ := sriov.Node.DeviceByName("mlx5_17")
	if got, ok := sriov.Node.PFOf(vf); !ok || got.Name != "mlx5_0" || vf.NumVFs != 0 {
		t.Errorf("PF of mlx5_17 = %q (%v), its NumVFs %d", got.Name, ok, vf.NumVFs)
	}
	hca, _ := computeDefault(sriov.Node).Get("NCCL_IB_HCA")
	if !strings.HasPrefix(hca, "=") {
		t.Errorf("mlx5_1 is a prefix of mlx5_10..17: NCCL_IB_HCA must use the exact form, got %q", hca)
	}
}

func TestNoRDMANode(t *testing.T) {
	_, res := discoverFixture(t, "no-rdma")
	if len(res.Node.Devices) != 0 || res.Node.DefaultRouteNetDev == "" {
		t.Fatalf("%+v", res.Node)
	}
}

// Options.GIDTables limits the GID tables read (a hook reads only its
// container's); everything else about every device is still there.
func TestGIDTablesOnlyForChosenDevices(t *testing.T) {
	_, full := discoverFixture(t, "seed002")
	tr := fixture.BuildBundledTrees(t, "seed002", false)
	var asked []string
	res, err := discover.Discover(discover.Options{
		Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev}, SkipNet: true,
		GIDTables: func(d model.Device) bool {
			if d.Verbs == nil {
				t.Errorf("%s asked about before its char devices were read", d.Name)
			}
			asked = append(asked, d.Name)
			return d.Name == "mlx5_3"
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(asked, full.Node.DeviceNames()) {
		t.Errorf("asked about %v, want every device %v", asked, full.Node.DeviceNames())
	}
	for i, d := range res.Node.Devices {
		want := full.Node.Devices[i]
		if d.Name != want.Name || d.Verbs == nil || len(d.Ports) != len(want.Ports) || d.Ports[0].State != want.Ports[0].State {
			t.Errorf("%s: device or ports differ from a full discovery", d.Name)
		}
		p := d.Ports[0]
		if d.Name == "mlx5_3" {
			if !slices.Equal(p.GIDs, want.Ports[0].GIDs) || p.NetDev != want.Ports[0].NetDev || p.NetDev == "" {
				t.Errorf("mlx5_3: GIDs %v netdev %q, want %v %q", p.GIDs, p.NetDev, want.Ports[0].GIDs, want.Ports[0].NetDev)
			}
			continue
		}
		if p.GIDs != nil || p.GIDTableLen != 0 || p.NetDev != "" {
			t.Errorf("%s: GID table read although not chosen", d.Name)
		}
	}
}

// TestPCIeRootsAndIDs: each function is found behind its own host bridge,
// as the kernel lays out a multi-root server, with its PCI IDs.
func TestPCIeRootsAndIDs(t *testing.T) {
	_, res := discoverFixture(t, "two-socket")
	want := map[string]string{
		"mlx5_0": "pci0000:00", "mlx5_1": "pci0000:15", "mlx5_2": "pci0000:c0",
		"mlx5_3": "pci0000:c0", "mlx5_4": "pci0000:e0",
	}
	for _, d := range res.Node.Devices {
		if d.PCIeRoot != want[d.Name] {
			t.Errorf("%s: PCIe root %q, want %q", d.Name, d.PCIeRoot, want[d.Name])
		}
		if d.PCIVendor != "0x15b3" || d.PCIDevice == "" {
			t.Errorf("%s: PCI IDs %q:%q, want vendor 0x15b3 and a device ID", d.Name, d.PCIVendor, d.PCIDevice)
		}
	}
	_, seed := discoverFixture(t, "seed002")
	if d, _ := seed.Node.DeviceByName("mlx5_1"); d.PCIDevice != "0x101d" || d.PCIeRoot != "pci0000:00" {
		t.Errorf("seed002 mlx5_1: device %q root %q, want 0x101d on pci0000:00", d.PCIDevice, d.PCIeRoot)
	}
}

// Options.NCCLOnly with nccl.GIDScanStop (what the nccl-conf hook reads)
// gives every fixture the NCCL settings a full discovery gives, for a
// namespace holding all the node's addresses, one RoCE address, or only
// loopback, under each address family.
func TestNCCLOnlyGivesTheSameSettings(t *testing.T) {
	for _, name := range fixture.Bundled() {
		t.Run(name, func(t *testing.T) {
			_, full := discoverFixture(t, name)
			tr := fixture.BuildBundledTrees(t, name, false)
			all := []netip.Addr{}
			for _, nd := range full.Node.NetDevs {
				for _, p := range nd.Addrs {
					all = append(all, p.Addr())
				}
			}
			heldSets := map[string][]netip.Addr{"all": all, "loopback": {netip.MustParseAddr("127.0.0.1")}}
			if len(all) > 0 {
				heldSets["one"] = all[len(all)-1:]
			}
			for _, family := range []config.AddrFamily{config.AddrFamilyIPv4, config.AddrFamilyIPv6} {
				cfg := config.Default().NCCL
				cfg.AddrFamily = family
				for setName, held := range heldSets {
					lean, err := discover.Discover(discover.Options{
						Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev}, SkipNet: true, NCCLOnly: true,
						GIDScanStop: nccl.GIDScanStop(cfg, held),
					})
					if err != nil {
						t.Fatal(err)
					}
					// The hook gives the node its namespace's netdevs, which
					// hold the addresses NCCL picks from.
					lean.Node.DefaultRouteNetDev, lean.Node.NetDevs = full.Node.DefaultRouteNetDev, full.Node.NetDevs
					scope := nccl.Scope{Devices: full.Node.DeviceNames(), HeldAddrs: held}
					want, got := nccl.Compute(full.Node, cfg, scope), nccl.Compute(lean.Node, cfg, scope)
					if !slices.Equal(got.Vars, want.Vars) || !slices.Equal(got.Warnings, want.Warnings) {
						t.Errorf("%s, held %s: NCCLOnly gives\n%v %q\nfull discovery\n%v %q", family, setName, got.Vars, got.Warnings, want.Vars, want.Warnings)
					}
				}
			}
		})
	}
}

// Options.NCCLOnly reads each device's driver, and an EFA's PCI ids, as a
// full discovery does: the hook decides by them whether the container's
// devices are EFAs of a generation with RDMA read (libfabric, GPUDirect).
// Other devices' PCI ids stay unread.
func TestNCCLOnlyReadsWhatTellsEFA(t *testing.T) {
	for _, name := range []string{"aws-p5", "seed002"} {
		t.Run(name, func(t *testing.T) {
			_, full := discoverFixture(t, name)
			tr := fixture.BuildBundledTrees(t, name, false)
			lean, err := discover.Discover(discover.Options{Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev}, SkipNet: true, NCCLOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range lean.Node.Devices {
				f := full.Node.Devices[i]
				if d.Driver != f.Driver || d.IsEFA() != f.IsEFA() || d.EFARDMARead() != f.EFARDMARead() {
					t.Errorf("%s: NCCLOnly driver %q EFA %v RDMA read %v, full discovery %q %v %v", d.Name, d.Driver, d.IsEFA(), d.EFARDMARead(), f.Driver, f.IsEFA(), f.EFARDMARead())
				}
				if !f.IsEFA() && d.PCIVendor+d.PCIDevice != "" {
					t.Errorf("%s: NCCLOnly read the PCI ids %s:%s of a device that is no EFA", d.Name, d.PCIVendor, d.PCIDevice)
				}
			}
			if name == "aws-p5" && !lean.Node.Devices[0].EFARDMARead() {
				t.Errorf("%+v: want an EFA with RDMA read", lean.Node.Devices[0])
			}
		})
	}
}

// Options.NCCLOnly reads the node type of a device with an Ethernet port,
// by which NCCL's RoCE rule is left off an iWARP device's (erdma in iWARP
// mode: "4: RNIC"), and not of an InfiniBand device.
func TestNCCLOnlyReadsTheNodeTypeOfEthernetDevices(t *testing.T) {
	tr := fixture.BuildBundledTrees(t, "seed002", false)
	nodeType := filepath.Join(tr.Sys, "class/infiniband/mlx5_2/node_type")
	if err := os.Chmod(nodeType, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(nodeType, []byte("4: RNIC\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := discover.Discover(discover.Options{Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev}, SkipNet: true, NCCLOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range res.Node.Devices {
		if want := d.Name == "mlx5_2"; d.IWARP() != want || d.NodeType == "" {
			t.Errorf("%s: node type %q, iWARP %v; want read, iWARP %v", d.Name, d.NodeType, d.IWARP(), want)
		}
	}
	ib := fixture.BuildBundledTrees(t, "ib-ipoib", false)
	res, err = discover.Discover(discover.Options{Roots: model.Roots{Sysfs: ib.Sys, Dev: ib.Dev}, SkipNet: true, NCCLOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range res.Node.Devices {
		if d.NodeType != "" {
			t.Errorf("%s (InfiniBand): node type %q read", d.Name, d.NodeType)
		}
	}
}

// TestInfiniBandSRIOV: an InfiniBand PF's VFs are read like RoCE ones (the
// PF's VF count, each VF's PF), and the PF's port going down, read back from
// sysfs, makes its VFs unhealthy by the one health rule, naming the PF.
func TestInfiniBandSRIOV(t *testing.T) {
	root := os.Geteuid() == 0
	tr := fixture.BuildBundledTrees(t, "ib-sriov", root)
	scan := func() model.Node {
		t.Helper()
		res, err := discover.Discover(discover.Options{Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Node
	}
	node := scan()
	pf, _ := node.DeviceByName("mlx5_0")
	if pf.NumVFs != 2 || len(node.VFsOf(pf)) != 2 || pf.Ports[0].LinkLayer != model.LinkLayerInfiniBand {
		t.Fatalf("PF mlx5_0: %d VFs enabled, %d found, link layer %s", pf.NumVFs, len(node.VFsOf(pf)), pf.Ports[0].LinkLayer)
	}
	for _, name := range []string{"mlx5_2", "mlx5_3"} {
		vf, _ := node.DeviceByName(name)
		if got, ok := node.PFOf(vf); !ok || got.Name != "mlx5_0" || vf.Ports[0].LinkLayer != model.LinkLayerInfiniBand {
			t.Errorf("%s: PF %q (%v), link layer %s", name, got.Name, ok, vf.Ports[0].LinkLayer)
		}
		if !root {
			continue
		}
		if p := health.Check(node, vf, vf.Ports); !p.Healthy() {
			t.Errorf("%s with its PF up: %+v", name, p)
		}
	}

	if !root {
		t.Skip("health: the uverbs nodes are placeholder files without root (mknod)")
	}
	state := filepath.Join(tr.Sys, "class/infiniband/mlx5_0/ports/1/state")
	if err := os.Chmod(state, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, []byte("1: DOWN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	node = scan()
	for name, want := range map[string]string{
		"mlx5_1": "",
		"mlx5_2": "its PF mlx5_0 (0000:4b:00.0) has no ACTIVE port",
		"mlx5_3": "its PF mlx5_0 (0000:4b:00.0) has no ACTIVE port",
	} {
		d, _ := node.DeviceByName(name)
		if got := health.Check(node, d, d.Ports).Reason; got != want {
			t.Errorf("%s with mlx5_0 down: %q, want %q", name, got, want)
		}
	}
}
