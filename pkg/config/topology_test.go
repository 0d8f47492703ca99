package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// [topology]: off by default; rails as an array of tables, in order; the
// node's labels by the file and by flags; every bad value refused with its
// key named.
func TestTopologySection(t *testing.T) {
	if d := Default().Topology; d.FeaturesFile != "" || len(d.Rails) != 0 || d.Block != "" || d.Rack != "" {
		t.Fatalf("defaults %+v: the feature file and rails are opt-in", d)
	}
	cfg, err := Load(writeConfig(t, `[topology]
block = "su-1"
rack = "r07"
features_file = "/etc/kubernetes/node-feature-discovery/features.d/rdma-cdi"
[[topology.rails]]
rail = "rail0"
ibdev = "mlx5_1"
[[topology.rails]]
rail = "rail1"
netdev = "eth2"
pci = "0000:54:00.*"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Rail{{Rail: "rail0", IBDev: "mlx5_1"}, {Rail: "rail1", NetDev: "eth2", PCI: "0000:54:00.*"}}
	if topo := cfg.Topology; !slices.Equal(topo.Rails, want) || topo.Block != "su-1" || topo.Rack != "r07" || !strings.HasSuffix(topo.FeaturesFile, "/rdma-cdi") {
		t.Fatalf("file: %+v", topo)
	}
	for body, want := range map[string]string{
		"[[topology.rails]]\nrail = \"rail0\"\n":                                          "topology.rails[0] (rail0): no selector",
		"[[topology.rails]]\nrail = \"\"\nibdev = \"mlx5_1\"\n":                           `topology.rails[0] (): rail ""`,
		"[[topology.rails]]\nrail = \"rail 0\"\nibdev = \"mlx5_1\"\n":                     `rail "rail 0": want a name of 1 to 64 characters, no space`,
		"[[topology.rails]]\nrail = \"" + strings.Repeat("r", 65) + "\"\nibdev = \"m\"\n": "want a name of 1 to 64 characters",
		"[[topology.rails]]\nrail = \"r\"\npci = \"0000:[54\"\n":                          `topology.rails[0] (r): pci "0000:[54": syntax error in pattern`,
		"[[topology.rails]]\nrail = \"r\"\nibdev = \"m\"\nnic = \"mlx5_1\"\n":             "unknown key topology.rails.nic",
		"[topology]\nblock = \"-b1\"\n":                                                   `topology.block "-b1": want a label value`,
		"[topology]\nrack = \"" + strings.Repeat("r", 64) + "\"\n":                        "topology.rack",
		"[topology]\nrack = \"r/7\"\n":                                                    `topology.rack "r/7"`,
		"[topology]\nfeatures_file = \"features.d/rdma-cdi\"\n":                           "topology.features_file \"features.d/rdma-cdi\": want an absolute path",
		"[topology]\nfeatures_file = \"/etc/features.d/.rdma-cdi\"\n":                     "NFD ignores a file whose name starts with '.'",
		"[cdi]\nvendor = \"RDMA_Example\"\n[topology]\nfeatures_file = \"/f\"\n":          `cdi.vendor "RDMA_Example" is the labels' prefix`,
	} {
		if _, err := Load(writeConfig(t, body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", body, err, want)
		}
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse([]string{"--topology-block=b2", "--topology-rack=r1", "--topology-features-file=/run/features.d/rdma"}); err != nil {
		t.Fatal(err)
	}
	cfg = Default()
	if err := ApplyFlags(fs, &cfg); err != nil || cfg.Topology.Block != "b2" || cfg.Topology.Rack != "r1" || cfg.Topology.FeaturesFile != "/run/features.d/rdma" {
		t.Fatalf("flags: %+v, %v", cfg.Topology, err)
	}
}

// A rail's selectors are globs, and every one it sets must match.
func TestRailMatches(t *testing.T) {
	netdevs := []string{"eth1", "eth9"}
	for _, c := range []struct {
		rail Rail
		want bool
	}{
		{Rail{IBDev: "mlx5_1"}, true},
		{Rail{IBDev: "mlx5_[1-4]"}, true},
		{Rail{IBDev: "mlx5_1?"}, false},
		{Rail{NetDev: "eth9"}, true},
		{Rail{NetDev: "eth2"}, false},
		{Rail{PCI: "0000:54:00.*"}, true},
		{Rail{IBDev: "mlx5_1", PCI: "0000:70:*"}, false},
		{Rail{IBDev: "mlx5_*", NetDev: "eth1", PCI: "0000:54:00.0"}, true},
	} {
		if got := c.rail.Matches("mlx5_1", "0000:54:00.0", netdevs); got != c.want {
			t.Errorf("%+v matches mlx5_1 (0000:54:00.0, eth1, eth9): %v, want %v", c.rail, got, c.want)
		}
	}
}
