package watch

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
)

func dev(name string, uverbsMinor uint32, gids ...model.GID) model.Device {
	return model.Device{
		Name: name, PCIAddress: "0000:17:00.0",
		Verbs: &model.CharDevice{Path: "/dev/infiniband/uverbs" + name[len(name)-1:], Major: 231, Minor: uverbsMinor},
		Ports: []model.Port{{Number: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: model.LinkLayerEthernet, NetDev: "eth1", GIDs: gids}},
	}
}

func gid(i int, addr string, t model.GIDType) model.GID {
	return model.GID{Index: i, GID: netip.MustParseAddr(addr), Type: t, NetDev: "eth1"}
}

func gidState(index string) State {
	return State{
		Path: "/var/run/cdi/rdma.yaml",
		Node: model.Node{Devices: []model.Device{dev("mlx5_1", 193)}},
		NCCL: nccl.Settings{Vars: []nccl.Var{{Name: "NCCL_IB_HCA", Value: "mlx5_1:1"}, {Name: "NCCL_IB_GID_INDEX", Value: index}}},
	}
}

func stack(files ...string) model.UserStack {
	s := model.UserStack{Flavor: "rdma-core"}
	for _, f := range files {
		path, target, _ := strings.Cut(f, " -> ")
		s.Files = append(s.Files, model.HostFile{Path: path, HostPath: path, Symlink: target})
	}
	return s
}

func TestDescribe(t *testing.T) {
	base := State{
		Path: "/var/run/cdi/rdma.yaml",
		Node: model.Node{
			Devices:            []model.Device{dev("mlx5_0", 192, gid(0, "fe80::1", model.GIDTypeRoCEv1), gid(3, "::ffff:10.0.0.1", model.GIDTypeRoCEv2))},
			RDMACM:             &model.CharDevice{Path: "/dev/infiniband/rdma_cm", Major: 10, Minor: 58},
			NetDevs:            []model.NetDev{{Name: "eth1", Carrier: true, Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/24")}}},
			DefaultRouteNetDev: "eth0", NetNSMode: "shared",
		},
		Stack: stack("/usr/lib/x86_64-linux-gnu/libibverbs.so.1 -> libibverbs.so.1.14.44.0", "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0"),
		NCCL:  nccl.Settings{Vars: []nccl.Var{{Name: "NCCL_IB_HCA", Value: "mlx5_0:1"}, {Name: "NCCL_IB_GID_INDEX", Value: "3"}, {Name: "NCCL_SOCKET_IFNAME", Value: "eth0"}}},
	}
	clone := func(mut func(*State)) State {
		s := base
		s.Node.Devices = slices.Clone(base.Node.Devices)
		for i := range s.Node.Devices {
			s.Node.Devices[i].Ports = slices.Clone(s.Node.Devices[i].Ports)
		}
		s.Node.NetDevs = slices.Clone(base.Node.NetDevs)
		s.NCCL.Vars = slices.Clone(base.NCCL.Vars)
		s.Changed = true
		mut(&s)
		return s
	}
	tests := []struct {
		name string
		next State
		want []string
	}{
		{"nothing", clone(func(s *State) { s.Changed = false }), nil},
		{"rendering only", clone(func(*State) {}), []string{"spec content changed (configuration or rendering options)"}},
		{"device added", clone(func(s *State) { s.Node.Devices = append(s.Node.Devices, dev("mlx5_2", 194)) }),
			[]string{"RDMA device mlx5_2 added (0000:17:00.0, port 1 Ethernet ACTIVE, /dev/infiniband/uverbs2)"}},
		{"device removed", clone(func(s *State) { s.Node.Devices = nil }), []string{"RDMA device mlx5_0 removed"}},
		{"gid index", clone(func(s *State) { s.NCCL.Vars[1].Value = "5" }), []string{"NCCL_IB_GID_INDEX changed from 3 to 5"}},
		{"nccl var dropped", clone(func(s *State) { s.NCCL.Vars = s.NCCL.Vars[:2] }), []string{"NCCL_SOCKET_IFNAME no longer set (was eth0)"}},
		{"nccl var set", clone(func(s *State) { s.NCCL.Vars = append(s.NCCL.Vars, nccl.Var{Name: "NCCL_IB_TC", Value: "160"}) }),
			[]string{"NCCL_IB_TC set to 160"}},
		{"gid table", clone(func(s *State) {
			s.Node.Devices[0].Ports[0].GIDs = []model.GID{gid(0, "fe80::1", model.GIDTypeRoCEv1), gid(5, "::ffff:10.0.0.9", model.GIDTypeRoCEv2)}
		}), []string{"mlx5_0 port 1 GID table changed: +[5] 10.0.0.9 RoCE v2 -[3] 10.0.0.1 RoCE v2"}},
		{"port down", clone(func(s *State) { s.Node.Devices[0].Ports[0].State = "DOWN" }), []string{"mlx5_0 port 1 state changed from ACTIVE to DOWN"}},
		{"uverbs renumbered", clone(func(s *State) { v := *s.Node.Devices[0].Verbs; v.Minor = 200; s.Node.Devices[0].Verbs = &v }),
			[]string{"mlx5_0: uverbs device changed from /dev/infiniband/uverbs0 (231:192) to /dev/infiniband/uverbs0 (231:200)"}},
		{"uverbs gone", clone(func(s *State) { s.Node.Devices[0].Verbs = nil }), []string{"mlx5_0: uverbs device /dev/infiniband/uverbs0 (231:192) disappeared"}},
		{"rdma_cm gone", clone(func(s *State) { s.Node.RDMACM = nil }), []string{"rdma_cm device disappeared"}},
		{"netns mode", clone(func(s *State) { s.Node.NetNSMode = "exclusive" }), []string{"RDMA netns mode changed from shared to exclusive"}},
		{"default route", clone(func(s *State) { s.Node.DefaultRouteNetDev = "" }), []string{"default route moved from eth0 to none"}},
		{"address", clone(func(s *State) {
			s.Node.NetDevs[0] = model.NetDev{Name: "eth1", Carrier: false, Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.2/24")}}
		}), []string{"netdev eth1 carrier down", "netdev eth1 addresses changed: +10.0.0.2/24 -10.0.0.1/24"}},
		{"rdma-core upgraded", clone(func(s *State) {
			s.Stack = stack("/usr/lib/x86_64-linux-gnu/libibverbs.so.1 -> libibverbs.so.1.14.50.0", "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0")
		}), []string{"library file set changed (rdma-core upgraded or reinstalled?): " +
			"+/usr/lib/x86_64-linux-gnu/libibverbs.so.1 -> libibverbs.so.1.14.50.0 +/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0 " +
			"-/usr/lib/x86_64-linux-gnu/libibverbs.so.1 -> libibverbs.so.1.14.44.0 -/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0"}},
		{"stack gone", clone(func(s *State) { s.Stack = model.UserStack{Problems: []string{"no libibverbs.so.1"}} }), []string{
			"RDMA user-space stack changed from rdma-core to none",
			"library file set changed (rdma-core upgraded or reinstalled?): -/usr/lib/x86_64-linux-gnu/libibverbs.so.1 -> libibverbs.so.1.14.44.0 -/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0",
			"user-space stack problem: no libibverbs.so.1",
		}},
		{"removed", clone(func(s *State) { s.Removed = true; s.Node.Devices = nil; s.NCCL.Vars = nil }), []string{
			"spec removed: no RDMA devices left", "RDMA device mlx5_0 removed",
			"NCCL_IB_HCA no longer set (was mlx5_0:1)", "NCCL_IB_GID_INDEX no longer set (was 3)", "NCCL_SOCKET_IFNAME no longer set (was eth0)",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Describe(&base, tc.next)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Describe:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestDescribeFirst(t *testing.T) {
	s := gidState("3")
	s.Stack = stack("/usr/lib/libibverbs.so.1")
	got := Describe(nil, s)
	want := []string{"initial spec: 1 RDMA device(s) mlx5_1, rdma-core with 1 file(s), NCCL_IB_HCA=mlx5_1:1, NCCL_IB_GID_INDEX=3"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q want %q", got, want)
	}
	if got := Describe(nil, State{Removed: true}); !slices.Equal(got, []string{"no RDMA devices: spec removed"}) {
		t.Fatalf("first removed: %q", got)
	}
}

func TestDescribeLongListsAreCut(t *testing.T) {
	var files []string
	for i := 0; i < 12; i++ {
		files = append(files, "/usr/lib/libibverbs/libp"+string(rune('a'+i))+"-rdmav34.so")
	}
	got := Describe(&State{Stack: stack()}, State{Stack: stack(files...)})
	if len(got) != 1 || !strings.HasSuffix(got[0], "(+4 more)") || strings.Count(got[0], " +") != 8 {
		t.Fatalf("got %q", got)
	}
}
