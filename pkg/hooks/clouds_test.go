package hooks

import (
	"reflect"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// TestNCCLPluginsOnCloudFixtures: with the default nccl_plugins config, a
// container whose image has no NCCL plugin is lent what each cloud node
// offers under its host root: the gIB plugins on GCP A3 Ultra, the
// topology file the host's nccl.conf names on Azure ND H100 v5, and
// nothing on a node that offers neither.
func TestNCCLPluginsOnCloudFixtures(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		dirs    []string
		files   []string
		vars    string
	}{
		// gIB's own libnccl.so.2 stays on the host.
		{"gcp-a3-ultra", []string{"/home/kubernetes/bin/gib"}, []string{"/home/kubernetes/bin/gib/libnccl-net-gib.so", "/home/kubernetes/bin/gib/libnccl-tuner-gib.so"}, "NCCL_NET_PLUGIN=gib NCCL_TUNER_PLUGIN=gib"},
		{"azure-ndv5", nil, []string{"/opt/microsoft/ndv5-topo.xml"}, "NCCL_TOPO_FILE=/opt/microsoft/ndv5-topo.xml"},
		{"amd-pollara", nil, nil, ""},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			tr := fixture.BuildBundledTrees(t, tc.fixture, false)
			log, buf := testLog()
			d, err := NCCLPlugins(newBundle(t).load(t), config.DefaultNCCLPlugins(), tr.Host, log)
			must(t, err)
			if !reflect.DeepEqual(d.Dirs, tc.dirs) || !reflect.DeepEqual(d.Files, tc.files) {
				t.Errorf("lent dirs %v files %v, want %v %v\n%s", d.Dirs, d.Files, tc.dirs, tc.files, buf)
			}
			var vars []string
			for _, v := range pluginVars(d) {
				vars = append(vars, v.Name+"="+v.Value)
			}
			if got := strings.Join(vars, " "); got != tc.vars {
				t.Errorf("nccl.conf lines %q, want %q", got, tc.vars)
			}
			// Only the keys carry_keys names leave the host's nccl.conf.
			if strings.Contains(strings.Join(vars, " "), "NCCL_IB_PCI_RELAXED_ORDERING") {
				t.Errorf("a key outside carry_keys was carried: %v", vars)
			}
		})
	}
}
