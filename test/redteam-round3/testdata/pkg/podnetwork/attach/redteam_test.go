package attach

// Round 3's red-team reproductions (../shared/redteam/round3/pkg/netattach),
// ported to today's code: the same namespaces, links, MACs, routes and
// claims, through the entry points the driver calls now (the node facts
// discovery reads, podnetwork.Plan, then Attach and Detach). They log
// what each attack gets now; they assert nothing.

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/netinfo"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

func rtLink(t *testing.T, h *netlink.Handle, name string) netlink.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return l
}

func rtUpAll(t *testing.T, h *netlink.Handle, names ...string) {
	t.Helper()
	for _, n := range names {
		must(t, h.LinkSetUp(rtLink(t, h, n)))
	}
}

// rtFactsOf is what the agent's discovery (pkg/discover's addNetwork)
// reads of the node namespace: netinfo's default-route netdev, routing and
// stacking facts of each netdev, the HCA mlx5_3 on hcaNetDev, and the
// Node's InternalIP, known.
func rtFactsOf(t *testing.T, nodePath, hcaNetDev string, netdevs []string, internalIP string) podnetwork.NodeFacts {
	t.Helper()
	h, err := netinfo.Open(nodePath)
	must(t, err)
	defer h.Close()
	def, err := h.DefaultRouteNetDev()
	must(t, err)
	routing, err := h.Routing()
	must(t, err)
	masters, uppers, err := h.Stacking()
	must(t, err)
	node := model.Node{DefaultRouteNetDev: def, Devices: []model.Device{{Name: "mlx5_3",
		Ports: []model.Port{{Number: 1, LinkLayer: model.LinkLayerEthernet, NetDev: hcaNetDev}}}}}
	for _, n := range netdevs {
		nd, ok, err := h.NetDev(n)
		must(t, err)
		if ok {
			nd.Gateways = routing.Gateways[n]
			nd.Master, nd.Uppers = masters[n], uppers[n]
			nd.Multipath, nd.RouteTables = routing.Multipath[n], routing.Tables[n]
			node.NetDevs = append(node.NetDevs, nd)
		}
	}
	return podnetwork.NodeFacts{Node: node, NodeIPs: []netip.Addr{netip.MustParseAddr(internalIP)}, NodeIPsKnown: true}
}

func rtRoutes4(t *testing.T, h *netlink.Handle) []string {
	t.Helper()
	rs, err := h.RouteList(nil, netlink.FAMILY_V4)
	must(t, err)
	var out []string
	for _, r := range rs {
		out = append(out, r.String())
	}
	return out
}

func rtListLinks(t *testing.T, h *netlink.Handle, when string) {
	t.Helper()
	links, err := h.LinkList()
	must(t, err)
	for _, l := range links {
		a := l.Attrs()
		t.Logf("  %s: %d %s (%s) mac %s master %d admin-up %v oper %s", when, a.Index, a.Name, l.Type(), a.HardwareAddr, a.MasterIndex, a.Flags&net.FlagUp != 0, a.OperState)
	}
}

func rtTable(t *testing.T, h *netlink.Handle, id int) []string {
	t.Helper()
	rs, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: id}, netlink.RT_FILTER_TABLE)
	must(t, err)
	var out []string
	for _, r := range rs {
		out = append(out, r.String())
	}
	return out
}

// rtPlanAndAttach is what the driver does for an exclusive claim with cfg:
// podnetwork.Plan over the node facts with the networker's pool (the
// node's static ranges, none here, as in the original), then Attach.
func rtPlanAndAttach(t *testing.T, ns Namespaces, dev podnetwork.Device, cfg v1alpha1.PodNetworkConfig, what string) (Record, bool) {
	t.Helper()
	att, ok, err := podnetwork.Plan(dev, cfg, &podnetwork.Pool{})
	t.Logf("%s: plan mode %q ok=%v err=%v", what, att.Mode, ok, err)
	if err != nil || !ok {
		return Record{}, false
	}
	rec, err := Attach(ns, att)
	t.Logf("%s: attach err=%v", what, err)
	return rec, err == nil
}

// H2 and H3. The HCA's netdev is a port of the node's bridge, which holds
// the node's InternalIP and default route. bridgeFirst: the bridge has the
// lower ifindex, so a MAC lookup would find the bridge.
func TestRedTeamMoveUnplugsABridgePort(t *testing.T) {
	for _, bridgeFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("bridgeFirst=%v", bridgeFirst), func(t *testing.T) {
			node, nodePath := fixture.NewNetNS(t)
			_, podPath := fixture.NewNetNS(t)
			mac, _ := net.ParseMAC("02:00:00:00:63:03")
			addBridge := func() { must(t, node.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}})) }
			if bridgeFirst {
				addBridge()
			}
			must(t, node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3", HardwareAddr: mac}, PeerName: "p-eth3"}))
			if !bridgeFirst {
				addBridge()
			}
			br := rtLink(t, node, "br0")
			must(t, node.LinkSetMaster(rtLink(t, node, "eth3"), br))
			rtUpAll(t, node, "br0", "eth3", "p-eth3")
			must(t, node.AddrAdd(br, &netlink.Addr{IPNet: mustNet("10.98.0.5/24")}))
			must(t, node.RouteAdd(&netlink.Route{LinkIndex: br.Attrs().Index, Gw: net.ParseIP("10.98.0.1")}))
			facts := rtFactsOf(t, nodePath, "eth3", []string{"eth3", "br0"}, "10.98.0.5")
			dev := facts.Device("mlx5_3", false)
			t.Logf("node: default route via %q, InternalIP 10.98.0.5 on br0; eth3 kept because %q", facts.Node.DefaultRouteNetDev, dev.Kept)
			rtListLinks(t, node, "node before")
			ns, err := Open(nodePath, podPath)
			must(t, err)
			defer ns.Close()
			for _, cfg := range []v1alpha1.PodNetworkConfig{{}, {Mode: v1alpha1.ModeMove}} {
				rec, ok := rtPlanAndAttach(t, ns, dev, cfg, fmt.Sprintf("exclusive claim, mode %q", cfg.Mode))
				if ok {
					t.Logf("br0's ports while the pod holds its interface: %v", portsOf(t, node, br))
					must(t, Detach(ns, rec))
				}
			}
			rtListLinks(t, node, "node after")
			t.Logf("br0's ports after: %v", portsOf(t, node, br))
		})
	}
}

// H2. An ECMP default route over two RoCE netdevs and a per-rail table 100.
func TestRedTeamMoveDropsAMultipathDefaultRoute(t *testing.T) {
	node, nodePath := fixture.NewNetNS(t)
	_, podPath := fixture.NewNetNS(t)
	var nh []*netlink.NexthopInfo
	for i, name := range []string{"eth3", "eth4"} {
		mac, _ := net.ParseMAC(fmt.Sprintf("02:00:00:00:63:%02x", 3+i))
		must(t, node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: mac}, PeerName: "p-" + name}))
		rtUpAll(t, node, name, "p-"+name)
		l := rtLink(t, node, name)
		must(t, node.AddrAdd(l, &netlink.Addr{IPNet: mustNet(fmt.Sprintf("10.97.%d.5/24", i+1))}))
		nh = append(nh, &netlink.NexthopInfo{LinkIndex: l.Attrs().Index, Gw: net.ParseIP(fmt.Sprintf("10.97.%d.1", i+1))})
	}
	must(t, node.RouteAdd(&netlink.Route{Dst: mustNet("0.0.0.0/0"), MultiPath: nh}))
	must(t, node.RouteAdd(&netlink.Route{LinkIndex: rtLink(t, node, "eth3").Attrs().Index, Dst: mustNet("10.210.0.0/16"), Gw: net.ParseIP("10.97.1.1"), Table: 100}))
	t.Logf("node routes before: %v; table 100: %v", rtRoutes4(t, node), rtTable(t, node, 100))
	facts := rtFactsOf(t, nodePath, "eth3", []string{"eth3", "eth4"}, "10.250.0.1")
	dev := facts.Device("mlx5_3", false)
	t.Logf("netinfo's default-route netdev %q; eth3 kept because %q", facts.Node.DefaultRouteNetDev, dev.Kept)
	ns, err := Open(nodePath, podPath)
	must(t, err)
	defer ns.Close()
	for _, cfg := range []v1alpha1.PodNetworkConfig{{}, {Mode: v1alpha1.ModeMove}} {
		if rec, ok := rtPlanAndAttach(t, ns, dev, cfg, fmt.Sprintf("exclusive claim, mode %q", cfg.Mode)); ok {
			t.Logf("while attached: node routes %v", rtRoutes4(t, node))
			must(t, Detach(ns, rec))
		}
	}
	t.Logf("after: node routes %v; table 100: %v", rtRoutes4(t, node), rtTable(t, node, 100))
}

// H4. The tenant (CAP_NET_ADMIN in its namespace) gives its moved netdev
// another MAC and its CNI eth0 (peer on cni0) the netdev's MAC; Detach at
// the sandbox's stop.
func TestRedTeamMoveBackTakesWhateverHoldsTheMAC(t *testing.T) {
	node, nodePath := fixture.NewNetNS(t)
	pod, podPath := fixture.NewNetNS(t)
	mac3, _ := net.ParseMAC("02:00:00:00:63:03")
	must(t, node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3", HardwareAddr: mac3}, PeerName: "p-eth3"}))
	rtUpAll(t, node, "eth3", "p-eth3")
	eth3 := rtLink(t, node, "eth3")
	must(t, node.AddrAdd(eth3, &netlink.Addr{IPNet: mustNet("10.96.0.5/24")}))
	must(t, node.RouteAdd(&netlink.Route{LinkIndex: eth3.Attrs().Index, Dst: mustNet("10.200.0.0/16"), Gw: net.ParseIP("10.96.0.1")}))
	must(t, node.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "cni0"}}))
	cni0 := rtLink(t, node, "cni0")
	rtUpAll(t, node, "cni0")
	podNS, err := netns.GetFromPath(podPath)
	must(t, err)
	defer podNS.Close()
	must(t, node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "vethpod", MasterIndex: cni0.Attrs().Index}, PeerName: "eth0", PeerNamespace: netlink.NsFd(podNS)}))
	rtUpAll(t, node, "vethpod")
	ns, err := Open(nodePath, podPath)
	must(t, err)
	defer ns.Close()
	rec, err := Attach(ns, podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"})
	must(t, err)
	t.Logf("record: kind %q, pod ifindex %d, hwaddr %s", rec.Kind, rec.PodIndex, rec.HWAddr)
	// The tenant, root with CAP_NET_ADMIN in its own namespace:
	in := rtLink(t, pod, "eth3")
	must(t, pod.LinkSetDown(in))
	other, _ := net.ParseMAC("02:00:00:00:99:99")
	must(t, pod.LinkSetHardwareAddr(in, other))
	must(t, pod.LinkSetHardwareAddr(rtLink(t, pod, "eth0"), mac3))
	err = Detach(ns, rec)
	t.Logf("Detach at the sandbox's stop: err=%v", err)
	got := rtLink(t, node, "eth3")
	vp := rtLink(t, node, "vethpod")
	addrs, _ := node.AddrList(got, netlink.FAMILY_V4)
	t.Logf("node's \"eth3\" now: type %s, index %d (was %d), mac %s, veth peer index %d; vethpod (port of cni0, master %d) peer index %d; addrs %v",
		got.Type(), got.Attrs().Index, eth3.Attrs().Index, got.Attrs().HardwareAddr, got.Attrs().ParentIndex, vp.Attrs().MasterIndex, vp.Attrs().ParentIndex, addrs)
	t.Logf("node routes: %v", rtRoutes4(t, node))
	pl, _ := pod.LinkList()
	for _, l := range pl {
		t.Logf("left in the pod's namespace: %s (%s) %s", l.Attrs().Name, l.Type(), l.Attrs().HardwareAddr)
	}
}

// M1. The pod, with CAP_NET_ADMIN, takes the travel name first.
func TestRedTeamTravelNameSquat(t *testing.T) {
	ns, node, pod := nodeAndPod(t)
	rec, err := Attach(ns, podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"})
	must(t, err)
	mac, _ := net.ParseMAC("02:00:00:00:63:03")
	squat := travelName(mac)
	must(t, pod.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: squat}, PeerName: "x"}))
	err = Detach(ns, rec)
	_, inNode := node.LinkByName("eth3")
	t.Logf("pod made %q; Detach: err=%v; eth3 in the node's namespace: %v", squat, err, inNode == nil)
	must(t, pod.LinkDel(rtLink(t, pod, squat)))
	must(t, Detach(ns, rec))
}

// H2. The node's own macvlan upper (InternalIP, default route) sits on the
// HCA's netdev.
func TestRedTeamMoveTakesTheLowerOfTheNodesInterface(t *testing.T) {
	node, nodePath := fixture.NewNetNS(t)
	_, podPath := fixture.NewNetNS(t)
	mac, _ := net.ParseMAC("02:00:00:00:63:03")
	must(t, node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3", HardwareAddr: mac}, PeerName: "p-eth3"}))
	rtUpAll(t, node, "eth3", "p-eth3")
	must(t, node.LinkAdd(&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "mgmt0", ParentIndex: rtLink(t, node, "eth3").Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE}))
	rtUpAll(t, node, "mgmt0")
	mg := rtLink(t, node, "mgmt0")
	must(t, node.AddrAdd(mg, &netlink.Addr{IPNet: mustNet("10.95.0.5/24")}))
	must(t, node.RouteAdd(&netlink.Route{LinkIndex: mg.Attrs().Index, Gw: net.ParseIP("10.95.0.1")}))
	facts := rtFactsOf(t, nodePath, "eth3", []string{"eth3", "mgmt0"}, "10.95.0.5")
	dev := facts.Device("mlx5_3", false)
	t.Logf("default route via %q, InternalIP on mgmt0; eth3 kept because %q", facts.Node.DefaultRouteNetDev, dev.Kept)
	ns, err := Open(nodePath, podPath)
	must(t, err)
	defer ns.Close()
	for _, cfg := range []v1alpha1.PodNetworkConfig{{}, {Mode: v1alpha1.ModeMove}} {
		if rec, ok := rtPlanAndAttach(t, ns, dev, cfg, fmt.Sprintf("exclusive claim, mode %q", cfg.Mode)); ok {
			must(t, Detach(ns, rec))
		}
	}
	t.Logf("node's mgmt0 after: oper %s, lower index %d (eth3 is %d)", rtLink(t, node, "mgmt0").Attrs().OperState, rtLink(t, node, "mgmt0").Attrs().ParentIndex, rtLink(t, node, "eth3").Attrs().Index)
}

// H1. A sub-interface given the node's own address (the original) and,
// beyond it, the address a peer on the fabric holds.
func TestRedTeamSubInterfaceAnswersForTheNodesAddress(t *testing.T) {
	node, nodePath := fixture.NewNetNS(t)
	_, podPath := fixture.NewNetNS(t)
	remote, remotePath := fixture.NewNetNS(t)
	remoteNS, err := netns.GetFromPath(remotePath)
	must(t, err)
	defer remoteNS.Close()
	mac, _ := net.ParseMAC("02:00:00:00:63:03")
	must(t, node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3", HardwareAddr: mac}, PeerName: "p-eth3", PeerNamespace: netlink.NsFd(remoteNS)}))
	rtUpAll(t, node, "eth3")
	must(t, node.AddrAdd(rtLink(t, node, "eth3"), &netlink.Addr{IPNet: mustNet("10.99.0.5/24")}))
	rtUpAll(t, remote, "p-eth3")
	must(t, remote.AddrAdd(rtLink(t, remote, "p-eth3"), &netlink.Addr{IPNet: mustNet("10.99.0.9/24")}))
	ns, err := Open(nodePath, podPath)
	must(t, err)
	defer ns.Close()
	script := filepath.Join(t.TempDir(), "arp.py")
	must(t, os.WriteFile(script, []byte(rtARPProbe), 0o644))
	for _, victim := range []string{"10.99.0.5/24", "10.99.0.9/24"} {
		rec, err := Attach(ns, podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeSubInterface, PodInterface: "net1",
			Addrs: []netip.Prefix{netip.MustParsePrefix(victim)}})
		t.Logf("sub-interface with %s: attach err=%v", victim, err)
		ip := netip.MustParsePrefix(victim).Addr().String()
		out, perr := exec.Command("ip", "netns", "exec", filepath.Base(remotePath), "python3", script, "p-eth3", "10.99.0.77", ip).CombinedOutput()
		t.Logf("node eth3 %s, pod's macvlan %q; ARP who-has %s from the fabric: %s (err %v)", mac, rec.HWAddr, ip, out, perr)
		if err == nil {
			must(t, Detach(ns, rec))
		}
	}
}

const rtARPProbe = `
import socket, struct, sys, time
ifname, src, dst = sys.argv[1:4]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
s.bind((ifname, 0))
mac = s.getsockname()[4]
arp = struct.pack('!HHBBH', 1, 0x0800, 6, 4, 1) + mac + socket.inet_aton(src) + b'\0'*6 + socket.inet_aton(dst)
s.send(b'\xff'*6 + mac + b'\x08\x06' + arp)
s.settimeout(0.3)
seen, end = [], time.time() + 1.5
while time.time() < end:
    try:
        d = s.recv(2048)
    except socket.timeout:
        continue
    if len(d) >= 42 and d[12:14] == b'\x08\x06' and d[20:22] == b'\x00\x02' and socket.inet_ntoa(d[28:32]) == dst:
        seen.append(':'.join('%02x' % b for b in d[22:28]))
print('replies from', sorted(set(seen)), 'count', len(seen))
`

// L1. interfaceName "net%d": refused by the config now (see the
// podnetwork port); here the attach layer is called with it directly.
func TestRedTeamPercentNameLeavesAMacvlan(t *testing.T) {
	ns, _, pod := nodeAndPod(t)
	t.Logf("v1alpha1.ValidInterfaceName(\"net%%d\"): %v", v1alpha1.ValidInterfaceName("net%d"))
	_, err := Attach(ns, podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeSubInterface, PodInterface: "net%d",
		Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.63.50/24")}})
	t.Logf("attach (the attach layer alone): %v", err)
	pl, _ := pod.LinkList()
	for _, l := range pl {
		t.Logf("pod namespace holds: %s (%s)", l.Attrs().Name, l.Type())
	}
}

// H5, on the wire: two nodes of one release share a static range (the
// allocator gives both first pods the same address, see the podnetwork
// port); node A's pod takes it, then node B's pod tries it on the same L2.
func TestRedTeamRangeSharedByTwoNodesOnTheWire(t *testing.T) {
	nodeA, pathA := fixture.NewNetNS(t)
	nodeB, pathB := fixture.NewNetNS(t)
	_, podA := fixture.NewNetNS(t)
	_, podB := fixture.NewNetNS(t)
	nsB, err := netns.GetFromPath(pathB)
	must(t, err)
	defer nsB.Close()
	must(t, nodeA.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3"}, PeerName: "eth3", PeerNamespace: netlink.NsFd(nsB)}))
	rtUpAll(t, nodeA, "eth3")
	rtUpAll(t, nodeB, "eth3")
	must(t, nodeA.AddrAdd(rtLink(t, nodeA, "eth3"), &netlink.Addr{IPNet: mustNet("10.0.61.5/24")}))
	must(t, nodeB.AddrAdd(rtLink(t, nodeB, "eth3"), &netlink.Addr{IPNet: mustNet("10.0.61.7/24")}))
	ranges, err := podnetwork.ParseRanges(map[string]string{"eth3": "10.0.61.200-10.0.61.220"})
	must(t, err)
	for _, n := range []struct{ name, node, pod, own string }{{"A", pathA, podA, "10.0.61.5/24"}, {"B", pathB, podB, "10.0.61.7/24"}} {
		dev := podnetwork.Device{IBDev: "mlx5_3", NetDev: "eth3", RoCE: true, Shared: true, Addrs: []netip.Prefix{netip.MustParsePrefix(n.own)}}
		att, _, err := podnetwork.Plan(dev, v1alpha1.PodNetworkConfig{}, &podnetwork.Pool{Ranges: ranges})
		must(t, err)
		ns, err := Open(n.node, n.pod)
		must(t, err)
		defer ns.Close()
		_, err = Attach(ns, att)
		t.Logf("node %s's first pod: planned %v, attach err=%v", n.name, att.Addrs, err)
	}
}
