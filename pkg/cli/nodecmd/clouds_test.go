package nodecmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// TestCloudFixtures runs list, nccl-env and generate on the GCP, Azure,
// GB200 and AMD nodes and checks what a user reads there: every port with
// its netdev and link layer, NCCL's HCA list and GID index, and a spec of
// one CDI device per HCA plus all, each with its uverbs node (and umad and
// issm: every port here has management datagrams).
func TestCloudFixtures(t *testing.T) {
	for _, tc := range []struct {
		fixture, linkLayer string
		hcas               []string // in NCCL_IB_HCA, in order
		// others are listed but not given to NCCL: the test has no network
		// namespace of the fixture's, so the default route nccl-env reads
		// is this machine's, and the container is given the others alone.
		others   []string
		gidIndex string // "" for none
	}{
		{"gcp-a3-ultra", "Ethernet", []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"}, nil, "3"},
		{"azure-ndv5", "InfiniBand", []string{"mlx5_ib0", "mlx5_ib1", "mlx5_ib2", "mlx5_ib3", "mlx5_ib4", "mlx5_ib5", "mlx5_ib6", "mlx5_ib7"}, nil, ""},
		{"gb200", "InfiniBand", []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}, []string{"mlx5_4"}, ""},
		{"amd-pollara", "Ethernet", []string{"ionic_0", "ionic_1", "ionic_2", "ionic_3", "ionic_4", "ionic_5", "ionic_6", "ionic_7"}, nil, "1"},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			topo, err := fixture.LoadBundled(tc.fixture)
			if err != nil {
				t.Fatal(err)
			}
			roots := fixtureRoots(t, tc.fixture)
			out, se, err := runCLI(t, append(roots, "--log-level=error", "list")...)
			if err != nil {
				t.Fatalf("list: %v\n%s", err, se)
			}
			for _, name := range tc.hcas {
				d, _ := topo.DeviceByName(name)
				want := name + " port 1 ==> " + d.Ports[0].NetDev + " "
				if !strings.Contains(out, want) || !strings.Contains(out, " ACTIVE "+tc.linkLayer+" ") {
					t.Errorf("list lacks %q on %s:\n%s", want, tc.linkLayer, out)
				}
			}
			if n := strings.Count(out, " port 1 ==> "); n != len(topo.Devices) {
				t.Errorf("%d ports listed, want %d", n, len(topo.Devices))
			}

			args := append(roots, "--log-level=error", "nccl-env", "--format", "conf")
			if tc.others != nil {
				args = append(args, "--devices", strings.Join(tc.hcas, ","))
			}
			for _, o := range tc.others {
				if !strings.Contains(out, o+" port 1 ==> ") {
					t.Errorf("list lacks %s:\n%s", o, out)
				}
			}
			conf, se, err := runCLI(t, args...)
			if err != nil {
				t.Fatalf("nccl-env: %v\n%s", err, se)
			}
			var hca []string
			for _, h := range tc.hcas {
				hca = append(hca, h+":1")
			}
			if !strings.Contains(conf, "NCCL_IB_HCA="+strings.Join(hca, ",")+"\n") {
				t.Errorf("nccl-env: want NCCL_IB_HCA of %v:\n%s", tc.hcas, conf)
			}
			if got := strings.Contains(conf, "NCCL_IB_GID_INDEX="); got != (tc.gidIndex != "") || tc.gidIndex != "" && !strings.Contains(conf, "NCCL_IB_GID_INDEX="+tc.gidIndex+"\n") {
				t.Errorf("nccl-env: want GID index %q:\n%s", tc.gidIndex, conf)
			}

			dir := t.TempDir()
			spec := filepath.Join(dir, "rdma.json")
			if _, se, err := runCLI(t, append(roots, "--log-level=error", "generate", "--output", spec, "--format", "json")...); err != nil {
				t.Fatalf("generate: %v\n%s", err, se)
			}
			data, err := os.ReadFile(spec)
			if err != nil {
				t.Fatal(err)
			}
			var s struct {
				Devices []struct {
					Name           string
					ContainerEdits struct{ DeviceNodes []struct{ Path string } }
				}
			}
			if err := json.Unmarshal(data, &s); err != nil {
				t.Fatal(err)
			}
			if len(s.Devices) != len(topo.Devices)+1 {
				t.Fatalf("%d CDI devices, want %d and all", len(s.Devices), len(topo.Devices))
			}
			for _, d := range s.Devices {
				if d.Name == "all" {
					continue
				}
				td, ok := topo.DeviceByName(d.Name)
				if !ok {
					t.Errorf("CDI device %s is no HCA of the node", d.Name)
					continue
				}
				var nodes []string
				for _, n := range d.ContainerEdits.DeviceNodes {
					nodes = append(nodes, filepath.Base(n.Path))
				}
				umad := *td.Ports[0].Umad
				want := []string{"uverbs" + strconv.Itoa(*td.Uverbs), "umad" + strconv.Itoa(umad), "issm" + strconv.Itoa(umad)}
				if !slices.Equal(nodes, want) {
					t.Errorf("%s: device nodes %v, want %v", d.Name, nodes, want)
				}
			}
		})
	}
}
