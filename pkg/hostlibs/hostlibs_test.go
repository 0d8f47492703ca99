package hostlibs

import (
	"errors"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

func discover(t *testing.T, r *fakeRoot) model.UserStack {
	t.Helper()
	stack, err := Discover(Options{HostRoot: r.dir})
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	return stack
}

func assertFiles(t *testing.T, got, want []model.HostFile) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	t.Errorf("files differ:")
	for i := range max(len(got), len(want)) {
		var g, w model.HostFile
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		mark := "  "
		if g != w {
			mark = "!="
		}
		t.Errorf("%s got  %+v\n   want %+v", mark, g, w)
	}
}

func assertProblems(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n got %q\nwant %q", got, want)
	}
}

func TestDiscoverRDMACore(t *testing.T) {
	r := rdmaCoreRoot(t)
	stack := discover(t, r)
	if stack.Flavor != model.FlavorRDMACore {
		t.Errorf("flavor %q", stack.Flavor)
	}
	assertFiles(t, stack.Files, rdmaCoreFiles(r))
	assertProblems(t, stack.Problems)
	if want := []string{debLib}; !reflect.DeepEqual(stack.LibraryDirs, want) {
		t.Errorf("library dirs %q, want %q", stack.LibraryDirs, want)
	}
}

func TestDiscoverIsDeterministic(t *testing.T) {
	r := rdmaCoreRoot(t)
	first := discover(t, r)
	for range 5 {
		if again := discover(t, r); !reflect.DeepEqual(again, first) {
			t.Fatalf("second run differs:\n%+v\n%+v", again, first)
		}
	}
}

func TestDiscoverWithoutCacheScansStandardDirs(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture uses the x86_64 multiarch directory")
	}
	r := rdmaCoreRoot(t)
	r.remove(ldCachePath)
	stack := discover(t, r)
	assertFiles(t, stack.Files, rdmaCoreFiles(r))
	assertProblems(t, stack.Problems)
}

func TestDiscoverCorruptCacheFallsBackAndWarns(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture uses the x86_64 multiarch directory")
	}
	hook := logtest.NewGlobal()
	defer hook.Reset()
	r := rdmaCoreRoot(t)
	r.file(ldCachePath, "glibc-ld.so.cache1.1 but cut short")
	stack := discover(t, r)
	assertFiles(t, stack.Files, rdmaCoreFiles(r))
	assertProblems(t, stack.Problems)
	last := hook.LastEntry()
	if last == nil || last.Level != logrus.WarnLevel ||
		!strings.Contains(last.Message, r.dir+ldCachePath+": malformed ld.so.cache: truncated header") {
		t.Errorf("want a warning naming the broken cache, got %+v", last)
	}
}

func TestDiscoverMLNXOFED(t *testing.T) {
	r := mlnxOFEDRoot(t)
	stack := discover(t, r)
	if stack.Flavor != model.FlavorMLNXOFED {
		t.Errorf("flavor %q", stack.Flavor)
	}
	assertFiles(t, stack.Files, []model.HostFile{
		of("mlx5", r.regular("/etc/libibverbs.d/mlx5.driver", model.RoleDriverConfig)),
		r.symlink("/usr/lib64/libibverbs.so.1", "libibverbs.so.1.14.58.0", model.RoleLibibverbs),
		r.regular("/usr/lib64/libibverbs.so.1.14.58.0", model.RoleLibibverbs),
		of("mlx5", r.symlink("/usr/lib64/libibverbs/libmlx5-rdmav34.so", "../libmlx5.so.1.24.58.0", model.RoleProvider)),
		of("mlx5", r.symlink("/usr/lib64/libmlx5.so.1", "libmlx5.so.1.24.58.0", model.RoleProvider)),
		of("mlx5", r.regular("/usr/lib64/libmlx5.so.1.24.58.0", model.RoleProvider)),
		r.symlink("/usr/lib64/libnl-3.so.200", "libnl-3.so.200.26.0", model.RoleLibnl3),
		r.regular("/usr/lib64/libnl-3.so.200.26.0", model.RoleLibnl3),
		r.symlink("/usr/lib64/libnl-route-3.so.200", "libnl-route-3.so.200.26.0", model.RoleLibnlRoute3),
		r.regular("/usr/lib64/libnl-route-3.so.200.26.0", model.RoleLibnlRoute3),
		r.symlink("/usr/lib64/librdmacm.so.1", "librdmacm.so.1.3.58.0", model.RoleLibrdmacm),
		r.regular("/usr/lib64/librdmacm.so.1.3.58.0", model.RoleLibrdmacm),
	})
	assertProblems(t, stack.Problems)
	if want := []string{"/usr/lib64"}; !reflect.DeepEqual(stack.LibraryDirs, want) {
		t.Errorf("library dirs %q, want %q", stack.LibraryDirs, want)
	}
}

func TestDiscoverMLNXOFEDInfoMarkerWithoutCache(t *testing.T) {
	r := mlnxOFEDRoot(t)
	r.remove("/usr/bin/ofed_info")
	r.remove(ldCachePath)
	r.file("/etc/infiniband/info", "#!/bin/bash\n")
	stack := discover(t, r)
	if stack.Flavor != model.FlavorMLNXOFED || len(stack.Files) != 12 {
		t.Fatalf("flavor %q, %d files", stack.Flavor, len(stack.Files))
	}
	assertProblems(t, stack.Problems)
}

func TestDiscoverProviderOfAnotherABI(t *testing.T) {
	r := rdmaCoreRoot(t)
	r.file(debLib+"/libibverbs/libold-rdmav25.so", "old provider")
	stack := discover(t, r)
	want := append(rdmaCoreFiles(r), of("old", r.regular(debLib+"/libibverbs/libold-rdmav25.so", model.RoleProvider)))
	sortFiles(want)
	assertFiles(t, stack.Files, want)
	assertProblems(t, stack.Problems,
		"provider "+debLib+"/libibverbs/libold-rdmav25.so has ABI rdmav25 but libibverbs.so.1 ("+
			debLib+"/libibverbs.so.1.14.50.0) expects rdmav34")
}

func TestDiscoverDanglingProviderLink(t *testing.T) {
	r := rdmaCoreRoot(t)
	r.link(debLib+"/libibverbs/libbnxt_re-rdmav34.so", "../libbnxt_re.so.1.0.0")
	stack := discover(t, r)
	assertFiles(t, stack.Files, rdmaCoreFiles(r))
	assertProblems(t, stack.Problems,
		"dangling symlink "+debLib+"/libibverbs/libbnxt_re-rdmav34.so -> ../libbnxt_re.so.1.0.0")
}

func TestDiscoverLinkEscapingRoot(t *testing.T) {
	r := rdmaCoreRoot(t)
	// Resolved naively under the root this would reach the real /etc/passwd.
	r.link(debLib+"/libibverbs/libevil-rdmav34.so", "../../../../../../../../etc/passwd")
	r.link("/etc/libibverbs.d/evil.driver", "../../..")
	stack := discover(t, r)
	assertFiles(t, stack.Files, rdmaCoreFiles(r))
	assertProblems(t, stack.Problems,
		"symlink /etc/libibverbs.d/evil.driver -> ../../.. points outside the host root",
		"symlink "+debLib+"/libibverbs/libevil-rdmav34.so -> ../../../../../../../../etc/passwd points outside the host root")
}

func TestDiscoverSymlinkLoop(t *testing.T) {
	r := rdmaCoreRoot(t)
	r.link(debLib+"/libibverbs/libloop-rdmav34.so", "libloop-rdmav34.so")
	stack := discover(t, r)
	assertFiles(t, stack.Files, rdmaCoreFiles(r))
	assertProblems(t, stack.Problems,
		debLib+"/libibverbs/libloop-rdmav34.so: more than 40 levels of symbolic links")
}

func TestDiscoverWithoutProviders(t *testing.T) {
	r := rdmaCoreRoot(t)
	r.remove(debLib + "/libibverbs/libmlx5-rdmav34.so")
	r.remove(debLib + "/libibverbs/librxe-rdmav34.so")
	stack := discover(t, r)
	assertProblems(t, stack.Problems,
		"libibverbs.so.1 ("+debLib+"/libibverbs.so.1) has no providers (no lib*-rdmav<N>.so in "+debLib+"/libibverbs)")

	r.remove(debLib + "/libibverbs")
	stack = discover(t, r)
	if len(stack.Problems) != 1 || !strings.HasPrefix(stack.Problems[0],
		"libibverbs.so.1 ("+debLib+"/libibverbs.so.1) has no provider directory: open "+r.dir+debLib+"/libibverbs: ") {
		t.Errorf("problems %q", stack.Problems)
	}
}

func TestDiscoverUnknownPABI(t *testing.T) {
	r := rdmaCoreRoot(t)
	r.remove(debLib + "/libibverbs.so.1.14.50.0")
	r.file(debLib+"/libibverbs.so.1.14.50.0", "no marker in here")
	stack := discover(t, r)
	assertProblems(t, stack.Problems, "cannot tell the provider ABI of "+debLib+
		"/libibverbs.so.1.14.50.0: neither IBVERBS_PRIVATE_<N> nor rdmav<N> appears in it")
}

func TestDiscoverNothingInstalled(t *testing.T) {
	r := newFakeRoot(t)
	// Common libraries without libibverbs are not a stack.
	r.file("/usr/lib64/libnuma.so.1", "numa")
	r.file("/usr/lib64/libnl-3.so.200", "nl")
	stack, err := Discover(Options{HostRoot: r.dir})
	if err != nil {
		t.Fatal(err)
	}
	if stack.Flavor != "" || len(stack.Files) != 0 || len(stack.LibraryDirs) != 0 {
		t.Errorf("want an empty stack, got %+v", stack)
	}
	assertProblems(t, stack.Problems, "libibverbs.so.1 not found (looked in /etc/ld.so.cache and "+
		strings.Join(standardDirs(runtime.GOARCH), ", ")+")")
}

func TestDiscoverDisabled(t *testing.T) {
	r := rdmaCoreRoot(t)
	stack, err := Discover(Options{HostRoot: r.dir, Disabled: true, ExtraPaths: []string{"/nope"}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(stack, model.UserStack{Files: []model.HostFile{}, LibraryDirs: []string{}}) {
		t.Errorf("want an empty stack, got %+v", stack)
	}
}

func TestDiscoverExtraPaths(t *testing.T) {
	r := rdmaCoreRoot(t)
	r.file("/opt/ucx/lib/libucp.so.0.0.0", "ucx")
	r.link("/opt/ucx/lib/libucp.so.0", "libucp.so.0.0.0")
	r.file("/etc/rdma/rdma.conf", "conf")
	stack, err := Discover(Options{HostRoot: r.dir, ExtraPaths: []string{"/opt/ucx/lib/libucp.so.0", "/etc/rdma/rdma.conf"}})
	if err != nil {
		t.Fatal(err)
	}
	want := append(rdmaCoreFiles(r),
		r.symlink("/opt/ucx/lib/libucp.so.0", "libucp.so.0.0.0", model.RoleExtra),
		r.regular("/opt/ucx/lib/libucp.so.0.0.0", model.RoleExtra),
		r.regular("/etc/rdma/rdma.conf", model.RoleExtra))
	sortFiles(want)
	assertFiles(t, stack.Files, want)
	if want := []string{"/opt/ucx/lib", debLib}; !reflect.DeepEqual(stack.LibraryDirs, want) {
		t.Errorf("library dirs %q, want %q", stack.LibraryDirs, want)
	}

	_, err = Discover(Options{HostRoot: r.dir, ExtraPaths: []string{"/opt/missing/libx.so"}})
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "extra path /opt/missing/libx.so: ") {
		t.Errorf("missing extra: err = %v", err)
	}
	_, err = Discover(Options{HostRoot: r.dir, ExtraPaths: []string{"opt/ucx"}})
	if err == nil || err.Error() != `extra path "opt/ucx" is not absolute` {
		t.Errorf("relative extra: err = %v", err)
	}
}

func TestProviderFile(t *testing.T) {
	for name, want := range map[string]struct {
		provider string
		pabi     int
	}{
		"libmlx5-rdmav34.so":       {"mlx5", 34},
		"libmlx5-rdmav2.so":        {"mlx5", 2},
		"libvmw_pvrdma-rdmav25.so": {"vmw_pvrdma", 25},
		"libfoo-bar-rdmav1.so":     {"foo-bar", 1},
	} {
		if provider, pabi, ok := ProviderFile(name); !ok || provider != want.provider || pabi != want.pabi {
			t.Errorf("ProviderFile(%q) = %q, %d, %v; want %q, %d", name, provider, pabi, ok, want.provider, want.pabi)
		}
	}
	for _, name := range []string{
		"libmlx5.so.1", "libmlx5-rdmav.so", "libmlx5-rdmavX.so", "mlx5-rdmav34.so",
		"lib-rdmav34.so", "libmlx5-rdmav34.so.1", "libmlx5-rdmav123456.so", "README",
	} {
		if provider, n, ok := ProviderFile(name); ok {
			t.Errorf("ProviderFile(%q) = %q, %d, want no match", name, provider, n)
		}
	}
}

func TestFindNumberAfter(t *testing.T) {
	for data, want := range map[string]int{
		"x\x00IBVERBS_PRIVATE_34\x00":           34,
		"IBVERBS_PRIVATE_\x00IBVERBS_PRIVATE_7": 7, // first occurrence has no digits
		"lib%s-rdmav2.so":                       2,
	} {
		var got int
		for _, marker := range pabiMarkers {
			if n, ok := findNumberAfter([]byte(data), marker); ok {
				got = n
				break
			}
		}
		if got != want {
			t.Errorf("PABI in %q = %d, want %d", data, got, want)
		}
	}
}

func TestFollowLink(t *testing.T) {
	tests := []struct {
		dir, target, want string
		ok                bool
	}{
		{"/usr/lib", "libx.so.1.0", "/usr/lib/libx.so.1.0", true},
		{"/usr/lib/libibverbs", "../libx.so", "/usr/lib/libx.so", true},
		{"/usr/lib", "/opt/x", "/opt/x", true},
		{"/usr/lib", "../../etc/x", "/etc/x", true},
		{"/usr/lib", "../../../etc/x", "", false},
		{"/", "..", "", false},
		{"/usr", "a/../../..", "", false},
		{"/usr", "./a/./b", "/usr/a/b", true},
	}
	for _, tt := range tests {
		got, ok := followLink(tt.dir, tt.target)
		if got != tt.want || ok != tt.ok {
			t.Errorf("followLink(%q, %q) = %q, %v; want %q, %v", tt.dir, tt.target, got, ok, tt.want, tt.ok)
		}
	}
}

func TestDiscoverMLNXOFEDMarkerWithoutLibibverbs(t *testing.T) {
	r := mlnxOFEDRoot(t)
	r.remove("/usr/lib64/libibverbs.so.1")
	stack := discover(t, r)
	if stack.Flavor != model.FlavorMLNXOFED || len(stack.Files) != 0 {
		t.Errorf("flavor %q, files %+v", stack.Flavor, stack.Files)
	}
	if len(stack.Problems) != 1 || !strings.HasPrefix(stack.Problems[0], "libibverbs.so.1 not found") {
		t.Errorf("problems %q", stack.Problems)
	}
}
