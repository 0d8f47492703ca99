package deviceplugin

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// sriovNode: PF mlx5_0 with VFs mlx5_2 and mlx5_3, PF mlx5_1 without VFs,
// and eth9 carrying the default route (so NCCL's rule leaves no HCA out).
func sriovNode() model.Node {
	pf := hca("mlx5_0", 0, "pci0000:3a", "ens1f0np0", 0)
	pf.PCIAddress, pf.NumVFs = "0000:3b:00.0", 2
	pf1 := hca("mlx5_1", 0, "pci0000:3a", "ens1f1np1", 1)
	pf1.PCIAddress = "0000:3b:00.1"
	vf := func(name, addr, netdev string, minor uint32) model.Device {
		d := hca(name, 0, "pci0000:3a", netdev, minor)
		d.PCIAddress, d.PhysFn = addr, "0000:3b:00.0"
		return d
	}
	return model.Node{
		Devices:            []model.Device{pf, pf1, vf("mlx5_2", "0000:3b:00.2", "ens1f0v0", 2), vf("mlx5_3", "0000:3b:00.3", "ens1f0v1", 3)},
		DefaultRouteNetDev: "eth9",
	}
}

func TestSelectSRIOVFunctions(t *testing.T) {
	for _, c := range []struct {
		f    config.Functions
		node model.Node
		want []string
	}{
		{config.FunctionsAuto, sriovNode(), []string{"mlx5_2", "mlx5_3"}},
		{config.FunctionsVFs, sriovNode(), []string{"mlx5_2", "mlx5_3"}},
		{config.FunctionsPFs, sriovNode(), []string{"mlx5_0", "mlx5_1"}},
		{config.FunctionsAll, sriovNode(), []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}},
		// No VF on the node (or a VM's VF without physfn): as before.
		{config.FunctionsAuto, twoSocket(), []string{"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"}},
		{config.FunctionsVFs, twoSocket(), nil},
	} {
		r := exclusive
		r.Functions = c.f
		if got := Select(c.node, config.Default().NCCL, r).names(); !slices.Equal(got, c.want) {
			t.Errorf("functions %q: selected %v, want %v", c.f, got, c.want)
		}
	}
	// The default narrows to VFs only when the resource's own selectors
	// picked one: a resource for the VF-less PF still gets it.
	r := exclusive
	r.IncludeHCAs = []string{"mlx5_1"}
	if got := Select(sriovNode(), config.Default().NCCL, r).names(); !slices.Equal(got, []string{"mlx5_1"}) {
		t.Errorf("include mlx5_1: selected %v", got)
	}
}

func TestPFDownMakesItsVFsUnhealthy(t *testing.T) {
	node := sriovNode()
	node.Devices[0].Ports[0].State = "DOWN"
	r := exclusive
	r.Functions = config.FunctionsAll
	pool := Select(node, config.Default().NCCL, r)
	for name, want := range map[string]string{
		"mlx5_0": "no ACTIVE port", "mlx5_1": "",
		"mlx5_2": "its PF mlx5_0 (0000:3b:00.0) has no ACTIVE port", "mlx5_3": "its PF mlx5_0 (0000:3b:00.0) has no ACTIVE port",
	} {
		if h, _ := pool.HCA(name); h.Unhealthy != want {
			t.Errorf("%s unhealthy %q, want %q", name, h.Unhealthy, want)
		}
	}
	for _, d := range pool.Devices() {
		if want := map[bool]string{true: pluginapi.Healthy, false: pluginapi.Unhealthy}[d.ID == "mlx5_1"]; d.Health != want {
			t.Errorf("ListAndWatch: %s %s, want %s", d.ID, d.Health, want)
		}
	}
}

func TestPFAndVFNeverGoToDifferentPods(t *testing.T) {
	r := exclusive
	r.Functions = config.FunctionsAll
	pool := Select(sriovNode(), config.Default().NCCL, r)
	all := []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}
	cases := []struct {
		name      string
		available []string
		size      int
		want      []string
	}{
		{"nothing held", all, 1, []string{"mlx5_0"}},
		{"PF held: its VFs are passed over", []string{"mlx5_1", "mlx5_2", "mlx5_3"}, 2, []string{"mlx5_1"}},
		{"a VF held: its PF is passed over", []string{"mlx5_0", "mlx5_1", "mlx5_3"}, 2, []string{"mlx5_1", "mlx5_3"}},
	}
	for _, c := range cases {
		if got := pool.Preferred(c.available, nil, c.size); !slices.Equal(got, c.want) {
			t.Errorf("%s: preferred %v, want %v", c.name, got, c.want)
		}
	}

	// The kubelet may fall back to a unit of its own choosing: Allocate
	// refuses it while the picture the preferred call gave is fresh.
	s := newServer(r.Name, logrus.New(), nil)
	s.update(pool, Target{Vendor: "rdma.example.com", Class: "hca"})
	clock := time.Unix(1000, 0)
	s.now = func() time.Time { return clock }
	ctx := context.Background()
	pref := &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: []string{"mlx5_1", "mlx5_2", "mlx5_3"}, AllocationSize: 1},
	}}
	if _, err := s.GetPreferredAllocation(ctx, pref); err != nil {
		t.Fatal(err)
	}
	alloc := func(ids ...string) error {
		_, err := s.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
		return err
	}
	err := alloc("mlx5_2")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "mlx5_2 shares its port with mlx5_0, which another container holds") {
		t.Errorf("VF of a held PF: %v", err)
	}
	if err := alloc("mlx5_1"); err != nil {
		t.Errorf("unrelated PF: %v", err)
	}
	clock = clock.Add(heldFresh + time.Second)
	if err := alloc("mlx5_2"); err != nil {
		t.Errorf("after the picture went stale Allocate must not guess: %v", err)
	}
}
