package hostlibs

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
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
