package netinfo_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/rdma-cdi/rdma-cdi/pkg/netinfo"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

const childEnv = "NETINFO_TEST_NETNS"

// TestMain lets the test binary act as a child that opens a namespace from
// inside a new pid namespace, as a createContainer hook does.
func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		h, err := netinfo.Open(path)
		if err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(3)
		}
		nd, found, err := h.NetDev("rdv0")
		if err != nil || !found || len(nd.Addrs) == 0 || nd.Addrs[0] != netip.MustParsePrefix("10.77.0.2/24") {
			os.Exit(4)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func prepare(t *testing.T) string {
	h, path := fixture.NewNetNS(t)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "rdv0"}, PeerName: "rdv0p"}
	if err := h.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	addr, _ := netlink.ParseAddr("10.77.0.2/24")
	if err := h.AddrAdd(veth, addr); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"rdv0", "rdv0p"} {
		l, _ := h.LinkByName(name)
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func TestOpenReadsTheNamedNamespace(t *testing.T) {
	path := prepare(t)
	h, err := netinfo.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nd, found, err := h.NetDev("rdv0")
	if err != nil || !found || nd.Addrs[0] != netip.MustParsePrefix("10.77.0.2/24") || !nd.Carrier {
		t.Fatalf("rdv0 = %+v found=%v err=%v", nd, found, err)
	}
	if _, found, _ := h.NetDev("no-such-link"); found {
		t.Fatal("a missing link must be reported as not found")
	}
}

func TestOpenFromAnotherPidNamespace(t *testing.T) {
	path := prepare(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare not installed")
	}
	// --fork without --mount-proc keeps the host's /proc, as in a hook.
	cmd := exec.Command(unshare, "--pid", "--fork", os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("Open from a new pid namespace: %v %s", err, out)
	}
}

func TestOpenMissingNamespace(t *testing.T) {
	if _, err := netinfo.Open("/run/netns/does-not-exist"); err == nil {
		t.Fatal("want an error naming the namespace")
	}
}

// TestWithinRunsInTheTarget: fn sees the target's /proc/sys/net (rdv0's
// sysctls exist only there), and the caller's thread stays where it was.
func TestWithinRunsInTheTarget(t *testing.T) {
	path := prepare(t)
	target, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	const sysctl = "/proc/sys/net/ipv4/conf/rdv0/arp_ignore"
	if err := netinfo.Within(target, func() error {
		_, err := os.ReadFile(sysctl)
		return err
	}); err != nil {
		t.Fatalf("reading %s within the target: %v", sysctl, err)
	}
	after, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if !before.Equal(after) {
		t.Error("the caller's thread changed namespace")
	}
	if _, err := os.Stat(sysctl); err == nil {
		t.Errorf("%s exists outside the target: the test cannot tell where fn ran", sysctl)
	}
	want := errors.New("fn's own error")
	if err := netinfo.Within(target, func() error { return want }); !errors.Is(err, want) {
		t.Errorf("Within returned %v, want fn's error", err)
	}
}

// A route's next hop through a netdev is that netdev's gateway, whichever
// table holds the route; a route without one names none.
func TestGatewaysByNetDev(t *testing.T) {
	path := prepare(t)
	nl, err := netlink.NewHandleAt(mustNS(t, path))
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	link, err := nl.LinkByName("rdv0")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []netlink.Route{
		{LinkIndex: link.Attrs().Index, Dst: mustNet(t, "10.88.0.0/16"), Gw: netip.MustParseAddr("10.77.0.1").AsSlice()},
		{LinkIndex: link.Attrs().Index, Dst: mustNet(t, "10.99.0.0/16"), Gw: netip.MustParseAddr("10.77.0.254").AsSlice(), Table: 100},
	} {
		if err := nl.RouteAdd(&r); err != nil {
			t.Fatal(err)
		}
	}
	h, err := netinfo.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	routing, err := h.Routing()
	if err != nil {
		t.Fatal(err)
	}
	gws := routing.Gateways
	want := []netip.Addr{netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("10.77.0.254")}
	if !slices.Equal(gws["rdv0"], want) {
		t.Errorf("rdv0's gateways %v, want %v", gws["rdv0"], want)
	}
	if len(gws["rdv0p"]) != 0 {
		t.Errorf("rdv0p has no route through a gateway, got %v", gws["rdv0p"])
	}
}

func mustNS(t *testing.T, path string) netns.NsHandle {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

func mustNet(t *testing.T, cidr string) *net.IPNet {
	t.Helper()
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Stacking names a bridge port's master and the netdevs stacked on a
// lower device (a macvlan), and never a veth's peer: its IFLA_LINK is the
// peer, which may live in another namespace.
func TestStackingNamesMastersAndUppers(t *testing.T) {
	h, path := fixture.NewNetNS(t)
	for _, l := range []netlink.Link{
		&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}},
		&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3"}, PeerName: "eth3p"},
		&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth4"}, PeerName: "eth4p"},
	} {
		if err := h.LinkAdd(l); err != nil {
			t.Fatal(err)
		}
	}
	br0, _ := h.LinkByName("br0")
	eth3, _ := h.LinkByName("eth3")
	eth4, _ := h.LinkByName("eth4")
	if err := h.LinkSetMaster(eth3, br0); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkAdd(&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "mv0", ParentIndex: eth4.Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE}); err != nil {
		t.Fatal(err)
	}
	n, err := netinfo.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	masters, uppers, err := n.Stacking()
	if err != nil {
		t.Fatal(err)
	}
	if masters["eth3"] != "br0" || len(masters) != 1 {
		t.Errorf("masters %v, want eth3's br0 alone", masters)
	}
	if !slices.Equal(uppers["eth4"], []string{"mv0"}) || len(uppers) != 1 {
		t.Errorf("uppers %v, want eth4's mv0 alone (no veth peer)", uppers)
	}
}

// RoutingUse names the netdevs of a multipath route's paths and the policy
// tables routing through each (round 3, H2: a move deleted an ECMP default
// route and emptied a per-rail table, and nothing brought them back).
func TestRoutingUseNamesMultipathAndPolicyTables(t *testing.T) {
	h, path := fixture.NewNetNS(t)
	for i, name := range []string{"eth3", "eth4", "eth5"} {
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
			t.Fatal(err)
		}
		link, _ := h.LinkByName(name)
		addr, _ := netlink.ParseAddr(fmt.Sprintf("10.7%d.0.2/24", i))
		if err := h.AddrAdd(link, addr); err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
	}
	eth3, _ := h.LinkByName("eth3")
	eth4, _ := h.LinkByName("eth4")
	if err := h.RouteAdd(&netlink.Route{Dst: mustNet(t, "10.200.0.0/16"), MultiPath: []*netlink.NexthopInfo{
		{LinkIndex: eth3.Attrs().Index, Gw: net.ParseIP("10.70.0.1")}, {LinkIndex: eth4.Attrs().Index, Gw: net.ParseIP("10.71.0.1")},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth4.Attrs().Index, Dst: mustNet(t, "10.201.0.0/16"), Gw: net.ParseIP("10.71.0.1"), Table: 100}); err != nil {
		t.Fatal(err)
	}
	n, err := netinfo.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	routing, err := n.Routing()
	if err != nil {
		t.Fatal(err)
	}
	multipath, tables := routing.Multipath, routing.Tables
	if !multipath["eth3"] || !multipath["eth4"] || multipath["eth5"] {
		t.Errorf("multipath %v, want eth3 and eth4", multipath)
	}
	if !slices.Equal(tables["eth4"], []int{100}) || len(tables) != 1 {
		t.Errorf("tables %v, want eth4's 100 alone", tables)
	}
}
