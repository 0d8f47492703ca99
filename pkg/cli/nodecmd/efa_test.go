package nodecmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// An AWS p5 node (32 EFA devices, link layer "Unknown") is listed, where
// discovery used to fail whole: each EFA port, with no netdev and the
// link layer unspecified.
func TestListAWSP5(t *testing.T) {
	out, stderr, err := runCLI(t, append(fixtureRoots(t, "aws-p5"), "--log-level=error", "list")...)
	if err != nil {
		t.Fatalf("list: %v\n%s", err, stderr)
	}
	ports := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "rdmap") && strings.Contains(line, " port 1 ==> ") {
			ports++
			if !strings.HasSuffix(line, "==> <none> (?) ACTIVE unspecified 100 Gb/sec (4X EDR)") {
				t.Errorf("EFA port line %q", line)
			}
		}
	}
	if ports != 32 {
		t.Errorf("%d EFA ports listed, want 32:\n%s", ports, out)
	}
	for _, want := range []string{"rdmap79s0 port 1 ==> ", "rdmap201s0 port 1 ==> ", "rdmap79s0  0000:4f:00.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("list output lacks %q:\n%s", want, out)
		}
	}
}

// generate on the p5 node writes a spec of its 32 EFA devices plus all,
// each with its uverbs node, and no NCCL_IB_* anywhere: NCCL's IB
// transport does not use EFA ports.
func TestGenerateAWSP5(t *testing.T) {
	roots := fixtureRoots(t, "aws-p5")
	dir := t.TempDir()
	spec := filepath.Join(dir, "rdma.json")
	if _, se, err := runCLI(t, append(roots, "--log-level=error", "generate", "--output", spec, "--format", "json")...); err != nil {
		t.Fatalf("generate: %v\n%s", err, se)
	}
	data, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "NCCL_IB_") {
		t.Errorf("the spec sets NCCL_IB_* on an EFA node:\n%s", data)
	}
	var s struct {
		Devices []struct {
			Name           string
			ContainerEdits struct {
				DeviceNodes []struct{ Path string }
			}
		}
	}
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Devices) != 33 {
		t.Fatalf("%d CDI devices, want 33 (32 EFA and all)", len(s.Devices))
	}
	topo, err := fixture.LoadBundled("aws-p5")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range s.Devices {
		if d.Name == "all" {
			continue
		}
		td, ok := topo.DeviceByName(d.Name)
		if !ok {
			t.Errorf("CDI device %s is no EFA device of the node", d.Name)
			continue
		}
		var nodes []string
		for _, n := range d.ContainerEdits.DeviceNodes {
			nodes = append(nodes, n.Path)
		}
		want := "/dev/infiniband/uverbs" + strconv.Itoa(*td.Uverbs)
		if len(nodes) != 1 || nodes[0] != want {
			t.Errorf("%s: device nodes %v, want %s alone (EFA has no umad)", d.Name, nodes, want)
		}
	}
	so, se, err := runCLI(t, append(roots, "cdi", "list", "--spec-dir", dir)...)
	if err != nil {
		t.Fatalf("cdi list: %v\n%s", err, se)
	}
	if got := lines(so); len(got) != 33 || got[0] != "rdma.example.com/hca=all" {
		t.Errorf("the CDI library reads %d devices from the spec, want 33: %v", len(got), got)
	}
}

// A mixed node: one HCA's sysfs broken (a malformed GID) beside healthy
// ones. list and generate still serve the healthy ones, and say which one
// was left out and why.
func TestOneBrokenHCADoesNotCostTheNode(t *testing.T) {
	tr := fixture.BuildBundledTrees(t, "seed002", false)
	gid := filepath.Join(tr.Sys, "class/infiniband/mlx5_3/ports/1/gids/3")
	if err := os.Chmod(gid, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gid, []byte("not-a-gid\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(tr.Dir, "config.toml")
	if err := os.WriteFile(cfg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	roots := []string{"--sysfs-root", tr.Sys, "--dev-root", tr.Dev, "--config", cfg}
	out, stderr, err := runCLI(t, append(roots, "list")...)
	if err != nil {
		t.Fatalf("list: %v\n%s", err, stderr)
	}
	if strings.Contains(out, "mlx5_3 port") || !strings.Contains(out, "mlx5_2 port 1 ==> eth2") || !strings.Contains(out, "mlx5_4 port 1 ==> eth4") {
		t.Errorf("list: want every HCA but mlx5_3:\n%s", out)
	}
	if !strings.Contains(stderr, "RDMA device mlx5_3") || !strings.Contains(stderr, "gids/3: malformed GID") {
		t.Errorf("stderr does not say mlx5_3 was left out and why:\n%s", stderr)
	}
	dir := t.TempDir()
	if _, se, err := runCLI(t, append(roots, "--log-level=error", "generate", "--output", filepath.Join(dir, "x.yaml"))...); err != nil {
		t.Fatalf("generate: %v\n%s", err, se)
	}
	so, _, err := runCLI(t, append(roots, "cdi", "list", "--spec-dir", dir)...)
	if err != nil || len(lines(so)) != 9 || strings.Contains(so, "hca=mlx5_3\n") {
		t.Errorf("generate: %v; devices %v, want all and the 8 readable HCAs", err, lines(so))
	}
}
