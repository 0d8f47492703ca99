package cdispec

import (
	"fmt"
	"net/netip"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

func char(name string, major, minor uint32) *model.CharDevice {
	return &model.CharDevice{Path: "/dev/infiniband/" + name, Major: major, Minor: minor}
}

// testNode is a three-HCA node, listed out of order as discovery might:
//   - mlx5_bond_0: a RoCE LAG device, one port;
//   - mlx5_1: a two-port InfiniBand HCA (umad/issm per port);
//   - mlx5_0: a one-port RoCE HCA.
func testNode() model.Node {
	return model.Node{
		Devices: []model.Device{
			{
				Name: "mlx5_bond_0", Bond: true, Driver: "mlx5_core", Verbs: char("uverbs2", 231, 194),
				Ports: []model.Port{{Number: 1, State: "ACTIVE", LinkLayer: model.LinkLayerEthernet,
					Umad: char("umad3", 231, 3), Issm: char("issm3", 231, 67)}},
			},
			{
				Name: "mlx5_1", Driver: "mlx5_core", Verbs: char("uverbs1", 231, 193),
				Ports: []model.Port{
					{Number: 1, State: "ACTIVE", LinkLayer: model.LinkLayerInfiniBand,
						Umad: char("umad1", 231, 1), Issm: char("issm1", 231, 65)},
					{Number: 2, State: "DOWN", LinkLayer: model.LinkLayerInfiniBand,
						Umad: char("umad2", 231, 2), Issm: char("issm2", 231, 66)},
				},
			},
			{
				Name: "mlx5_0", Driver: "mlx5_core", Verbs: char("uverbs0", 231, 192),
				Ports: []model.Port{{Number: 1, State: "ACTIVE", LinkLayer: model.LinkLayerEthernet,
					Umad: char("umad0", 231, 0), Issm: char("issm0", 231, 64)}},
			},
		},
		RDMACM: char("rdma_cm", 10, 58),
	}
}

const libDir = "/usr/lib/x86_64-linux-gnu"

// testStack is an rdma-core stack read under a host root of /host, with
// SONAME and provider symlinks.
func testStack() model.UserStack {
	f := func(path, symlink string, role model.FileRole) model.HostFile {
		return model.HostFile{Path: path, HostPath: "/host" + path, Symlink: symlink, Role: role}
	}
	return model.UserStack{
		Flavor: "rdma-core",
		Files: []model.HostFile{
			f(libDir+"/libmlx5.so.1.24.44.0", "", "provider"),
			f(libDir+"/libibverbs.so.1", "libibverbs.so.1.14.44.0", "libibverbs"),
			f(libDir+"/libibverbs.so.1.14.44.0", "", "libibverbs"),
			f(libDir+"/libmlx5.so.1", "libmlx5.so.1.24.44.0", "provider"),
			f(libDir+"/libibverbs/libmlx5-rdmav34.so", "../libmlx5.so.1", "provider"),
			f("/etc/libibverbs.d/mlx5.driver", "", "driver-config"),
		},
		LibraryDirs: []string{libDir + "/libibverbs", libDir, libDir},
	}
}

// bigNode builds devices with ports GID entries each, like a large
// SR-IOV node. GIDs do not reach the spec, but they make the input as heavy
// as a real one.
func bigNode(devices, gids int) model.Node {
	node := model.Node{RDMACM: char("rdma_cm", 10, 58)}
	for i := range devices {
		port := model.Port{
			Number: 1, State: "ACTIVE", LinkLayer: model.LinkLayerEthernet,
			GIDTableLen: gids,
			Umad:        char(fmt.Sprintf("umad%d", i), 231, uint32(i)),
			Issm:        char(fmt.Sprintf("issm%d", i), 231, uint32(64+i)),
		}
		for g := range gids {
			addr := netip.AddrFrom16([16]byte{0: 0xfe, 1: 0x80, 14: byte(i), 15: byte(g)})
			port.GIDs = append(port.GIDs, model.GID{Index: g, GID: addr, Type: model.GIDTypeRoCEv2, NetDev: fmt.Sprintf("eth%d", i)})
		}
		node.Devices = append(node.Devices, model.Device{
			Name:  fmt.Sprintf("mlx5_%d", i),
			Verbs: char(fmt.Sprintf("uverbs%d", i), 231, uint32(192+i)),
			Ports: []model.Port{port},
		})
	}
	return node
}
