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
// host library the hook lends (an NCCL plugin, libfabric). dir is created
// world-readable, with every parent a test made, for the containers.
func StubLibrary(t testing.TB, dir, name string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	cc := exec.Command("gcc", "-shared", "-fPIC", "-x", "c", "-", "-o", out, "-Wl,-soname,"+name)
	cc.Stdin = strings.NewReader("int rdma_cdi_stub = 1;\n")
	if b, err := cc.CombinedOutput(); err != nil {
		// gcc is one of the suite's Debian packages (deps.sh).
		t.Fatalf("gcc for the stub %s: %v\n%s", name, err, b)
	}
	return out
}

// StubEFAInstall puts stand-ins for AWS's EFA install under a new host
// directory: aws-ofi-nccl's net plugin in pluginDir and libfabric in
// fabricDir, for the hook's nccl_plugins dirs and libfabric_dirs.
func StubEFAInstall(t testing.TB) (pluginDir, fabricDir string) {
	t.Helper()
	host := t.TempDir()
	if err := os.Chmod(host, 0o755); err != nil {
		t.Fatal(err)
	}
	pluginDir = filepath.Join(host, "aws-ofi-nccl", "lib")
	fabricDir = filepath.Join(host, "efa", "lib")
	StubLibrary(t, pluginDir, "libnccl-net-ofi.so")
	StubLibrary(t, fabricDir, "libfabric.so.1")
	return pluginDir, fabricDir
}
