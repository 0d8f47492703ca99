package nccl

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// entry describes one GID slot: address and type.
type entry struct {
	gid string
	typ model.GIDType
}

func roce(state model.PortState, netdev string, tableLen int, entries map[int]entry) model.Port {
	p := model.Port{Number: 1, State: state, LinkLayer: model.LinkLayerEthernet, NetDev: netdev, GIDTableLen: tableLen}
	for i := 0; i < tableLen; i++ {
		e, ok := entries[i]
		if !ok {
			continue
		}
		p.GIDs = append(p.GIDs, model.GID{Index: i, GID: netip.MustParseAddr(e.gid), Type: e.typ, NetDev: netdev})
	}
	return p
}

// mlx5Table is the typical four-entry RoCE table: fe80 v1, fe80 v2,
// IPv4-mapped v1, IPv4-mapped v2.
func mlx5Table(ipv4 string) map[int]entry {
	return map[int]entry{
		0: {"fe80::eaeb:d3ff:fecc:c920", model.GIDTypeRoCEv1},
		1: {"fe80::eaeb:d3ff:fecc:c920", model.GIDTypeRoCEv2},
		2: {"::ffff:" + ipv4, model.GIDTypeRoCEv1},
		3: {"::ffff:" + ipv4, model.GIDTypeRoCEv2},
	}
}

func rule(family Family, rng string, ver int) GIDRule {
	r := GIDRule{Family: family, RoCEVersion: ver}
	if rng != "" {
		r.Range = netip.MustParsePrefix(rng)
	}
	return r
}

func TestSelectGIDIndexFollowsNCCL(t *testing.T) {
	withIPv6 := mlx5Table("25.11.128.2")
	withIPv6[4] = entry{"2001:db8::2", model.GIDTypeRoCEv1}
	withIPv6[5] = entry{"2001:db8::2", model.GIDTypeRoCEv2}

	ipv4At5 := map[int]entry{
		0: {"fe80::1", model.GIDTypeRoCEv1}, 1: {"fe80::1", model.GIDTypeRoCEv2},
		2: {"2001:db8::7", model.GIDTypeRoCEv1}, 3: {"2001:db8::7", model.GIDTypeRoCEv2},
		4: {"::ffff:10.1.0.7", model.GIDTypeRoCEv1}, 5: {"::ffff:10.1.0.7", model.GIDTypeRoCEv2},
	}
	twoSubnets := mlx5Table("10.1.0.7")
	twoSubnets[6] = entry{"::ffff:192.168.5.7", model.GIDTypeRoCEv1}
	twoSubnets[7] = entry{"::ffff:192.168.5.7", model.GIDTypeRoCEv2}
	v1Only := map[int]entry{0: {"fe80::1", model.GIDTypeRoCEv1}, 1: {"::ffff:10.1.0.7", model.GIDTypeRoCEv1}}
	gapped := map[int]entry{0: {"fe80::1", model.GIDTypeRoCEv1}, 1: {"fe80::1", model.GIDTypeRoCEv2}, 9: {"::ffff:10.1.0.7", model.GIDTypeRoCEv2}}
	noAddress := map[int]entry{0: {"fe80::1", model.GIDTypeRoCEv1}, 1: {"fe80::1", model.GIDTypeRoCEv2}}

	cases := []struct {
		name   string
		table  map[int]entry
		len    int
		rule   GIDRule
		want   int
		wantOK bool
	}{
		{"typical mlx5 table gives 3", mlx5Table("25.11.128.2"), 4, rule(FamilyIPv4, "", 2), 3, true},
		{"RoCE v1 wanted gives 2", mlx5Table("25.11.128.2"), 4, rule(FamilyIPv4, "", 1), 2, true},
		{"IPv6 family picks the global v2 entry", withIPv6, 6, rule(FamilyIPv6, "", 2), 5, true},
		{"IPv4 v2 at index 5", ipv4At5, 6, rule(FamilyIPv4, "", 2), 5, true},
		{"address range picks the matching subnet", twoSubnets, 8, rule(FamilyIPv4, "192.168.0.0/16", 2), 7, true},
		{"address range that matches nothing", twoSubnets, 8, rule(FamilyIPv4, "172.16.0.0/12", 2), 0, false},
		{"v1-only table still picks the IPv4 entry by family", v1Only, 2, rule(FamilyIPv4, "", 2), 1, true},
		{"empty slots are walked", gapped, 16, rule(FamilyIPv4, "", 2), 9, true},
		{"no routable address", noAddress, 2, rule(FamilyIPv4, "", 2), 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := SelectGIDIndex(roce("ACTIVE", "eth1", tc.len, tc.table), tc.rule)
			if got != tc.want || ok != tc.wantOK {
				t.Fatalf("SelectGIDIndex = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestSelectGIDIndexHeldAddresses(t *testing.T) {
	table := mlx5Table("25.11.128.2")
	// A macvlan sub-interface's address shows up as more GID entries.
	table[4] = entry{"::ffff:25.11.128.40", model.GIDTypeRoCEv1}
	table[5] = entry{"::ffff:25.11.128.40", model.GIDTypeRoCEv2}
	r := rule(FamilyIPv4, "", 2)
	r.Held = func(a netip.Addr) bool { return a == netip.MustParseAddr("25.11.128.40") }
	got, ok := SelectGIDIndex(roce("ACTIVE", "eth1", 6, table), r)
	if got != 5 || !ok {
		t.Fatalf("got %d, %v; want the container address's v2 entry 5", got, ok)
	}
}

// seedNode is seed 002's node: mlx5_0 on eth0 carries the default route.
func seedNode() model.Node {
	var n model.Node
	n.DefaultRouteNetDev = "eth0"
	for i := 0; i <= 8; i++ {
		nd := fmt.Sprintf("eth%d", i)
		n.Devices = append(n.Devices, model.Device{
			Name:  fmt.Sprintf("mlx5_%d", i),
			Ports: []model.Port{roce("ACTIVE", nd, 4, mlx5Table(fmt.Sprintf("25.11.128.%d", 2+16*i)))},
		})
	}
	return n
}

func TestComputeSeedNode(t *testing.T) {
	s := Compute(seedNode(), config.Default().NCCL, Scope{})
	want := []Var{
		{"NCCL_IB_DISABLE", "0"},
		{"NCCL_IB_HCA", "mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1,mlx5_8:1"},
		{"NCCL_IB_GID_INDEX", "3"},
		{"NCCL_SOCKET_IFNAME", "eth0"},
	}
	if fmt.Sprint(s.Vars) != fmt.Sprint(want) {
		t.Fatalf("vars = %v\nwant %v", s.Vars, want)
	}
	if len(s.Warnings) != 0 {
		t.Fatalf("unexpected warnings %v", s.Warnings)
	}
}

func TestComputeSelection(t *testing.T) {
	node := seedNode()
	node.Devices[4].Ports[0].State = "DOWN"
	cfg := config.Default().NCCL
	cfg.ExcludeHCAs = []string{"mlx5_2", "mlx5_3:1"}
	cfg.Tunables = map[string]string{"NCCL_IB_TIMEOUT": "22", "NCCL_IB_QPS_PER_CONNECTION": "8"}
	s := Compute(node, cfg, Scope{})
	if hca, _ := s.Get("NCCL_IB_HCA"); hca != "mlx5_1:1,mlx5_5:1,mlx5_6:1,mlx5_7:1,mlx5_8:1" {
		t.Fatalf("NCCL_IB_HCA = %q", hca)
	}
	if v, _ := s.Get("NCCL_IB_TIMEOUT"); v != "22" {
		t.Fatalf("tunable missing: %v", s.Vars)
	}
	if s.Vars[len(s.Vars)-1].Name != "NCCL_IB_TIMEOUT" || s.Vars[len(s.Vars)-2].Name != "NCCL_IB_QPS_PER_CONNECTION" {
		t.Fatalf("tunables must follow computed keys in sorted order: %v", s.Vars)
	}

	cfg = config.Default().NCCL
	cfg.IncludeHCAs = []string{"mlx5_0", "mlx5_4"}
	s = Compute(node, cfg, Scope{})
	if hca, _ := s.Get("NCCL_IB_HCA"); hca != "mlx5_0:1" {
		t.Fatalf("include list: NCCL_IB_HCA = %q", hca)
	}
	if len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "mlx5_4:1 is DOWN") {
		t.Fatalf("want a warning for the included DOWN port, got %v", s.Warnings)
	}

	s = Compute(node, config.Default().NCCL, Scope{Devices: []string{"mlx5_1"}})
	if hca, _ := s.Get("NCCL_IB_HCA"); hca != "mlx5_1:1" {
		t.Fatalf("scoped NCCL_IB_HCA = %q", hca)
	}
}

func TestComputeDisagreeingHCAs(t *testing.T) {
	node := seedNode()
	odd := mlx5Table("25.11.128.66")
	odd[2], odd[3] = entry{"2001:db8::1", model.GIDTypeRoCEv1}, entry{"2001:db8::1", model.GIDTypeRoCEv2}
	odd[4], odd[5] = entry{"::ffff:25.11.128.66", model.GIDTypeRoCEv1}, entry{"::ffff:25.11.128.66", model.GIDTypeRoCEv2}
	node.Devices[3].Ports[0] = roce("ACTIVE", "eth3", 6, odd)
	s := Compute(node, config.Default().NCCL, Scope{})
	if v, _ := s.Get("NCCL_IB_GID_INDEX"); v != "3" {
		t.Fatalf("majority index expected, got %q", v)
	}
	if len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "index 5 on mlx5_3:1") || !strings.Contains(s.Warnings[0], "using 3") {
		t.Fatalf("want a warning naming mlx5_3:1 and the value used, got %v", s.Warnings)
	}
}

func TestComputeInfiniBandOmitsGIDIndex(t *testing.T) {
	node := model.Node{DefaultRouteNetDev: "eno1", Devices: []model.Device{{
		Name: "mlx5_0",
		Ports: []model.Port{{Number: 1, State: "ACTIVE", LinkLayer: model.LinkLayerInfiniBand, NetDev: "ib0", GIDTableLen: 128,
			GIDs: []model.GID{{Index: 0, GID: netip.MustParseAddr("fe80::248a:703:49:d4f0"), Type: model.GIDTypeRoCEv1}}}},
	}}}
	s := Compute(node, config.Default().NCCL, Scope{})
	if _, ok := s.Get("NCCL_IB_GID_INDEX"); ok {
		t.Fatalf("InfiniBand port must not set NCCL_IB_GID_INDEX: %v", s.Vars)
	}
	if hca, _ := s.Get("NCCL_IB_HCA"); hca != "mlx5_0:1" {
		t.Fatalf("NCCL_IB_HCA = %q", hca)
	}
}

func TestHCAListExactWhenNamesArePrefixes(t *testing.T) {
	var node model.Node
	for i := 0; i < 12; i++ {
		node.Devices = append(node.Devices, model.Device{Name: fmt.Sprintf("mlx5_%d", i),
			Ports: []model.Port{roce("ACTIVE", fmt.Sprintf("eth%d", i), 4, mlx5Table("10.0.0.1"))}})
	}
	s := Compute(node, config.Default().NCCL, Scope{Devices: []string{"mlx5_1"}})
	if hca, _ := s.Get("NCCL_IB_HCA"); hca != "=mlx5_1:1" {
		t.Fatalf("mlx5_1 is a prefix of mlx5_10: want the exact form, got %q", hca)
	}
}

func TestFormats(t *testing.T) {
	vars := []Var{{"NCCL_IB_HCA", "mlx5_1:1,mlx5_2:1"}, {"NCCL_IB_GID_INDEX", "3"}, {"NCCL_X", "a b"}}
	cases := map[string]string{
		"shell":  "export NCCL_IB_HCA=mlx5_1:1,mlx5_2:1\nexport NCCL_IB_GID_INDEX=3\nexport NCCL_X='a b'\n",
		"mpirun": "-x NCCL_IB_HCA=mlx5_1:1,mlx5_2:1 -x NCCL_IB_GID_INDEX=3 -x 'NCCL_X=a b'\n",
		"conf":   "NCCL_IB_HCA=mlx5_1:1,mlx5_2:1\nNCCL_IB_GID_INDEX=3\nNCCL_X=a b\n",
		"json":   "{\n  \"NCCL_IB_GID_INDEX\": \"3\",\n  \"NCCL_IB_HCA\": \"mlx5_1:1,mlx5_2:1\",\n  \"NCCL_X\": \"a b\"\n}\n",
	}
	for format, want := range cases {
		got, err := Format(vars, format)
		if err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", format, got, err, want)
		}
	}
	if _, err := Format(vars, "xml"); err == nil || !strings.Contains(err.Error(), "xml") {
		t.Errorf("unknown format must fail naming it, got %v", err)
	}
}

func TestMergeConf(t *testing.T) {
	image := []byte("NCCL_DEBUG=INFO\n# site comment\nNCCL_IB_TIMEOUT=18\n")
	vars := []Var{{"NCCL_IB_HCA", "mlx5_1:1"}, {"NCCL_IB_TIMEOUT", "22"}, {"NCCL_IB_GID_INDEX", "3"}, {"NCCL_BAD", "x\nNCCL_EVIL=1"}}
	userEnv := func(name string) bool { return name == "NCCL_IB_GID_INDEX" }
	got := MergeConf(image, vars, userEnv)
	want := "NCCL_DEBUG=INFO\n# site comment\nNCCL_IB_TIMEOUT=18\n" + confBegin + "\nNCCL_IB_HCA=mlx5_1:1\n" + confEnd + "\n"
	if string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	// A second run replaces its own block instead of treating it as the image's.
	again := MergeConf(got, []Var{{"NCCL_IB_HCA", "mlx5_2:1"}}, nil)
	if strings.Count(string(again), "NCCL_IB_HCA=") != 1 || !strings.Contains(string(again), "NCCL_IB_HCA=mlx5_2:1") {
		t.Fatalf("rerun did not replace the block:\n%s", again)
	}
	if keys := ConfKeys(again); !keys["NCCL_DEBUG"] || keys["# site comment"] {
		t.Fatalf("ConfKeys = %v", keys)
	}
}

func TestComputeOmitsGIDIndexWithoutUsableGID(t *testing.T) {
	node := seedNode()
	// A container namespace that holds none of the ports' addresses.
	s := Compute(node, config.Default().NCCL, Scope{HeldAddrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}})
	if v, ok := s.Get("NCCL_IB_GID_INDEX"); ok {
		t.Fatalf("NCCL_IB_GID_INDEX = %q, want it unset", v)
	}
	if w := strings.Join(s.Warnings, "\n"); !strings.Contains(w, "mlx5_1:1 has no usable AF_INET RoCE v2 GID") || !strings.Contains(w, "NCCL_IB_GID_INDEX not set") {
		t.Fatalf("warnings = %v", s.Warnings)
	}
	// All RoCE ports unusable: the list stays whole (unset would mean
	// every HCA), the warnings say why.
	if hca, _ := s.Get("NCCL_IB_HCA"); !strings.HasPrefix(hca, "mlx5_1:1,mlx5_2:1") {
		t.Fatalf("NCCL_IB_HCA = %q, want every selected port", hca)
	}
	// One usable port among unusable ones decides, and the others, which
	// the kernel would refuse from this namespace, are left out and named.
	held := []netip.Addr{netip.MustParseAddr("25.11.128.18")}
	s = Compute(node, config.Default().NCCL, Scope{HeldAddrs: held})
	if v, _ := s.Get("NCCL_IB_GID_INDEX"); v != "3" {
		t.Fatalf("NCCL_IB_GID_INDEX = %q, want 3 from mlx5_1", v)
	}
	if hca, _ := s.Get("NCCL_IB_HCA"); hca != "mlx5_1:1" {
		t.Fatalf("NCCL_IB_HCA = %q, want only mlx5_1:1", hca)
	}
	if w := strings.Join(s.Warnings, "\n"); !strings.Contains(w, "left out of NCCL_IB_HCA: mlx5_2:1,mlx5_3:1") || strings.Contains(w, "mlx5_2:1 has no usable") {
		t.Fatalf("warnings = %v", s.Warnings)
	}
	// InfiniBand ports need no GID of the namespace: they stay.
	node.Devices[8].Ports[0].LinkLayer = model.LinkLayerInfiniBand
	s = Compute(node, config.Default().NCCL, Scope{HeldAddrs: held})
	if hca, _ := s.Get("NCCL_IB_HCA"); hca != "mlx5_1:1,mlx5_8:1" {
		t.Fatalf("NCCL_IB_HCA = %q, want mlx5_1:1 and the InfiniBand mlx5_8:1", hca)
	}
}
