package node

// End-to-end tests of an AWS EFA node (the aws-p5 fixture: 32 EFA devices
// whose ports the kernel shows with link layer "Unknown") and of a node
// with one broken HCA beside healthy ones, in real podman: discovery used
// to fail whole on both, so generate wrote no spec and nothing was served.

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// An EFA device given by CDI: its uverbs node and rdma_cm (EFA has no umad
// or issm), memlock raised by the spec's hook, and no NCCL_IB_* in
// /etc/nccl.conf (NCCL's IB transport skips EFA ports).
func TestCDIPodmanEFADevice(t *testing.T) {
	n := e2e.SharedFixtureNode(t, "aws-p5")
	s := n.GenerateSpec(t, e2e.SpecOptions{})
	spec, err := cdi.ReadSpec(s.Path, 0)
	if err != nil {
		t.Fatalf("the CDI library rejects %s: %v", s.Path, err)
	}
	if len(spec.Devices) != 33 {
		t.Errorf("the spec has %d devices, want 33 (32 EFA and all)", len(spec.Devices))
	}
	if data := s.Data(t); strings.Contains(data, "NCCL_IB_") {
		t.Errorf("the spec of an EFA node sets NCCL_IB_*:\n%s", data)
	}
	p := e2e.Podman(t)
	cmd := p.Command("run", "--rm", "--device", s.Device("rdmap79s0"), e2e.BB.Ref, "sh", "-c",
		"ls -l /dev/infiniband; echo memlock=$(ulimit -l); echo --- nccl.conf; cat /etc/nccl.conf 2>/dev/null; true")
	underMemlock(t, cmd, 65536, 8388608)
	so, se, err := e2e.Run(cmd)
	if err != nil {
		hookLog, _ := os.ReadFile(n.HookLog)
		t.Fatalf("%v\n%s\nhook log: %s", err, se, hookLog)
	}
	ls, conf, _ := strings.Cut(so, "--- nccl.conf\n")
	ls, memlock, _ := strings.Cut(ls, "memlock=")
	e2e.CheckNodes(t, "=rdmap79s0", e2e.ParseLsDev(t, ls), e2e.WantNodes(t, n.Topo, "uverbs0", "rdma_cm"))
	if m := strings.TrimSpace(memlock); m != "8192" && m != "unlimited" {
		t.Errorf("memlock %s KiB: the spec's hook did not raise it", m)
	}
	if strings.Contains(conf, "NCCL_IB_") {
		t.Errorf("/etc/nccl.conf of an EFA container sets NCCL_IB_*:\n%s", conf)
	}
}

// A node with one HCA whose sysfs is broken (a malformed GID) beside
// healthy ones: generate writes a spec of the healthy ones and says which
// was left out, and a container gets a healthy HCA as usual.
func TestCDIPodmanBrokenHCABesideHealthyOnes(t *testing.T) {
	n := e2e.NewFixtureNode(t, "seed002")
	gid := filepath.Join(n.Sys, "class/infiniband/mlx5_3/ports/1/gids/3")
	if err := os.Chmod(gid, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gid, []byte("not-a-gid\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := n.GenerateSpec(t, e2e.SpecOptions{})
	if _, se, err := s.Generate(t); err != nil || !strings.Contains(se, "RDMA device mlx5_3") || !strings.Contains(se, "malformed GID") {
		t.Errorf("generate again: %v; stderr does not name mlx5_3 and its GID:\n%s", err, se)
	}
	spec, err := cdi.ReadSpec(s.Path, 0)
	if err != nil {
		t.Fatalf("the CDI library rejects %s: %v", s.Path, err)
	}
	var names []string
	for _, d := range spec.Devices {
		names = append(names, d.Name)
	}
	if len(names) != 9 || slices.Contains(names, "mlx5_3") || !slices.Contains(names, "mlx5_1") {
		t.Errorf("spec devices %v, want all and the 8 readable HCAs", names)
	}
	so, se, err := e2e.Podman(t).Run("--device", s.Device("mlx5_1"), e2e.BB.Ref, "ls", "-l", "/dev/infiniband")
	if err != nil {
		t.Fatalf("%v\n%s", err, se)
	}
	e2e.CheckNodes(t, "=mlx5_1", e2e.ParseLsDev(t, so), e2e.WantNodes(t, n.Topo, e2e.MLX5_1Nodes...))
}
