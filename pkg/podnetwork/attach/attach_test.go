package attach

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// nodeAndPod makes a "node" namespace holding eth3 (a veth, up, with
// 10.0.63.3/24, MTU 4200 and a route to 10.9.0.0/16 via 10.0.63.1) and an
// empty "pod" namespace holding eth0.
func nodeAndPod(t *testing.T) (Namespaces, *netlink.Handle, *netlink.Handle) {
	node, nodePath := fixture.NewNetNS(t)
	pod, podPath := fixture.NewNetNS(t)
	eth3 := hostNetDev(t, node, "eth3", "02:00:00:00:63:03", 4200)
	must(t, node.AddrAdd(eth3, &netlink.Addr{IPNet: mustNet("10.0.63.3/24")}))
	must(t, node.RouteAdd(&netlink.Route{LinkIndex: eth3.Attrs().Index, Dst: mustNet("10.9.0.0/16"), Gw: net.ParseIP("10.0.63.1")}))
	podEth0 := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "p-eth0"}
	must(t, pod.LinkAdd(podEth0))
	n, err := Open(nodePath, podPath)
	must(t, err)
	t.Cleanup(n.Close)
	return n, node, pod
}

// hostNetDev makes name in the node's namespace h, a "host netdev": one
// end of a veth pair, both ends up.
func hostNetDev(t *testing.T, h *netlink.Handle, name, mac string, mtu int) netlink.Link {
	t.Helper()
	hw, err := net.ParseMAC(mac)
	must(t, err)
	must(t, h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu, HardwareAddr: hw}, PeerName: "p-" + name}))
	for _, n := range []string{"p-" + name, name} {
		l, err := h.LinkByName(n)
		must(t, err)
		must(t, h.LinkSetUp(l))
	}
	l, err := h.LinkByName(name)
	must(t, err)
	return l
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustNet(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return n
}

// state is what a netdev looks like: name, MTU, up, addresses, routes.
func state(t *testing.T, h *netlink.Handle, name string) (mtu int, up bool, addrs []string, routes []string) {
	t.Helper()
	l, err := h.LinkByName(name)
	must(t, err)
	as, err := h.AddrList(l, netlink.FAMILY_V4)
	must(t, err)
	for _, a := range as {
		addrs = append(addrs, a.IPNet.String())
	}
	rs, err := h.RouteList(l, netlink.FAMILY_V4)
	must(t, err)
	for _, r := range rs {
		if r.Gw != nil {
			routes = append(routes, r.Dst.String()+" via "+r.Gw.String())
		}
	}
	return l.Attrs().MTU, l.Attrs().Flags&net.FlagUp != 0, addrs, routes
}

func TestMoveAndBack(t *testing.T) {
	ns, node, pod := nodeAndPod(t)
	a := podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"}
	r, err := Attach(ns, a)
	must(t, err)
	if _, err := node.LinkByName("eth3"); err == nil {
		t.Fatal("eth3 still in the node's namespace after the move")
	}
	mtu, up, addrs, routes := state(t, pod, "eth3")
	if mtu != 4200 || !up || !slices.Equal(addrs, []string{"10.0.63.3/24"}) || !slices.Equal(routes, []string{"10.9.0.0/16 via 10.0.63.1"}) {
		t.Fatalf("in the pod: mtu %d up %v addrs %v routes %v; want the node's 4200, up, 10.0.63.3/24, 10.9.0.0/16 via 10.0.63.1", mtu, up, addrs, routes)
	}
	must(t, Detach(ns, r))
	mtu, up, addrs, routes = state(t, node, "eth3")
	if mtu != 4200 || !up || !slices.Equal(addrs, []string{"10.0.63.3/24"}) || !slices.Equal(routes, []string{"10.9.0.0/16 via 10.0.63.1"}) {
		t.Fatalf("back on the node: mtu %d up %v addrs %v routes %v", mtu, up, addrs, routes)
	}
	if _, err := pod.LinkByName("eth3"); err == nil {
		t.Fatal("eth3 still in the pod after Detach")
	}
}

func TestMoveUnderAnotherNameWithStaticAddress(t *testing.T) {
	ns, node, pod := nodeAndPod(t)
	a := podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "roce0",
		Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.63.50/24")}, MTU: 1500}
	r, err := Attach(ns, a)
	must(t, err)
	// The pod's own address in the netdev's subnet (the default since
	// round 3, M3) still reaches the netdev's gateway: its routes go too.
	mtu, _, addrs, routes := state(t, pod, "roce0")
	if mtu != 1500 || !slices.Equal(addrs, []string{"10.0.63.50/24"}) || !slices.Equal(routes, []string{"10.9.0.0/16 via 10.0.63.1"}) {
		t.Fatalf("roce0 in the pod: mtu %d addrs %v routes %v; want 10.0.63.50/24 and 10.9.0.0/16 via 10.0.63.1", mtu, addrs, routes)
	}
	must(t, Detach(ns, r))
	if mtu, _, addrs, routes := state(t, node, "eth3"); mtu != 4200 || !slices.Equal(addrs, []string{"10.0.63.3/24"}) || !slices.Equal(routes, []string{"10.9.0.0/16 via 10.0.63.1"}) {
		t.Fatalf("eth3 back: mtu %d addrs %v routes %v", mtu, addrs, routes)
	}
}

func TestMoveFailureLeavesNothing(t *testing.T) {
	ns, node, pod := nodeAndPod(t)
	// eth0 exists in the pod: the move itself works, the rename there fails.
	a := podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth0"}
	if _, err := Attach(ns, a); err == nil {
		t.Fatal("Attach under a name the pod already has succeeded")
	}
	if mtu, up, addrs, routes := state(t, node, "eth3"); mtu != 4200 || !up || len(addrs) != 1 || len(routes) != 1 {
		t.Fatalf("eth3 after the failed move: mtu %d up %v addrs %v routes %v", mtu, up, addrs, routes)
	}
	links, _ := pod.LinkList()
	for _, l := range links {
		if l.Attrs().Name != "lo" && l.Attrs().Name != "eth0" && l.Attrs().Name != "p-eth0" {
			t.Errorf("left in the pod: %s", l.Attrs().Name)
		}
	}
}

func TestSubInterface(t *testing.T) {
	ns, node, pod := nodeAndPod(t)
	a := podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeSubInterface, PodInterface: "eth3",
		Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.63.200/24")}}
	r, err := Attach(ns, a)
	must(t, err)
	l, err := pod.LinkByName("eth3")
	must(t, err)
	if l.Type() != "macvlan" {
		t.Fatalf("eth3 in the pod is a %s, want a macvlan", l.Type())
	}
	if _, _, addrs, _ := state(t, pod, "eth3"); !slices.Equal(addrs, []string{"10.0.63.200/24"}) {
		t.Fatalf("sub-interface addresses %v", addrs)
	}
	if _, _, addrs, _ := state(t, node, "eth3"); !slices.Equal(addrs, []string{"10.0.63.3/24"}) {
		t.Fatalf("the host's eth3 changed: %v", addrs)
	}
	must(t, Detach(ns, r))
	if _, err := pod.LinkByName("eth3"); err == nil {
		t.Fatal("sub-interface left after Detach")
	}
	must(t, Detach(ns, r)) // idempotent
}

func TestMoveRefusesDefaultRoute(t *testing.T) {
	ns, node, _ := nodeAndPod(t)
	eth3, err := node.LinkByName("eth3")
	must(t, err)
	must(t, node.RouteAdd(&netlink.Route{LinkIndex: eth3.Attrs().Index, Gw: net.ParseIP("10.0.63.1")}))
	_, err = Attach(ns, podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"})
	if err == nil {
		t.Fatal("moved the default route's netdev")
	}
	if _, err := node.LinkByName("eth3"); err != nil {
		t.Fatal("eth3 left the node")
	}
}

// The node's own namespace named as a pod's (round 3, L4) is refused
// before anything is attached: under its own path and under another path
// to the same namespace (a bind mount, as the runtime pins sandboxes).
func TestOpenRefusesTheNodesNamespaceAsThePods(t *testing.T) {
	_, nodePath := fixture.NewNetNS(t)
	pinned := filepath.Join(t.TempDir(), "pinned")
	must(t, os.WriteFile(pinned, nil, 0o600))
	must(t, unix.Mount(nodePath, pinned, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(pinned, unix.MNT_DETACH) })
	for _, podPath := range []string{nodePath, pinned} {
		ns, err := Open(nodePath, podPath)
		if err == nil {
			ns.Close()
			t.Fatalf("Open(%s, %s): no error, want the node's namespace refused as a pod's", nodePath, podPath)
		}
		if !strings.Contains(err.Error(), "is the node's own") {
			t.Errorf("Open(%s, %s): %v, want it to say the namespace is the node's own", nodePath, podPath, err)
		}
	}
}

// linkNamed is the link called name in h's namespace.
func linkNamed(t *testing.T, h *netlink.Handle, name string) netlink.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	must(t, err)
	return l
}

// portsOf names the links whose master is br.
func portsOf(t *testing.T, h *netlink.Handle, br netlink.Link) []string {
	t.Helper()
	links, err := h.LinkList()
	must(t, err)
	var ports []string
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			ports = append(ports, l.Attrs().Name)
		}
	}
	return ports
}

// bridgeWithMAC makes a bridge called name in h's namespace with the
// hardware address mac (as a bridge takes its lowest port's) and one port,
// a veth, both up.
func bridgeWithMAC(t *testing.T, h *netlink.Handle, name, mac string) netlink.Link {
	t.Helper()
	hw, err := net.ParseMAC(mac)
	must(t, err)
	must(t, h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: hw}}))
	br := linkNamed(t, h, name)
	port := name + "-port"
	must(t, h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: port, MasterIndex: br.Attrs().Index}, PeerName: port + "-p"}))
	for _, n := range []string{name, port, port + "-p"} {
		must(t, h.LinkSetUp(linkNamed(t, h, n)))
	}
	return linkNamed(t, h, name)
}

// checkBridgeUntouched fails unless h still holds br under its name, up,
// with its hardware address and its one port.
func checkBridgeUntouched(t *testing.T, h *netlink.Handle, br netlink.Link) {
	t.Helper()
	now, err := h.LinkByIndex(br.Attrs().Index)
	must(t, err)
	a := now.Attrs()
	if a.Name != br.Attrs().Name || a.Flags&net.FlagUp == 0 || a.HardwareAddr.String() != br.Attrs().HardwareAddr.String() {
		t.Errorf("bridge %s is now %s, up %v, %s", br.Attrs().Name, a.Name, a.Flags&net.FlagUp != 0, a.HardwareAddr)
	}
	if ports := portsOf(t, h, now); !slices.Equal(ports, []string{br.Attrs().Name + "-port"}) {
		t.Errorf("bridge %s has ports %v, want only %s-port", br.Attrs().Name, ports, br.Attrs().Name)
	}
}

// A bridge (or bond) that shares the netdev's hardware address and has the
// lower ifindex (round 3, H3) is not what is moved: the netdev is taken
// by its name.
func TestMoveLeavesABridgeWithTheSameMAC(t *testing.T) {
	node, nodePath := fixture.NewNetNS(t)
	pod, podPath := fixture.NewNetNS(t)
	br := bridgeWithMAC(t, node, "br0", "02:00:00:00:63:03")
	hostNetDev(t, node, "eth3", "02:00:00:00:63:03", 4200)
	if eth3 := linkNamed(t, node, "eth3"); eth3.Attrs().Index < br.Attrs().Index {
		t.Fatalf("eth3 (%d) comes before br0 (%d): nothing tested", eth3.Attrs().Index, br.Attrs().Index)
	}
	ns, err := Open(nodePath, podPath)
	must(t, err)
	t.Cleanup(ns.Close)
	r, err := Attach(ns, podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"})
	must(t, err)
	checkBridgeUntouched(t, node, br)
	if in := linkNamed(t, pod, "eth3"); in.Attrs().HardwareAddr.String() != "02:00:00:00:63:03" {
		t.Errorf("the pod's eth3 has %s, want the node's eth3", in.Attrs().HardwareAddr)
	}
	must(t, Detach(ns, r))
	checkBridgeUntouched(t, node, br)
	if back := linkNamed(t, node, "eth3"); back.Type() != "veth" || back.Attrs().MTU != 4200 {
		t.Errorf("back on the node: eth3 is a %s with MTU %d", back.Type(), back.Attrs().MTU)
	}
}

// A pod with CAP_NET_ADMIN that gives another of its links the netdev's
// hardware address, and the netdev another (round 3, H4), gets its own
// link kept: the netdev goes back, found by the index it had in the pod,
// with its own hardware address, name, addresses and routes.
func TestMoveBackTakesTheNetDevNotItsMAC(t *testing.T) {
	ns, node, pod := nodeAndPod(t)
	r, err := Attach(ns, podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"})
	must(t, err)
	// The tenant's doing:
	hw, _ := net.ParseMAC("02:00:00:00:63:03")
	other, _ := net.ParseMAC("02:00:00:00:99:99")
	must(t, pod.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "vethpod", HardwareAddr: hw}, PeerName: "vethpod-p"}))
	in := linkNamed(t, pod, "eth3")
	must(t, pod.LinkSetDown(in))
	must(t, pod.LinkSetHardwareAddr(in, other))

	must(t, Detach(ns, r))
	back := linkNamed(t, node, "eth3")
	peer := linkNamed(t, node, "p-eth3")
	if back.Attrs().ParentIndex != peer.Attrs().Index {
		t.Errorf("the node's eth3 is not the netdev that was moved: its peer is %d, want p-eth3's %d", back.Attrs().ParentIndex, peer.Attrs().Index)
	}
	if back.Attrs().HardwareAddr.String() != "02:00:00:00:63:03" {
		t.Errorf("the node's eth3 has %s, want its own 02:00:00:00:63:03", back.Attrs().HardwareAddr)
	}
	if mtu, up, addrs, routes := state(t, node, "eth3"); mtu != 4200 || !up || !slices.Equal(addrs, []string{"10.0.63.3/24"}) || !slices.Equal(routes, []string{"10.9.0.0/16 via 10.0.63.1"}) {
		t.Errorf("back on the node: mtu %d up %v addrs %v routes %v", mtu, up, addrs, routes)
	}
	if _, err := pod.LinkByName("vethpod"); err != nil {
		t.Errorf("the pod's vethpod is gone: %v", err)
	}
}

// A record from before the pod's ifindex was recorded is given back by
// hardware address, as then, but never as a bridge that shares it.
func TestMoveBackOfAnOldRecordSkipsABridge(t *testing.T) {
	ns, node, pod := nodeAndPod(t)
	br := bridgeWithMAC(t, pod, "br9", "02:00:00:00:63:03")
	r, err := Attach(ns, podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"})
	must(t, err)
	old := r
	old.Kind, old.PodIndex = "", 0
	must(t, Detach(ns, old))
	checkBridgeUntouched(t, pod, br)
	if mtu, up, addrs, _ := state(t, node, "eth3"); mtu != 4200 || !up || !slices.Equal(addrs, []string{"10.0.63.3/24"}) {
		t.Errorf("back on the node: mtu %d up %v addrs %v", mtu, up, addrs)
	}
}

// A netdev whose pod namespace is gone falls back to the node, under a
// name of the kernel's when its own is taken; it is found there by its
// hardware address, but never as the node's bridge that shares it.
func TestMoveBackFromAGoneNamespaceSkipsTheNodesBridge(t *testing.T) {
	node, nodePath := fixture.NewNetNS(t)
	br := bridgeWithMAC(t, node, "br0", "02:00:00:00:63:03")
	hostNetDev(t, node, "dev7", "02:00:00:00:63:03", 1500)
	ns, err := OpenNode(nodePath)
	must(t, err)
	t.Cleanup(ns.Close)
	r := Record{
		Attachment: podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"},
		HWAddr:     "02:00:00:00:63:03",
		Saved:      &Saved{Name: "eth3", MTU: 4200, Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.63.3/24")}},
	}
	must(t, Detach(ns, r))
	checkBridgeUntouched(t, node, br)
	if mtu, up, addrs, _ := state(t, node, "eth3"); mtu != 4200 || !up || !slices.Equal(addrs, []string{"10.0.63.3/24"}) {
		t.Errorf("back on the node: mtu %d up %v addrs %v", mtu, up, addrs)
	}
}

// A link of another kind at the recorded index (the pod deleted the
// netdev, which only a virtual one allows, and made a bridge there) is not
// given back, whatever its hardware address.
func TestMoveBackRefusesAnotherKindAtTheIndex(t *testing.T) {
	ns, node, pod := nodeAndPod(t)
	r, err := Attach(ns, podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"})
	must(t, err)
	must(t, pod.LinkDel(linkNamed(t, pod, "eth3")))
	hw, _ := net.ParseMAC(r.HWAddr)
	must(t, pod.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "eth3", Index: r.PodIndex, HardwareAddr: hw}}))
	if l := linkNamed(t, pod, "eth3"); l.Attrs().Index != r.PodIndex {
		t.Fatalf("the bridge got index %d, not %d: nothing tested", l.Attrs().Index, r.PodIndex)
	}
	err = Detach(ns, r)
	if err == nil || !strings.Contains(err.Error(), "a bridge, not the moved veth") {
		t.Fatalf("Detach: %v, want the bridge at index %d refused", err, r.PodIndex)
	}
	if _, err := pod.LinkByName("eth3"); err != nil {
		t.Errorf("the pod's bridge left it: %v", err)
	}
	if _, err := node.LinkByName("eth3"); err == nil {
		t.Error("an eth3 is in the node's namespace")
	}
}

// A pod with CAP_NET_ADMIN that makes a link under the name its netdev
// travels home under (round 3, M1; the red team's
// TestRedTeamTravelNameSquat) does not keep the netdev: its namespace
// outlives its processes while the agent holds it, so nothing would ever
// free the name, and the HCA's next tenant could not start. The netdev
// travels under another name, and comes back with its own.
func TestMoveBackPastASquattedTravelName(t *testing.T) {
	ns, node, pod := nodeAndPod(t)
	r, err := Attach(ns, podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"})
	must(t, err)
	hw, _ := net.ParseMAC(r.HWAddr)
	squat := travelName(hw)
	must(t, pod.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: squat}, PeerName: "x"}))
	if err := Detach(ns, r); err != nil {
		t.Fatalf("Detach with %s taken in the pod: %v", squat, err)
	}
	if mtu, up, addrs, routes := state(t, node, "eth3"); mtu != 4200 || !up || !slices.Equal(addrs, []string{"10.0.63.3/24"}) || !slices.Equal(routes, []string{"10.9.0.0/16 via 10.0.63.1"}) {
		t.Errorf("back on the node: mtu %d up %v addrs %v routes %v", mtu, up, addrs, routes)
	}
	if _, err := pod.LinkByName(squat); err != nil {
		t.Errorf("the pod's %s is gone: %v", squat, err)
	}
}

// The planner's view of the node is its last scan's: a bridge, macvlan or
// policy route set up on the netdev since then is read again just before
// the move, which is refused (round 3 rerun), unless the operator lists
// the netdev as movable.
func TestMoveRefusesWhatTheNodeUsesSinceTheScan(t *testing.T) {
	for name, tc := range map[string]struct {
		use     func(t *testing.T, node *netlink.Handle, eth3 netlink.Link)
		movable bool
		wantErr string
	}{
		"a bridge port": {use: func(t *testing.T, node *netlink.Handle, eth3 netlink.Link) {
			must(t, node.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}))
			must(t, node.LinkSetMaster(eth3, linkNamed(t, node, "br0")))
		}, wantErr: "it is a port of the node's br0"},
		"a macvlan's lower": {use: func(t *testing.T, node *netlink.Handle, eth3 netlink.Link) {
			must(t, node.LinkAdd(&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "mgmt0", ParentIndex: eth3.Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE}))
		}, wantErr: "the node's mgmt0 sit on it"},
		"a policy table's route":         {use: policyRoute, wantErr: "policy routing tables [100]"},
		"a policy route, listed movable": {use: policyRoute, movable: true},
	} {
		t.Run(name, func(t *testing.T) {
			ns, node, pod := nodeAndPod(t)
			tc.use(t, node, linkNamed(t, node, "eth3"))
			a := podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3", OperatorMovable: tc.movable}
			r, err := Attach(ns, a)
			if tc.wantErr == "" {
				must(t, err)
				linkNamed(t, pod, "eth3")
				must(t, Detach(ns, r))
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Attach: %v, want an error with %q", err, tc.wantErr)
			}
			linkNamed(t, node, "eth3")
			if _, err := pod.LinkByName("eth3"); err == nil {
				t.Error("eth3 reached the pod")
			}
		})
	}
}

func policyRoute(t *testing.T, node *netlink.Handle, eth3 netlink.Link) {
	must(t, node.RouteAdd(&netlink.Route{LinkIndex: eth3.Attrs().Index, Dst: mustNet("10.210.0.0/16"), Gw: net.ParseIP("10.0.63.1"), Table: 100}))
}
