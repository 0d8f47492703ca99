package cdispec

import (
	"slices"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// debianProviders is part of a Debian ibverbs-providers install: four of
// its providers, each with its .driver file, and mlx5's, efa's and ionic's
// own shared libraries.
func debianProviders() []model.HostFile {
	f := func(path, symlink string, role model.FileRole, provider string) model.HostFile {
		return model.HostFile{Path: path, Symlink: symlink, Role: role, Provider: provider}
	}
	return []model.HostFile{
		f("/etc/libibverbs.d/bnxt_re.driver", "", model.RoleDriverConfig, "bnxt_re"),
		f("/etc/libibverbs.d/efa.driver", "", model.RoleDriverConfig, "efa"),
		f("/etc/libibverbs.d/ionic.driver", "", model.RoleDriverConfig, "ionic"),
		f("/etc/libibverbs.d/mlx5.driver", "", model.RoleDriverConfig, "mlx5"),
		f(libDir+"/libibverbs.so.1", "libibverbs.so.1.14.44.0", model.RoleLibibverbs, ""),
		f(libDir+"/libibverbs.so.1.14.44.0", "", model.RoleLibibverbs, ""),
		f(libDir+"/libibverbs/libbnxt_re-rdmav34.so", "", model.RoleProvider, "bnxt_re"),
		f(libDir+"/libibverbs/libefa-rdmav34.so", "../libefa.so.1.2.44.0", model.RoleProvider, "efa"),
		f(libDir+"/libibverbs/libionic-rdmav34.so", "../libionic.so.1.1.57.0", model.RoleProvider, "ionic"),
		f(libDir+"/libibverbs/libmlx5-rdmav34.so", "../libmlx5.so.1.24.44.0", model.RoleProvider, "mlx5"),
		f(libDir+"/libefa.so.1", "libefa.so.1.2.44.0", model.RoleProvider, "efa"),
		f(libDir+"/libefa.so.1.2.44.0", "", model.RoleProvider, "efa"),
		f(libDir+"/libionic.so.1", "libionic.so.1.1.57.0", model.RoleProvider, "ionic"),
		f(libDir+"/libionic.so.1.1.57.0", "", model.RoleProvider, "ionic"),
		f(libDir+"/libmlx5.so.1", "libmlx5.so.1.24.44.0", model.RoleProvider, "mlx5"),
		f(libDir+"/libmlx5.so.1.24.44.0", "", model.RoleProvider, "mlx5"),
		f(libDir+"/libnl-3.so.200", "libnl-3.so.200.26.0", model.RoleLibnl3, ""),
		f(libDir+"/libnl-3.so.200.26.0", "", model.RoleLibnl3, ""),
	}
}

func paths(files []model.HostFile) []string {
	var out []string
	for _, f := range files {
		out = append(out, f.Path)
	}
	return out
}

func TestForNodeProviders(t *testing.T) {
	core := []string{
		libDir + "/libibverbs.so.1", libDir + "/libibverbs.so.1.14.44.0",
		libDir + "/libnl-3.so.200", libDir + "/libnl-3.so.200.26.0",
	}
	mlx5 := []string{
		"/etc/libibverbs.d/mlx5.driver", libDir + "/libibverbs/libmlx5-rdmav34.so",
		libDir + "/libmlx5.so.1", libDir + "/libmlx5.so.1.24.44.0",
	}
	efa := []string{
		"/etc/libibverbs.d/efa.driver", libDir + "/libibverbs/libefa-rdmav34.so",
		libDir + "/libefa.so.1", libDir + "/libefa.so.1.2.44.0",
	}
	all := paths(debianProviders())
	for _, tc := range []struct {
		name    string
		drivers []string
		want    []string
	}{
		{"ConnectX only: mlx5 alone", []string{"mlx5_core", "mlx5_core"}, slices.Concat(core, mlx5)},
		{"ConnectX and EFA", []string{"mlx5_core", "efa"}, slices.Concat(core, mlx5, efa)},
		{"AMD Pensando (Pollara): ionic alone", []string{"ionic"}, slices.Concat(core, []string{
			"/etc/libibverbs.d/ionic.driver", libDir + "/libibverbs/libionic-rdmav34.so",
			libDir + "/libionic.so.1", libDir + "/libionic.so.1.1.57.0",
		})},
		{"a Broadcom NIC: bnxt_re, which has no library of its own", []string{"bnxt_en"},
			slices.Concat(core, []string{"/etc/libibverbs.d/bnxt_re.driver", libDir + "/libibverbs/libbnxt_re-rdmav34.so"})},
		{"soft RoCE (no PCI driver): every provider", []string{"mlx5_core", ""}, all},
		{"a driver the table lacks: every provider", []string{"mlx5_core", "newnic"}, all},
		{"no device: every provider", nil, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var devices []model.Device
			for _, d := range tc.drivers {
				devices = append(devices, model.Device{Name: "dev", Driver: d})
			}
			got := paths(forNodeProviders(debianProviders(), devices))
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("kept\n %q\nwant\n %q", got, want)
			}
		})
	}
}
