package hostlibs

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// These tests read this machine's rdma-core, installed on Debian by:
// apt-get install libibverbs1 ibverbs-providers librdmacm1 libnl-3-200 libnl-route-3-200 libnuma1
const realLibDir = "/usr/lib/x86_64-linux-gnu"

func requireRealStack(tb testing.TB) {
	tb.Helper()
	if _, err := os.Stat(realLibDir + "/libibverbs.so.1"); err != nil {
		tb.Skipf("no rdma-core on this machine (apt-get install libibverbs1 ibverbs-providers "+
			"librdmacm1 libnl-3-200 libnl-route-3-200 libnuma1): %v", err)
	}
}

func TestDiscoverRealHost(t *testing.T) {
	requireRealStack(t)
	stack, err := Discover(Options{})
	if err != nil {
		t.Fatal(err)
	}
	assertProblems(t, stack.Problems)
	if _, err := os.Stat("/usr/bin/ofed_info"); err != nil && stack.Flavor != model.FlavorRDMACore {
		t.Errorf("flavor %q, want %q", stack.Flavor, model.FlavorRDMACore)
	}
	if want := []string{realLibDir}; !reflect.DeepEqual(stack.LibraryDirs, want) {
		t.Errorf("library dirs %q, want %q", stack.LibraryDirs, want)
	}

	byPath := map[string]model.HostFile{}
	for _, f := range stack.Files {
		if f.HostPath != f.Path {
			t.Errorf("%s: host path %s differs under root /", f.Path, f.HostPath)
		}
		byPath[f.Path] = f
	}
	expectRole := func(p string, role model.FileRole) {
		t.Helper()
		f, ok := byPath[p]
		if !ok {
			t.Errorf("%s (%s) not found", p, role)
		} else if f.Role != role {
			t.Errorf("%s: role %q, want %q", p, f.Role, role)
		}
	}
	for soname, role := range map[string]model.FileRole{
		"libibverbs.so.1":      model.RoleLibibverbs,
		"libmlx5.so.1":         model.RoleProvider,
		"librdmacm.so.1":       model.RoleLibrdmacm,
		"libnl-3.so.200":       model.RoleLibnl3,
		"libnl-route-3.so.200": model.RoleLibnlRoute3,
		"libnuma.so.1":         model.RoleLibnuma,
	} {
		p := realLibDir + "/" + soname
		expectRole(p, role)
		// The whole chain is there: the regular file the soname leads to.
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		expectRole(real, role)
	}

	providers, _ := filepath.Glob(realLibDir + "/libibverbs/lib*-rdmav*.so")
	if len(providers) == 0 {
		t.Fatal("ibverbs-providers installs no provider here")
	}
	for _, p := range providers {
		expectRole(p, model.RoleProvider)
	}
	drivers, _ := filepath.Glob("/etc/libibverbs.d/*.driver")
	for _, p := range drivers {
		expectRole(p, model.RoleDriverConfig)
	}
	if len(drivers) == 0 {
		t.Error("no /etc/libibverbs.d/*.driver on this machine")
	}

	// Every symlink's target is injected too, so the chains stay intact.
	for _, f := range stack.Files {
		if f.Symlink == "" {
			continue
		}
		target := f.Symlink
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(f.Path), target)
		}
		if _, ok := byPath[target]; !ok {
			t.Errorf("%s -> %s: target %s not injected", f.Path, f.Symlink, target)
		}
	}
}

// TestRealLibibverbsPABIMatchesProviders reads the provider ABI from the
// real libibverbs binary and checks it against the providers' names.
func TestRealLibibverbsPABIMatchesProviders(t *testing.T) {
	requireRealStack(t)
	real, err := filepath.EvalSymlinks(realLibDir + "/libibverbs.so.1")
	if err != nil {
		t.Fatal(err)
	}
	pabi, err := newHostFS("/").libibverbsPABI(real)
	if err != nil {
		t.Fatal(err)
	}
	providers, _ := filepath.Glob(realLibDir + "/libibverbs/lib*-rdmav*.so")
	for _, p := range providers {
		if _, n, ok := ProviderFile(filepath.Base(p)); !ok || n != pabi {
			t.Errorf("%s: PABI %d, %v; libibverbs has %d", p, n, ok, pabi)
		}
	}
}

// TestDiscoverMissingNeededLibrary injects the real libibverbs binary in a
// root that lacks the libnl libraries it links: that is a problem.
func TestDiscoverMissingNeededLibrary(t *testing.T) {
	requireRealStack(t)
	real, err := filepath.EvalSymlinks(realLibDir + "/libibverbs.so.1")
	if err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile(real)
	if err != nil {
		t.Fatal(err)
	}
	needed := neededLibs(real)
	if !slices.Contains(needed, sonameLibnl3) || !slices.Contains(needed, sonameLibnlRoute3) {
		t.Skipf("this libibverbs does not link libnl (DT_NEEDED %q)", needed)
	}
	pabi, err := newHostFS("/").libibverbsPABI(real)
	if err != nil {
		t.Fatal(err)
	}

	r := newFakeRoot(t)
	r.file("/usr/lib64/libibverbs.so.1", string(content))
	r.file("/usr/lib64/libibverbs/libmlx5-rdmav"+strconv.Itoa(pabi)+".so", "mlx5")
	r.file("/etc/libibverbs.d/mlx5.driver", "driver mlx5\n")
	stack := discover(t, r)
	assertProblems(t, stack.Problems,
		"/usr/lib64/libibverbs.so.1 needs libnl-3.so.200, which was not found",
		"/usr/lib64/libibverbs.so.1 needs libnl-route-3.so.200, which was not found")

	r.file("/usr/lib64/libnl-3.so.200", "nl")
	r.file("/usr/lib64/libnl-route-3.so.200", "nl-route")
	assertProblems(t, discover(t, r).Problems)
}

func BenchmarkDiscover(b *testing.B) {
	requireRealStack(b)
	b.ReportAllocs()
	for b.Loop() {
		stack, err := Discover(Options{HostRoot: "/"})
		if err != nil || len(stack.Problems) != 0 {
			b.Fatal(err, stack.Problems)
		}
	}
}
