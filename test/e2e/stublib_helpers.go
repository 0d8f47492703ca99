package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// StubLibrary writes dir/name, a real ELF shared object whose soname is its
// file name, so that ldconfig caches it under that name: a stand-in for a
// host library the hook lends (an NCCL plugin, libfabric). It is linked
// against the libraries needs names (paths of other stubs: DT_NEEDED their
// sonames). dir is created world-readable, with every parent a test made,
// for the containers.
func StubLibrary(t testing.TB, dir, name string, needs ...string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	args := []string{"-shared", "-fPIC", "-x", "c", "-", "-x", "none", "-o", out, "-Wl,-soname," + name}
	if len(needs) > 0 {
		// The stub uses nothing of them: Debian's linker would drop them.
		args = append(args, "-Wl,--no-as-needed")
	}
	for _, lib := range needs {
		args = append(args, "-L"+filepath.Dir(lib), "-l:"+filepath.Base(lib))
	}
	cc := exec.Command("gcc", args...)
	cc.Stdin = strings.NewReader("int rdma_cdi_stub = 1;\n")
	if b, err := cc.CombinedOutput(); err != nil {
		// gcc is one of the suite's Debian packages (deps.sh).
		t.Fatalf("gcc for the stub %s: %v\n%s", name, err, b)
	}
	return out
}

// StubEFAInstall puts stand-ins for AWS's EFA install under a new host
// directory: libfabric in fabricDir and aws-ofi-nccl's net plugin, linked
// against it (which marks the plugin as libfabric's for the hook), in
// pluginDir, for the hook's nccl_plugins dirs and libfabric_dirs.
func StubEFAInstall(t testing.TB) (pluginDir, fabricDir string) {
	t.Helper()
	host := t.TempDir()
	if err := os.Chmod(host, 0o755); err != nil {
		t.Fatal(err)
	}
	pluginDir = filepath.Join(host, "aws-ofi-nccl", "lib")
	fabricDir = filepath.Join(host, "efa", "lib")
	fabric := StubLibrary(t, fabricDir, "libfabric.so.1")
	StubLibrary(t, pluginDir, "libnccl-net-ofi.so", fabric)
	return pluginDir, fabricDir
}
