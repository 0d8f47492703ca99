package hostlibs

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

func writeHostFile(t *testing.T, root, p, content string) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A GCP-like host: gIB's net and tuner plugins beside a library of its
// own, the NCCL it was built with and a script, an
// Azure-like nccl.conf naming a topology file; missing dirs are skipped.
func TestFindNCCL(t *testing.T) {
	root := t.TempDir()
	writeHostFile(t, root, "/home/kubernetes/bin/gib/libnccl-net-gib.so", "elf")
	writeHostFile(t, root, "/home/kubernetes/bin/gib/libnccl-tuner-gib.so", "elf")
	writeHostFile(t, root, "/home/kubernetes/bin/gib/set_nccl_env.sh", "#!/bin/sh")
	writeHostFile(t, root, "/home/kubernetes/bin/gib/libnccl.so.2", "elf")
	writeHostFile(t, root, "/home/kubernetes/bin/gib/libgib-helper.so.1", "elf")
	writeHostFile(t, root, "/opt/microsoft/ndv5-topo.xml", "<system/>")
	writeHostFile(t, root, "/etc/nccl.conf", "# host\nNCCL_TOPO_FILE=/opt/microsoft/nope.xml\nNCCL_TOPO_FILE=/opt/microsoft/ndv5-topo.xml\nNCCL_IB_PCI_RELAXED_ORDERING=1\nNCCL_DEBUG=WARN\n")

	h, warnings := FindNCCL(NCCLOptions{
		HostRoot: root, Dirs: []string{"/home/kubernetes/bin/gib", "/opt/amazon/aws-ofi-nccl/lib", "/x/../etc"},
		ConfFile: "/etc/nccl.conf", CarryKeys: []string{"NCCL_TOPO_FILE", "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_SOCKET_IFNAME"},
	})
	want := model.HostNCCL{
		PluginDirs: []model.NCCLPluginDir{{
			Path: "/home/kubernetes/bin/gib", Net: []string{"libnccl-net-gib.so"}, Tuner: []string{"libnccl-tuner-gib.so"},
			Libs: []string{"libgib-helper.so.1"}, NCCL: []string{"libnccl.so.2"},
		}},
		Conf:  []model.NCCLConfVar{{Name: "NCCL_TOPO_FILE", Value: "/opt/microsoft/ndv5-topo.xml"}, {Name: "NCCL_IB_PCI_RELAXED_ORDERING", Value: "1"}},
		Files: []string{"/opt/microsoft/ndv5-topo.xml"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("FindNCCL = %+v, want %+v", h, want)
	}
	if len(warnings) != 1 {
		t.Errorf("warnings = %q, want the .. dir alone", warnings)
	}
}

// A topology file that is missing, a directory or climbs with .. is not
// carried: the container would get a key naming nothing.
func TestFindNCCLRefusesBadTopologyFiles(t *testing.T) {
	for _, value := range []string{"/opt/none.xml", "/opt", "/opt/../etc/passwd", "topo.xml"} {
		root := t.TempDir()
		writeHostFile(t, root, "/etc/passwd", "root:x:0:0")
		writeHostFile(t, root, "/opt/x", "")
		writeHostFile(t, root, "/etc/nccl.conf", "NCCL_TOPO_FILE="+value+"\n")
		h, warnings := FindNCCL(NCCLOptions{HostRoot: root, ConfFile: "/etc/nccl.conf", CarryKeys: []string{"NCCL_TOPO_FILE"}})
		if !h.Empty() || len(warnings) != 1 {
			t.Errorf("NCCL_TOPO_FILE=%s: got %+v, warnings %q; want nothing and one warning", value, h, warnings)
		}
	}
}

// No host nccl.conf and no plugin dir: nothing, silently.
func TestFindNCCLNothing(t *testing.T) {
	h, warnings := FindNCCL(NCCLOptions{HostRoot: t.TempDir(), Dirs: []string{"/opt/amazon/aws-ofi-nccl/lib"}, ConfFile: "/etc/nccl.conf", CarryKeys: []string{"NCCL_TOPO_FILE"}})
	if !h.Empty() || len(warnings) != 0 {
		t.Errorf("got %+v, %q", h, warnings)
	}
}

// An AWS host: aws-ofi-nccl's plugins and, in the EFA installer's lib
// dir, libfabric beside libraries that are not lent with it; a lib64 that
// does not exist is skipped.
func TestFindNCCLLibfabric(t *testing.T) {
	root := t.TempDir()
	writeHostFile(t, root, "/opt/amazon/aws-ofi-nccl/lib/libnccl-net-ofi.so", "elf")
	writeHostFile(t, root, "/opt/amazon/efa/lib/libfabric.so.1.25.0", "elf")
	writeHostFile(t, root, "/opt/amazon/efa/lib/libfabric.a", "ar")
	writeHostFile(t, root, "/opt/amazon/efa/lib/libfabric.so.1.25.0.la", "libtool")
	writeHostFile(t, root, "/opt/amazon/efa/lib/libpmix.so.2", "elf")
	if err := os.Symlink("libfabric.so.1.25.0", filepath.Join(root, "/opt/amazon/efa/lib/libfabric.so.1")); err != nil {
		t.Fatal(err)
	}
	h, warnings := FindNCCL(NCCLOptions{
		HostRoot: root, Dirs: []string{"/opt/amazon/aws-ofi-nccl/lib"},
		LibfabricDirs: []string{"/opt/amazon/efa/lib", "/opt/amazon/efa/lib64", "/opt/amazon/efa/../lib"},
	})
	want := []string{"/opt/amazon/efa/lib/libfabric.so.1", "/opt/amazon/efa/lib/libfabric.so.1.25.0"}
	if !reflect.DeepEqual(h.Libfabric, want) || len(h.PluginDirs) != 1 {
		t.Errorf("FindNCCL = %+v, want libfabric %v with the plugin dir", h, want)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "libfabric dir") {
		t.Errorf("warnings = %q, want the .. dir alone", warnings)
	}
}

// A plugin dir needs libfabric when one of its net or tuner plugins names
// it in its dynamic section (aws-ofi-nccl's do, under either name), not
// when the plugins need other libraries (gIB's) or are no ELF at all, and
// not for a helper library beside the plugins that needs it.
func TestFindNCCLPluginsThatNeedLibfabric(t *testing.T) {
	root := t.TempDir()
	writeHostFile(t, root, "/opt/amazon/aws-ofi-nccl/lib/libnccl-net.so", string(fixture.StubLibrary("libhwloc.so.15", "libfabric.so.1")))
	writeHostFile(t, root, "/opt/tuner/libnccl-tuner-ofi.so", string(fixture.StubLibrary("libfabric.so")))
	writeHostFile(t, root, "/home/kubernetes/bin/gib/libnccl-net-gib.so", string(fixture.StubLibrary("libibverbs.so.1")))
	writeHostFile(t, root, "/home/kubernetes/bin/gib/libgib-fabric.so", string(fixture.StubLibrary("libfabric.so.1")))
	writeHostFile(t, root, "/opt/text/libnccl-net-text.so", "libfabric.so.1")
	h, _ := FindNCCL(NCCLOptions{HostRoot: root, Dirs: []string{"/opt/amazon/aws-ofi-nccl/lib", "/opt/tuner", "/home/kubernetes/bin/gib", "/opt/text"}})
	got := map[string]bool{}
	for _, d := range h.PluginDirs {
		got[d.Path] = d.NeedsLibfabric
	}
	want := map[string]bool{"/opt/amazon/aws-ofi-nccl/lib": true, "/opt/tuner": true, "/home/kubernetes/bin/gib": false, "/opt/text": false}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("needs libfabric %v, want %v", got, want)
	}
}
