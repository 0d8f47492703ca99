package dradriver

import (
	"net/netip"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
)

// netConfig is one of the driver's opaque configs in an allocation.
func netConfig(source resourceapi.AllocationConfigSource, raw string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{Source: source, Requests: requests, DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: testDriver, Parameters: runtime.RawExtension{Raw: []byte(raw)}},
	}}
}

const header = `"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig"`

func TestClaimNetworkConfigClaimOverridesClass(t *testing.T) {
	c := claim("u1", result("hcas", testDriver, "mlx5-1"))
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{
		netConfig(resourceapi.AllocationConfigSourceClaim, `{`+header+`,"mtu":4200}`),
		netConfig(resourceapi.AllocationConfigSourceClass, `{`+header+`,"mode":"sub-interface","mtu":1500,"interfaceName":"net1"}`),
		netConfig(resourceapi.AllocationConfigSourceClaim, `{`+header+`,"mode":"none"}`, "other-request"),
	}
	got, err := ClaimNetworkConfig(c, testDriver, "hcas")
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode != v1alpha1.ModeSubInterface || got.MTU != 4200 || got.InterfaceName != "net1" {
		t.Fatalf("config %+v: want the class's mode and name, the claim's MTU, not the other request's mode", got)
	}
}

func TestPrepareClaimRefusesBadNetworkConfig(t *testing.T) {
	inv := BuildInventory(testNode(), config.Default().NCCL, nil)
	c := claim("u1", result("hcas", testDriver, "mlx5-1"))
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{
		netConfig(resourceapi.AllocationConfigSourceClaim, `{`+header+`,"addresses":["10.1.0.300/24"]}`),
	}
	r := PrepareClaim(c, testDriver, "node-a", "rdma.example.com/hca", inv)
	if r.Err == nil || !strings.Contains(r.Err.Error(), `addresses[0] "10.1.0.300/24"`) || !strings.Contains(r.Err.Error(), "config[0]") {
		t.Fatalf("prepare of a claim with a bad address: %v; want an error naming config[0] and addresses[0]", r.Err)
	}
}

// testPool is the node's two ranges the tests' nodes use: eth0's and
// eth1's (a move takes its address from the range, as a sub-interface does).
func testPool() *podnetwork.Pool {
	eth0, _ := podnetwork.ParseRange("10.0.0.200-10.0.0.201")
	eth1, _ := podnetwork.ParseRange("10.1.0.200-10.1.0.201")
	return &podnetwork.Pool{Ranges: map[string][]podnetwork.Range{"eth0": {eth0}, "eth1": {eth1}}}
}

func TestPodAttachments(t *testing.T) {
	node := testNode()
	node.NetDevs = []model.NetDev{
		{Name: "eth0", Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24")}},
		{Name: "eth1", Addrs: []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24")}},
	}
	inv := BuildInventory(node, config.Default().NCCL, nil)
	pod := types.UID("pod-1")
	reserve := func(c *resourceapi.ResourceClaim, uid types.UID) *resourceapi.ResourceClaim {
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: uid}}
		return c
	}
	share := types.UID("share-1")
	prepared := map[types.UID]PreparedClaim{
		// exclusive mlx5_1: moved; mlx5_0 (the default route's): a sub-interface.
		"c1": {Claim: reserve(claim("c1", result("a", testDriver, "mlx5-1"), result("a", testDriver, "mlx5-0")), pod), Devices: []kubeletplugin.Device{
			{Requests: []string{"a"}, DeviceName: "mlx5-1"}, {Requests: []string{"a"}, DeviceName: "mlx5-0"},
		}},
		// another pod's claim: not this pod's.
		"c2": {Claim: reserve(claim("c2", result("a", testDriver, "mlx5-1")), "pod-2"), Devices: []kubeletplugin.Device{
			{Requests: []string{"a"}, DeviceName: "mlx5-1", ShareID: &share},
		}},
		// the InfiniBand HCA: nothing.
		"c3": {Claim: reserve(claim("c3", result("a", testDriver, "mlx5-ib0")), pod), Devices: []kubeletplugin.Device{{Requests: []string{"a"}, DeviceName: "mlx5-ib0"}}},
	}
	pool := testPool()
	got, err := PodAttachments(prepared, pod, testDriver, inv, podnetwork.NodeFacts{Node: node, NodeIPsKnown: true}, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("attachments %+v, want two", got)
	}
	// Round 3, M3: the moved netdev gets the pod's own address, never the
	// node's 10.1.0.5, unless the operator says so.
	if got[0].Device != "mlx5_1" || got[0].Mode != v1alpha1.ModeMove || got[0].HostNetDev != "eth1" || len(got[0].Addrs) != 1 || got[0].Addrs[0].String() != "10.1.0.200/24" {
		t.Errorf("mlx5_1: %+v, want eth1 moved with 10.1.0.200/24 of its range", got[0])
	}
	kept, err := PodAttachments(prepared, pod, testDriver, inv, podnetwork.NodeFacts{Node: node, NodeIPsKnown: true, MoveKeepsAddresses: true}, testPool())
	if err != nil || len(kept) != 2 || kept[0].Mode != v1alpha1.ModeMove || kept[0].Addrs != nil {
		t.Errorf("with move_keeps_addresses: %+v %v, want eth1 moved with the node's addresses (none planned)", kept, err)
	}
	if got[1].Device != "mlx5_0" || got[1].Mode != v1alpha1.ModeSubInterface || len(got[1].Addrs) != 1 || got[1].Addrs[0].String() != "10.0.0.200/24" {
		t.Errorf("mlx5_0: %+v, want a sub-interface with 10.0.0.200/24 (eth0 carries the default route)", got[1])
	}

	// A claim two pods share gives each a sub-interface, never the netdev.
	c1 := prepared["c1"]
	c1.Claim.Status.ReservedFor = append(c1.Claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "q", UID: "pod-3"})
	pool = testPool()
	pool.Ranges["eth1"] = []podnetwork.Range{{First: netip.MustParseAddr("10.1.0.200"), Last: netip.MustParseAddr("10.1.0.200")}}
	got, err = PodAttachments(prepared, pod, testDriver, inv, podnetwork.NodeFacts{Node: node, NodeIPsKnown: true}, pool)
	if err != nil || len(got) != 2 || got[0].Mode != v1alpha1.ModeSubInterface {
		t.Fatalf("a claim reserved for two pods: %+v, %v; want sub-interfaces", got, err)
	}
	c1.Claim.Status.ReservedFor = c1.Claim.Status.ReservedFor[:1]
	pool = testPool()
	delete(pool.Ranges, "eth1")

	// The node's InternalIP on eth1 keeps it too; a forced move is refused.
	prepared["c1"].Claim.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{
		netConfig(resourceapi.AllocationConfigSourceClaim, `{`+header+`,"mode":"move"}`),
	}
	_, err = PodAttachments(prepared, pod, testDriver, inv, podnetwork.NodeFacts{Node: node, NodeIPs: []netip.Addr{netip.MustParseAddr("10.1.0.5")}, NodeIPsKnown: true}, pool)
	if err == nil || !strings.Contains(err.Error(), "the Node's address 10.1.0.5") {
		t.Fatalf("a move of the InternalIP's netdev: %v", err)
	}
	// Before the Node's addresses are known (round 3, L2: they were read
	// once and, on an API error, nothing was kept), no netdev is moved.
	_, err = PodAttachments(prepared, pod, testDriver, inv, podnetwork.NodeFacts{Node: node}, pool)
	if err == nil || !strings.Contains(err.Error(), "the Node's addresses are not known yet") {
		t.Fatalf("a move before the Node's addresses are known: %v", err)
	}
}

// A shareable HCA's allocation always has a share ID: a claim taking all
// its bandwidth holds it alone (moved), one taking part shares it.
func TestSharedUse(t *testing.T) {
	inv := BuildInventory(testNode(), config.Default().NCCL, nil)
	share := types.UID("s1")
	dev := kubeletplugin.Device{Requests: []string{"a"}, DeviceName: "mlx5-1", ShareID: &share}
	withBandwidth := func(gbps int64) *resourceapi.ResourceClaim {
		r := result("a", testDriver, "mlx5-1")
		r.ShareID = &share
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{apis.CapacityBandwidth: *resource.NewQuantity(gbps, resource.DecimalSI)}
		return claim("c", r)
	}
	if sharedUse(withBandwidth(200), testDriver, dev, inv) {
		t.Error("all 200 Gb/s of mlx5_1 counted as shared")
	}
	if !sharedUse(withBandwidth(40), testDriver, dev, inv) {
		t.Error("40 of 200 Gb/s counted as exclusive")
	}
	dev.ShareID = nil
	if sharedUse(withBandwidth(40), testDriver, dev, inv) {
		t.Error("a device without a share ID counted as shared")
	}
}

// A claim's own addresses and routes (round 3, H1: a tenant took the
// node's address, and one ARP request got two replies) are refused at
// prepare unless its DeviceClass's config allows them by prefix; the
// class's own addresses are the operator's and always taken. A mode the
// class sets is the operator's too: a claim may not ask for another (a
// class that gives pods no interface stays so).
func TestClaimAddressesOnlyWhereTheClassAllows(t *testing.T) {
	inv := BuildInventory(testNode(), config.Default().NCCL, nil)
	for name, tc := range map[string]struct {
		class, claim string
		wantErr      string
	}{
		"claim address, class allows none":    {``, `"addresses":["10.0.63.3/24"]`, "allows a claim no addresses or routes of its own"},
		"claim route, class allows none":      {``, `"routes":[{"destination":"10.9.0.0/16","gateway":"10.0.63.1"}]`, "routes[0] to 10.9.0.0/16"},
		"claim address outside the allowed":   {`"allowedPrefixes":["10.0.63.128/25"]`, `"addresses":["10.0.63.3/24"]`, "outside the DeviceClass's allowedPrefixes"},
		"route gateway outside the allowed":   {`"allowedPrefixes":["10.9.0.0/16"]`, `"routes":[{"destination":"10.9.1.0/24","gateway":"10.0.63.1"}]`, "routes[0]"},
		"claim grants itself":                 {``, `"allowedPrefixes":["0.0.0.0/0"],"addresses":["10.0.63.3/24"]`, "only a DeviceClass's config may set it"},
		"claim address inside the allowed":    {`"allowedPrefixes":["10.0.63.128/25"]`, `"addresses":["10.0.63.130/24"]`, ""},
		"class's own address":                 {`"addresses":["10.0.63.3/24"]`, `"mtu":4200`, ""},
		"class pins none, claim asks move":    {`"mode":"none"`, `"mode":"move"`, `mode "move": the DeviceClass sets mode "none"`},
		"class pins sub-interface, claim too": {`"mode":"sub-interface"`, `"mode":"sub-interface"`, ""},
		"class leaves the mode to the claim":  {`"mtu":4200`, `"mode":"move"`, ""},
	} {
		t.Run(name, func(t *testing.T) {
			c := claim("u1", result("hcas", testDriver, "mlx5-1"))
			c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{
				netConfig(resourceapi.AllocationConfigSourceClass, `{`+header+strings.TrimSuffix(","+tc.class, ",")+`}`),
				netConfig(resourceapi.AllocationConfigSourceClaim, `{`+header+`,`+tc.claim+`}`),
			}
			r := PrepareClaim(c, testDriver, "node-a", "rdma.example.com/hca", inv)
			switch {
			case tc.wantErr == "" && r.Err != nil:
				t.Fatalf("prepare: %v, want it to succeed", r.Err)
			case tc.wantErr != "" && (r.Err == nil || !strings.Contains(r.Err.Error(), tc.wantErr)):
				t.Fatalf("prepare: %v, want an error with %q", r.Err, tc.wantErr)
			}
		})
	}
}

// Round 3, L3: a claim that names no interface gets its host netdev's
// name, unless the pod cannot take that name: testNode's mlx5_0 sits on
// eth0, the pod's own CNI interface, and another claim may have asked for
// the host name of the next. Those take the first free net<N>.
func TestDefaultInterfaceNamesSkipWhatThePodHas(t *testing.T) {
	node := testNode()
	node.NetDevs = []model.NetDev{
		{Name: "eth0", Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24")}},
		{Name: "eth1", Addrs: []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24")}},
	}
	inv := BuildInventory(node, config.Default().NCCL, nil)
	pod := types.UID("pod-1")
	reserved := func(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: pod}}
		return c
	}
	named := reserved(claim("c0", result("a", testDriver, "mlx5-1")))
	named.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{
		netConfig(resourceapi.AllocationConfigSourceClaim, `{`+header+`,"mode":"sub-interface","interfaceName":"net1"}`),
	}
	prepared := map[types.UID]PreparedClaim{
		"c0": {Claim: named, Devices: []kubeletplugin.Device{{Requests: []string{"a"}, DeviceName: "mlx5-1"}}},
		"c1": {Claim: reserved(claim("c1", result("a", testDriver, "mlx5-0"))), Devices: []kubeletplugin.Device{{Requests: []string{"a"}, DeviceName: "mlx5-0"}}},
	}
	pool := func() *podnetwork.Pool {
		return &podnetwork.Pool{Ranges: map[string][]podnetwork.Range{
			"eth0": {{First: netip.MustParseAddr("10.0.0.200"), Last: netip.MustParseAddr("10.0.0.200")}},
			"eth1": {{First: netip.MustParseAddr("10.1.0.200"), Last: netip.MustParseAddr("10.1.0.200")}},
		}}
	}
	got, err := PodAttachments(prepared, pod, testDriver, inv, podnetwork.NodeFacts{Node: node, NodeIPsKnown: true}, pool())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range got {
		names = append(names, a.HostNetDev+"="+a.PodInterface)
	}
	if want := "eth1=net1 eth0=net2"; strings.Join(names, " ") != want {
		t.Fatalf("pod interfaces %v, want %s (eth0 is the pod's own, net1 the other claim's)", names, want)
	}

	// Without the collision the host netdev's name stays the default.
	delete(prepared, "c0")
	prepared["c2"] = PreparedClaim{Claim: reserved(claim("c2", result("a", testDriver, "mlx5-1"))), Devices: []kubeletplugin.Device{{Requests: []string{"a"}, DeviceName: "mlx5-1"}}}
	got, err = PodAttachments(prepared, pod, testDriver, inv, podnetwork.NodeFacts{Node: node, NodeIPsKnown: true}, pool())
	if err != nil || len(got) != 2 || got[1].PodInterface != "eth1" {
		t.Fatalf("eth1 without a collision: %+v, %v; want it named eth1 in the pod", got, err)
	}
}
