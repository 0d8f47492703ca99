package deviceplugin

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// hca builds a one-port RoCE device as discovery reports it.
func hca(name string, numa int, root, netdev string, minor uint32) model.Device {
	return model.Device{
		Name: name, NUMANode: numa, PCIeRoot: root, PCIVendor: "0x15b3", PCIDevice: "0x101d", Driver: "mlx5_core",
		Verbs: &model.CharDevice{Path: "/dev/infiniband/uverbs" + string(rune('0'+minor)), Major: 231, Minor: 192 + minor},
		Ports: []model.Port{{Number: 1, State: "ACTIVE", LinkLayer: model.LinkLayerEthernet, NetDev: netdev,
			Umad: &model.CharDevice{Path: "/dev/infiniband/umad" + string(rune('0'+minor)), Major: 231, Minor: minor}}},
	}
}

// twoSocket is the two-socket fixture's node: mlx5_0 carries the default
// route; socket 1 has mlx5_2 and mlx5_3 behind one root, mlx5_4 behind another.
func twoSocket() model.Node {
	return model.Node{
		Devices: []model.Device{
			hca("mlx5_0", 0, "pci0000:00", "eth0", 0), hca("mlx5_1", 0, "pci0000:15", "eth1", 1),
			hca("mlx5_2", 1, "pci0000:c0", "eth2", 2), hca("mlx5_3", 1, "pci0000:c0", "eth3", 3),
			hca("mlx5_4", 1, "pci0000:e0", "eth4", 4),
		},
		RDMACM:             &model.CharDevice{Path: "/dev/infiniband/rdma_cm", Major: 10, Minor: 58},
		DefaultRouteNetDev: "eth0",
	}
}

var exclusive = config.Resource{Name: "rdma.example.com/hca", Mode: config.ModeExclusive}

func TestSelectIsNCCLsSetWhateverThePortState(t *testing.T) {
	node := twoSocket()
	node.Devices[2].Ports[0].State = "DOWN"
	node.Devices[3].Verbs.NodeMissing = true
	pool := Select(node, config.Default().NCCL, config.DefaultResource())
	if got := pool.names(); !slices.Equal(got, []string{"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"}) {
		t.Fatalf("selected %v; want every HCA but the default-route mlx5_0", got)
	}
	for name, want := range map[string]string{"mlx5_1": "", "mlx5_2": "no ACTIVE port", "mlx5_3": "/dev/infiniband/uverbs3 is missing"} {
		if h, _ := pool.HCA(name); h.Unhealthy != want {
			t.Errorf("%s unhealthy %q, want %q", name, h.Unhealthy, want)
		}
	}
}

func TestSelectors(t *testing.T) {
	node := twoSocket()
	node.Devices[4].Ports[0].LinkLayer = model.LinkLayerInfiniBand
	node.Devices[1].PCIDevice = "0x1017"
	cases := []struct {
		r    config.Resource
		want []string
	}{
		{config.Resource{IncludeHCAs: []string{"mlx5_0", "mlx5_3:1"}}, []string{"mlx5_0", "mlx5_3"}},
		{config.Resource{ExcludeHCAs: []string{"mlx5_2"}}, []string{"mlx5_1", "mlx5_3", "mlx5_4"}}, // the default-route rule stays
		{config.Resource{LinkLayers: []string{"InfiniBand"}}, []string{"mlx5_4"}},
		{config.Resource{PCIDevices: []string{"1017"}}, []string{"mlx5_1"}},
		{config.Resource{PCIVendors: []string{"0X15B3"}, Drivers: []string{"mlx4_core"}}, nil},
	}
	for _, c := range cases {
		if got := Select(node, config.Default().NCCL, c.r).names(); !slices.Equal(got, c.want) && len(got)+len(c.want) > 0 {
			t.Errorf("%+v: selected %v, want %v", c.r, got, c.want)
		}
	}
}

func TestSharedUnits(t *testing.T) {
	r := config.Resource{Name: "rdma/hca", Mode: config.ModeShared, MaxPods: 3}
	pool := Select(twoSocket(), config.Default().NCCL, r)
	devs := pool.Devices()
	if len(devs) != 3 || devs[0].ID != "hca-0" || devs[2].ID != "hca-2" || devs[1].Health != pluginapi.Healthy {
		t.Fatalf("units %v", devs)
	}
	if nodes := devs[0].Topology.GetNodes(); len(nodes) != 2 {
		t.Errorf("a pool across both sockets spans both: %v", nodes)
	}
	hcas, err := pool.HCAsFor([]string{"hca-1"})
	if err != nil || !slices.Equal(hcaNames(hcas), []string{"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"}) {
		t.Fatalf("a shared unit gives %v, %v; want every selected HCA", hcaNames(hcas), err)
	}
	for _, ids := range [][]string{nil, {"hca-3"}, {"mlx5_1"}, {"hca-01"}} {
		if _, err := pool.HCAsFor(ids); err == nil {
			t.Errorf("units %q accepted", ids)
		}
	}
	down := twoSocket()
	for i := range down.Devices {
		down.Devices[i].Ports[0].State = "DOWN"
	}
	sick := Select(down, config.Default().NCCL, r)
	if d := sick.Devices(); d[0].Health != pluginapi.Unhealthy {
		t.Errorf("every port down: units %s", d[0].Health)
	}
	if _, err := sick.HCAsFor([]string{"hca-0"}); err == nil || !strings.Contains(err.Error(), "no healthy HCA") {
		t.Errorf("allocating from a pool without a healthy HCA: %v", err)
	}
	if d := Select(model.Node{}, config.Default().NCCL, r).Devices(); len(d) != 0 {
		t.Errorf("a node without HCAs advertises %d units", len(d))
	}
}

func TestExclusiveUnits(t *testing.T) {
	node := twoSocket()
	node.Devices[3].Ports[0].State = "DOWN"
	node.Devices[4].NUMANode = -1
	pool := Select(node, config.Default().NCCL, exclusive)
	devs := pool.Devices()
	got := map[string]string{}
	for _, d := range devs {
		got[d.ID] = strings.TrimSpace(d.Health + " " + strings.Repeat("numa", len(d.Topology.GetNodes())))
	}
	want := map[string]string{"mlx5_1": "Healthy numa", "mlx5_2": "Healthy numa", "mlx5_3": "Unhealthy numa", "mlx5_4": "Healthy"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("units %v, want %v", got, want)
	}
	if devs[1].Topology.GetNodes()[0].ID != 1 {
		t.Errorf("mlx5_2 topology %v, want NUMA 1", devs[1].Topology)
	}
	if _, err := pool.HCAsFor([]string{"mlx5_1", "mlx5_9"}); err == nil || !strings.Contains(err.Error(), "unknown device IDs mlx5_9") {
		t.Errorf("unknown ID: %v", err)
	}
	if _, err := pool.HCAsFor([]string{"mlx5_3"}); err == nil || !strings.Contains(err.Error(), "mlx5_3: no ACTIVE port") {
		t.Errorf("unhealthy ID: %v", err)
	}
	if _, err := pool.HCAsFor([]string{"mlx5_0"}); err == nil {
		t.Error("the management NIC, not in the pool, was allocated")
	}
}

func TestPreferredKeepsASocketThenARootTogether(t *testing.T) {
	pool := Select(twoSocket(), config.Default().NCCL, exclusive)
	all := []string{"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"}
	cases := []struct {
		available, must []string
		size            int
		want            []string
	}{
		{all, nil, 2, []string{"mlx5_2", "mlx5_3"}},           // one socket, one root
		{all, nil, 1, []string{"mlx5_1"}},                     // best fit: a lone HCA, pairs stay whole
		{all, nil, 3, []string{"mlx5_2", "mlx5_3", "mlx5_4"}}, // the socket that holds three
		{all, []string{"mlx5_4"}, 2, []string{"mlx5_4", "mlx5_2"}},
		{all, []string{"mlx5_1"}, 2, []string{"mlx5_1", "mlx5_4"}}, // socket 0 has no other; the lone root of socket 1 fits best
		{[]string{"mlx5_1", "mlx5_3", "mlx5_4"}, nil, 2, []string{"mlx5_3", "mlx5_4"}},
		{all, nil, 4, []string{"mlx5_2", "mlx5_3", "mlx5_4", "mlx5_1"}},
	}
	for _, c := range cases {
		if got := pool.Preferred(c.available, c.must, c.size); !slices.Equal(got, c.want) {
			t.Errorf("available %v must %v size %d: got %v, want %v", c.available, c.must, c.size, got, c.want)
		}
	}
	shared := Select(twoSocket(), config.Default().NCCL, config.DefaultResource())
	if got := shared.Preferred([]string{"hca-7", "hca-2", "hca-5"}, []string{"hca-5"}, 2); !slices.Equal(got, []string{"hca-5", "hca-7"}) {
		t.Errorf("shared units: %v", got)
	}
}

func TestResponses(t *testing.T) {
	pool := Select(twoSocket(), config.Default().NCCL, exclusive)
	hcas, _ := pool.HCAsFor([]string{"mlx5_2", "mlx5_3"})
	target := Target{Vendor: "rdma.example.com", Class: "hca", DevRoot: "/srv/dev", Allocation: config.AllocationCDIDevices}
	resp, err := target.Response(pool, hcas)
	if err != nil || len(resp.CdiDevices) != 2 || resp.CdiDevices[1].Name != "rdma.example.com/hca=mlx5_3" || len(resp.Devices) != 0 {
		t.Fatalf("CDI response %v, %v", resp, err)
	}
	target.Allocation = config.AllocationAnnotations
	resp, err = target.Response(pool, hcas)
	if err != nil || len(resp.CdiDevices) != 0 {
		t.Fatalf("annotations response %v, %v", resp, err)
	}
	if v := resp.Annotations["cdi.k8s.io/rdma-cdi_rdma.example.com-hca"]; v != "rdma.example.com/hca=mlx5_2,rdma.example.com/hca=mlx5_3" {
		t.Errorf("annotations %v", resp.Annotations)
	}
	var paths []string
	for _, d := range resp.Devices {
		paths = append(paths, d.HostPath+">"+d.ContainerPath+":"+d.Permissions)
	}
	want := []string{
		"/srv/dev/infiniband/uverbs2>/dev/infiniband/uverbs2:rw", "/srv/dev/infiniband/umad2>/dev/infiniband/umad2:rw",
		"/srv/dev/infiniband/uverbs3>/dev/infiniband/uverbs3:rw", "/srv/dev/infiniband/umad3>/dev/infiniband/umad3:rw",
		"/srv/dev/infiniband/rdma_cm>/dev/infiniband/rdma_cm:rw",
	}
	if !slices.Equal(paths, want) {
		t.Errorf("device specs:\n got %v\nwant %v", paths, want)
	}
}

// Grey conditions: an Unhealthy one on a selected port takes the HCA's
// unit out (Unhealthy, as a port down), a Degraded one leaves it offered;
// a condition on a port the resource does not select does not count, its
// PCIe link always does.
func TestPoolWithGrey(t *testing.T) {
	node := twoSocket()
	pool := Select(node, config.Default().NCCL, exclusive)
	grey := map[string][]health.Condition{
		"mlx5_1": {{Device: "mlx5_1", Port: 1, Level: health.LevelUnhealthy, Code: health.CodeLinkFlapping, Reason: "port 1 went down 3 times in 30m0s"}},
		"mlx5_2": {{Device: "mlx5_2", Level: health.LevelDegraded, Code: health.CodePCIeDegraded, Reason: "PCIe link at 8 GT/s x16"}},
		"mlx5_3": {{Device: "mlx5_3", Port: 2, Level: health.LevelUnhealthy, Code: health.CodeLinkErrors, Reason: "port 2: symbol_error"}},
	}
	withGrey := pool.WithGrey(grey)
	if h, _ := pool.HCA("mlx5_1"); !h.Healthy() {
		t.Fatal("WithGrey changed its receiver")
	}
	got := map[string]string{}
	for _, d := range withGrey.Devices() {
		got[d.ID] = d.Health
	}
	want := map[string]string{"mlx5_1": "Unhealthy", "mlx5_2": "Healthy", "mlx5_3": "Healthy", "mlx5_4": "Healthy"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("units %v, want %v", got, want)
	}
	if h, _ := withGrey.HCA("mlx5_2"); h.Degraded != "PCIe link at 8 GT/s x16" {
		t.Fatalf("mlx5_2 %+v", h)
	}
	if _, err := withGrey.HCAsFor([]string{"mlx5_1"}); err == nil || !strings.Contains(err.Error(), "went down 3 times") {
		t.Fatalf("allocating the flapping HCA: %v", err)
	}
	// A port already down says more than the grey condition.
	node.Devices[1].Ports[0].State = "DOWN"
	if h, _ := Select(node, config.Default().NCCL, exclusive).WithGrey(grey).HCA("mlx5_1"); h.Unhealthy != "no ACTIVE port" {
		t.Fatalf("down and flapping: %q", h.Unhealthy)
	}
}
