package hostlibs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/hostlibs/ldcache"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// fakeRoot is a host root in a temporary directory.
type fakeRoot struct {
	t   *testing.T
	dir string
}

func newFakeRoot(t *testing.T) *fakeRoot {
	return &fakeRoot{t: t, dir: t.TempDir()}
}

func (r *fakeRoot) mkdirFor(p string) {
	r.t.Helper()
	if err := os.MkdirAll(filepath.Dir(r.dir+p), 0o755); err != nil {
		r.t.Fatal(err)
	}
}

func (r *fakeRoot) file(p, content string) {
	r.t.Helper()
	r.mkdirFor(p)
	if err := os.WriteFile(r.dir+p, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *fakeRoot) mkdir(p string) {
	r.t.Helper()
	if err := os.MkdirAll(r.dir+p, 0o755); err != nil {
		r.t.Fatal(err)
	}
}

func (r *fakeRoot) link(p, target string) {
	r.t.Helper()
	r.mkdirFor(p)
	if err := os.Symlink(target, r.dir+p); err != nil {
		r.t.Fatal(err)
	}
}

func (r *fakeRoot) remove(p string) {
	r.t.Helper()
	if err := os.RemoveAll(r.dir + p); err != nil {
		r.t.Fatal(err)
	}
}

// cache writes the host's ld.so.cache with the entries, as paths for the
// running architecture unless flags are given.
func (r *fakeRoot) cache(entries ...ldcache.Entry) {
	r.t.Helper()
	native, ok := ldcache.NativeFlags()
	if !ok {
		r.t.Skip("ld.so.cache flags of this architecture are unknown")
	}
	for i := range entries {
		if entries[i].Flags == 0 {
			entries[i].Flags = native
		}
	}
	r.file(ldCachePath, string(ldcache.Encode(entries)))
}

// regular and symlink build expected files under this root.
func (r *fakeRoot) regular(p string, role model.FileRole) model.HostFile {
	return model.HostFile{Path: p, HostPath: r.dir + p, Role: role}
}

func (r *fakeRoot) symlink(p, target string, role model.FileRole) model.HostFile {
	return model.HostFile{Path: p, HostPath: r.dir + p, Symlink: target, Role: role}
}

// of marks an expected file as the provider's.
func of(provider string, f model.HostFile) model.HostFile {
	f.Provider = provider
	return f
}

const (
	debLib = "/usr/lib/x86_64-linux-gnu"
	// verbsContent stands for a libibverbs binary: the symbol version of
	// its private API carries the provider ABI.
	verbsContent = "\x7fELF...ibv_get_device_list\x00IBVERBS_PRIVATE_34\x00IBVERBS_1.1\x00"
)

// rdmaCoreRoot lays out a Debian host with rdma-core: merged /usr (an
// absolute /lib link, which must stay inside the root), versioned sonames,
// provider links into the parent directory, and a cache listing /lib paths.
func rdmaCoreRoot(t *testing.T) *fakeRoot {
	r := newFakeRoot(t)
	r.mkdir(debLib)
	r.link("/lib", "/usr/lib")
	r.file(debLib+"/libibverbs.so.1.14.50.0", verbsContent)
	r.link(debLib+"/libibverbs.so.1", "libibverbs.so.1.14.50.0")
	r.file(debLib+"/libmlx5.so.1.24.50.0", "mlx5")
	r.link(debLib+"/libmlx5.so.1", "libmlx5.so.1.24.50.0")
	r.link(debLib+"/libibverbs/libmlx5-rdmav34.so", "../libmlx5.so.1.24.50.0")
	r.file(debLib+"/libibverbs/librxe-rdmav34.so", "rxe")
	r.file(debLib+"/libibverbs/README", "not a provider")
	r.file(debLib+"/libibverbs/libfoo.so", "not a provider either")
	r.file("/etc/libibverbs.d/mlx5.driver", "driver mlx5\n")
	r.file("/etc/libibverbs.d/rxe.driver", "driver rxe\n")
	r.file("/etc/libibverbs.d/notes.txt", "ignored")
	r.file(debLib+"/librdmacm.so.1.3.50.0", "rdmacm")
	r.link(debLib+"/librdmacm.so.1", "librdmacm.so.1.3.50.0")
	r.file(debLib+"/libnl-3.so.200.26.0", "nl")
	r.link(debLib+"/libnl-3.so.200", "libnl-3.so.200.26.0")
	r.file(debLib+"/libnl-route-3.so.200.26.0", "nl-route")
	r.link(debLib+"/libnl-route-3.so.200", "libnl-route-3.so.200.26.0")
	r.file(debLib+"/libnuma.so.1.0.0", "numa")
	// An absolute target is a host path: it must resolve inside the root.
	r.link(debLib+"/libnuma.so.1", debLib+"/libnuma.so.1.0.0")
	// A 32-bit libibverbs listed first in the cache must be skipped.
	r.file("/usr/lib/i386-linux-gnu/libibverbs.so.1", "i386")
	r.cache(
		ldcache.Entry{Name: "libibverbs.so.1", Path: "/lib/i386-linux-gnu/libibverbs.so.1", Flags: ldcache.TypeELFLibc6},
		ldcache.Entry{Name: "libibverbs.so.1", Path: "/lib/x86_64-linux-gnu/libibverbs.so.1"},
		ldcache.Entry{Name: "libmlx5.so.1", Path: "/lib/x86_64-linux-gnu/libmlx5.so.1"},
		ldcache.Entry{Name: "librdmacm.so.1", Path: "/lib/x86_64-linux-gnu/librdmacm.so.1"},
		ldcache.Entry{Name: "libnl-3.so.200", Path: "/lib/x86_64-linux-gnu/libnl-3.so.200"},
		ldcache.Entry{Name: "libnl-route-3.so.200", Path: "/lib/x86_64-linux-gnu/libnl-route-3.so.200"},
		// A stale entry comes first: the next one that exists wins.
		ldcache.Entry{Name: "libnuma.so.1", Path: "/opt/gone/libnuma.so.1"},
		ldcache.Entry{Name: "libnuma.so.1", Path: "/lib/x86_64-linux-gnu/libnuma.so.1"},
	)
	return r
}

// rdmaCoreFiles is what Discover returns for rdmaCoreRoot.
func rdmaCoreFiles(r *fakeRoot) []model.HostFile {
	return []model.HostFile{
		of("mlx5", r.regular("/etc/libibverbs.d/mlx5.driver", model.RoleDriverConfig)),
		of("rxe", r.regular("/etc/libibverbs.d/rxe.driver", model.RoleDriverConfig)),
		r.symlink(debLib+"/libibverbs.so.1", "libibverbs.so.1.14.50.0", model.RoleLibibverbs),
		r.regular(debLib+"/libibverbs.so.1.14.50.0", model.RoleLibibverbs),
		of("mlx5", r.symlink(debLib+"/libibverbs/libmlx5-rdmav34.so", "../libmlx5.so.1.24.50.0", model.RoleProvider)),
		of("rxe", r.regular(debLib+"/libibverbs/librxe-rdmav34.so", model.RoleProvider)),
		of("mlx5", r.symlink(debLib+"/libmlx5.so.1", "libmlx5.so.1.24.50.0", model.RoleProvider)),
		of("mlx5", r.regular(debLib+"/libmlx5.so.1.24.50.0", model.RoleProvider)),
		r.symlink(debLib+"/libnl-3.so.200", "libnl-3.so.200.26.0", model.RoleLibnl3),
		r.regular(debLib+"/libnl-3.so.200.26.0", model.RoleLibnl3),
		r.symlink(debLib+"/libnl-route-3.so.200", "libnl-route-3.so.200.26.0", model.RoleLibnlRoute3),
		r.regular(debLib+"/libnl-route-3.so.200.26.0", model.RoleLibnlRoute3),
		r.symlink(debLib+"/libnuma.so.1", debLib+"/libnuma.so.1.0.0", model.RoleLibnuma),
		r.regular(debLib+"/libnuma.so.1.0.0", model.RoleLibnuma),
		r.symlink(debLib+"/librdmacm.so.1", "librdmacm.so.1.3.50.0", model.RoleLibrdmacm),
		r.regular(debLib+"/librdmacm.so.1.3.50.0", model.RoleLibrdmacm),
	}
}

// mlnxOFEDRoot lays out a RHEL host with MLNX_OFED: libraries in
// /usr/lib64, /lib64 a relative link to it, the ofed_info marker, valgrind
// builds that must not be picked, and no libnuma.
func mlnxOFEDRoot(t *testing.T) *fakeRoot {
	r := newFakeRoot(t)
	r.link("/lib64", "usr/lib64")
	r.file("/usr/bin/ofed_info", "#!/bin/bash\necho MLNX_OFED_LINUX-5.8-3.0.7.0:\n")
	r.file("/usr/lib64/libibverbs.so.1.14.58.0", verbsContent)
	r.link("/usr/lib64/libibverbs.so.1", "libibverbs.so.1.14.58.0")
	r.file("/usr/lib64/libmlx5.so.1.24.58.0", "mlx5")
	r.link("/usr/lib64/libmlx5.so.1", "libmlx5.so.1.24.58.0")
	r.link("/usr/lib64/libibverbs/libmlx5-rdmav34.so", "../libmlx5.so.1.24.58.0")
	r.file("/usr/lib64/mlnx_ofed/valgrind/libibverbs.so.1", verbsContent)
	r.file("/usr/lib64/mlnx_ofed/valgrind/libmlx5.so.1", "valgrind mlx5")
	r.file("/etc/libibverbs.d/mlx5.driver", "driver mlx5\n")
	r.file("/usr/lib64/librdmacm.so.1.3.58.0", "rdmacm")
	r.link("/usr/lib64/librdmacm.so.1", "librdmacm.so.1.3.58.0")
	r.file("/usr/lib64/libnl-3.so.200.26.0", "nl")
	r.link("/usr/lib64/libnl-3.so.200", "libnl-3.so.200.26.0")
	r.file("/usr/lib64/libnl-route-3.so.200.26.0", "nl-route")
	r.link("/usr/lib64/libnl-route-3.so.200", "libnl-route-3.so.200.26.0")
	r.cache(
		ldcache.Entry{Name: "libibverbs.so.1", Path: "/lib64/libibverbs.so.1"},
		ldcache.Entry{Name: "libmlx5.so.1", Path: "/lib64/libmlx5.so.1"},
		ldcache.Entry{Name: "librdmacm.so.1", Path: "/lib64/librdmacm.so.1"},
		ldcache.Entry{Name: "libnl-3.so.200", Path: "/lib64/libnl-3.so.200"},
		ldcache.Entry{Name: "libnl-route-3.so.200", Path: "/lib64/libnl-route-3.so.200"},
	)
	return r
}
