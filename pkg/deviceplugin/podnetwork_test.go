package deviceplugin

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
)

// podNetNode is twoSocket with addresses on its netdevs and mlx5_4 on
// InfiniBand (no netdev in a pod).
func podNetNode() model.Node {
	node := twoSocket()
	node.Devices[4].Ports[0].LinkLayer = model.LinkLayerInfiniBand
	for i := range 4 {
		name := node.Devices[i].Ports[0].NetDev
		node.NetDevs = append(node.NetDevs, model.NetDev{Name: name,
			Addrs: []netip.Prefix{netip.MustParsePrefix("10.0." + string(rune('0'+i)) + ".1/24")}})
	}
	return node
}

func podNetPool(t *testing.T) *podnetwork.Pool {
	t.Helper()
	ranges, err := podnetwork.ParseRanges(map[string]string{"eth1": "10.0.1.100-10.0.1.101", "eth2": "10.0.2.100/30", "eth3": "10.0.3.100-10.0.3.101"})
	if err != nil {
		t.Fatal(err)
	}
	return &podnetwork.Pool{Ranges: ranges, InUse: map[netip.Addr]bool{}}
}

func describe(as []podnetwork.Attachment) string {
	var parts []string
	for _, a := range as {
		parts = append(parts, a.Device+" "+a.HostNetDev+" "+string(a.Mode)+" "+a.PodInterface+" "+a.Addrs[0].String())
	}
	return strings.Join(parts, "; ")
}

func TestPodAttachments(t *testing.T) {
	shared := config.Resource{Name: "rdma/hca", Mode: config.ModeShared, MaxPods: 10}
	resources := []config.Resource{shared, exclusive}
	cfg := config.Default()

	// A shared unit gives every HCA of the pool: a sub-interface on each
	// RoCE one, with the node range's first free address (a CIDR's own network address
	// is never handed out) and the host
	// subnet's prefix length; the InfiniBand mlx5_4 gets none.
	pool := podNetPool(t)
	got, err := PodAttachments(podNetNode(), cfg, resources, map[string][]string{"rdma/hca": {"hca-4"}, "gpu": {"0"}}, pool)
	want := "mlx5_1 eth1 sub-interface net1 10.0.1.100/24; mlx5_2 eth2 sub-interface net2 10.0.2.101/24; mlx5_3 eth3 sub-interface net3 10.0.3.100/24"
	if err != nil || describe(got) != want {
		t.Fatalf("shared unit: %s, %v\nwant %s", describe(got), err, want)
	}

	// An exclusive unit of an HCA the shared unit also gave counts once,
	// and takes the next free address.
	for _, a := range got {
		pool.InUse[a.Addrs[0].Addr()] = true
	}
	got, err = PodAttachments(podNetNode(), cfg, resources, map[string][]string{"rdma/hca": {"hca-1"}, exclusive.Name: {"mlx5_2"}}, pool)
	if err != nil || len(got) != 3 || got[0].Addrs[0].String() != "10.0.1.101/24" {
		t.Fatalf("second pod: %s, %v", describe(got), err)
	}

	// A range used up fails the pod, naming the HCA and its netdev.
	_, err = PodAttachments(podNetNode(), cfg, resources, map[string][]string{exclusive.Name: {"mlx5_3"}}, &podnetwork.Pool{Ranges: pool.Ranges, InUse: map[netip.Addr]bool{netip.MustParseAddr("10.0.3.100"): true, netip.MustParseAddr("10.0.3.101"): true}})
	if err == nil || !strings.Contains(err.Error(), "mlx5_3 (eth3)") {
		t.Errorf("exhausted range: %v", err)
	}

	// A unit that maps to no healthy HCA fails as Allocate would.
	sick := podNetNode()
	sick.Devices[2].Ports[0].State = "DOWN"
	if _, err := PodAttachments(sick, cfg, resources, map[string][]string{exclusive.Name: {"mlx5_2"}}, podNetPool(t)); err == nil || !strings.Contains(err.Error(), "unhealthy") {
		t.Errorf("unhealthy HCA: %v", err)
	}

	// A pod holding none of the served resources gets nothing.
	if got, err := PodAttachments(podNetNode(), cfg, resources, map[string][]string{"gpu": {"0"}}, podNetPool(t)); err != nil || len(got) != 0 {
		t.Errorf("no RDMA unit: %v, %v", got, err)
	}
}

// Round 3, L3: a device plugin's pod has no config to name its interfaces,
// and its sub-interfaces were named after their host netdevs: a RoCE
// netdev called eth0 took the name of the pod's own CNI interface. They
// are net1, net2, ... in the node's order of the HCAs, whatever order the
// kubelet lists the units in.
func TestDevicePluginInterfacesAreNumberedInTheNodesOrder(t *testing.T) {
	node := podNetNode()
	node.DefaultRouteNetDev = "mgmt0" // mlx5_0's eth0 is a RoCE netdev like the rest
	pool := podNetPool(t)
	eth0, err := podnetwork.ParseRange("10.0.0.100-10.0.0.101")
	if err != nil {
		t.Fatal(err)
	}
	pool.Ranges["eth0"] = []podnetwork.Range{eth0}
	got, err := PodAttachments(node, config.Default(), []config.Resource{exclusive}, map[string][]string{exclusive.Name: {"mlx5_3", "mlx5_0"}}, pool)
	want := "mlx5_0 eth0 sub-interface net1 10.0.0.100/24; mlx5_3 eth3 sub-interface net2 10.0.3.100/24"
	if err != nil || describe(got) != want {
		t.Fatalf("%s, %v\nwant %s", describe(got), err, want)
	}
}
