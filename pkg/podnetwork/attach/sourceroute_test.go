package attach

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/netinfo"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// rails makes a node namespace with one veth "host netdev" per name
// (eth1: 02:00:00:00:60:01, ...) and an empty pod namespace.
func rails(t *testing.T, names ...string) (Namespaces, *netlink.Handle, *netlink.Handle) {
	node, nodePath := fixture.NewNetNS(t)
	pod, podPath := fixture.NewNetNS(t)
	for i, name := range names {
		hostNetDev(t, node, name, fmt.Sprintf("02:00:00:00:60:%02x", i+1), 0)
	}
	ns, err := Open(nodePath, podPath)
	must(t, err)
	t.Cleanup(ns.Close)
	return ns, node, pod
}

// attachAll does what the networker does for one sandbox: Plan each,
// PlanSourceRouting over all of them, Apply each.
func attachAll(t *testing.T, ns Namespaces, plans ...podnetwork.Attachment) []Record {
	t.Helper()
	var records []Record
	for _, a := range plans {
		r, err := Plan(ns, a)
		must(t, err)
		records = append(records, r)
	}
	PlanSourceRouting(records)
	for i := range records {
		must(t, Apply(ns, &records[i]))
	}
	return records
}

func subInterface(device, host, name string, addrs ...string) podnetwork.Attachment {
	a := podnetwork.Attachment{Device: device, HostNetDev: host, Mode: v1alpha1.ModeSubInterface, PodInterface: name}
	for _, s := range addrs {
		a.Addrs = append(a.Addrs, netip.MustParsePrefix(s))
	}
	return a
}

// ourRules are the namespace's policy rules but the kernel's own three
// (local, main, default), as "priority: from src lookup table".
func ourRules(t *testing.T, h *netlink.Handle) []string {
	t.Helper()
	rules, err := h.RuleList(netlink.FAMILY_ALL)
	must(t, err)
	var out []string
	for _, r := range rules {
		if r.Priority == 0 || r.Priority == 32766 || r.Priority == 32767 {
			continue
		}
		out = append(out, fmt.Sprintf("%d: from %s lookup %d", r.Priority, r.Src, r.Table))
	}
	slices.Sort(out)
	return out
}

// tableRoutes are table's routes in h, as "dst [via gw] dev name".
func tableRoutes(t *testing.T, h *netlink.Handle, table int) []string {
	t.Helper()
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	must(t, err)
	var out []string
	for _, r := range routes {
		link, err := h.LinkByIndex(r.LinkIndex)
		must(t, err)
		s := r.Dst.String()
		if r.Gw != nil {
			s += " via " + r.Gw.String()
		}
		out = append(out, s+" dev "+link.Attrs().Name)
	}
	slices.Sort(out)
	return out
}

// sysctl reads net.ipv4.conf.<ifname>.<name> in the namespace ns.
func sysctl(t *testing.T, ns netns.NsHandle, ifname, name string) string {
	t.Helper()
	var b []byte
	must(t, netinfo.Within(ns, func() (err error) {
		b, err = os.ReadFile(filepath.Join("/proc/sys/net/ipv4/conf", ifname, name))
		return err
	}))
	return strings.TrimSpace(string(b))
}

// leavesBy is the interface the pod's kernel sends a packet to dst from
// src by.
func leavesBy(t *testing.T, h *netlink.Handle, dst, src string) string {
	t.Helper()
	routes, err := h.RouteGetWithOptions(net.ParseIP(dst), &netlink.RouteGetOptions{SrcAddr: net.ParseIP(src)})
	must(t, err)
	link, err := h.LinkByIndex(routes[0].LinkIndex)
	must(t, err)
	return link.Attrs().Name
}

// TestOneSubnetRoutesBySource: two sub-interfaces whose addresses share a
// subnet (IPv4 and IPv6) each get a table and source rules, and ARP
// settings; each address's traffic leaves by its own interface; Detach
// leaves no rule.
func TestOneSubnetRoutesBySource(t *testing.T) {
	ns, _, pod := rails(t, "eth1", "eth2")
	net2 := subInterface("mlx5_2", "eth2", "net2", "10.0.60.202/24", "fd00:60::202/64")
	net2.Routes = []v1alpha1.Route{{Destination: "10.9.0.0/16", Gateway: "10.0.60.1"}}
	records := attachAll(t, ns, subInterface("mlx5_1", "eth1", "net1", "10.0.60.201/24", "fd00:60::201/64"), net2)

	want := []string{
		"1000: from 10.0.60.201/32 lookup 1000",
		"1000: from fd00:60::201/128 lookup 1000",
		"1001: from 10.0.60.202/32 lookup 1001",
		"1001: from fd00:60::202/128 lookup 1001",
	}
	if got := ourRules(t, pod); !slices.Equal(got, want) {
		t.Errorf("rules in the pod:\n got %q\nwant %q", got, want)
	}
	if got, want := tableRoutes(t, pod, 1000), []string{"10.0.60.0/24 dev net1", "fd00:60::/64 dev net1"}; !slices.Equal(got, want) {
		t.Errorf("table 1000: %q, want %q", got, want)
	}
	// net2's planned route follows it into its table.
	if got, want := tableRoutes(t, pod, 1001), []string{"10.0.60.0/24 dev net2", "10.9.0.0/16 via 10.0.60.1 dev net2", "fd00:60::/64 dev net2"}; !slices.Equal(got, want) {
		t.Errorf("table 1001: %q, want %q", got, want)
	}
	for _, name := range []string{"net1", "net2"} {
		if ignore, announce := sysctl(t, ns.Pod, name, "arp_ignore"), sysctl(t, ns.Pod, name, "arp_announce"); ignore != "1" || announce != "2" {
			t.Errorf("%s: arp_ignore %s, arp_announce %s; want 1 and 2", name, ignore, announce)
		}
	}
	for _, tc := range []struct{ dst, src, want string }{
		{"10.0.60.99", "10.0.60.201", "net1"},
		{"10.0.60.99", "10.0.60.202", "net2"},
		{"10.9.1.1", "10.0.60.202", "net2"},
		{"fd00:60::99", "fd00:60::201", "net1"},
		{"fd00:60::99", "fd00:60::202", "net2"},
	} {
		if got := leavesBy(t, pod, tc.dst, tc.src); got != tc.want {
			t.Errorf("to %s from %s: leaves by %s, want %s", tc.dst, tc.src, got, tc.want)
		}
	}
	// The records carry what a restart needs to undo it.
	if sr := records[1].SourceRouting; sr == nil || sr.Table != 1001 || sr.Priority != 1001 {
		t.Errorf("net2's record: source routing %+v, want table and priority 1001", sr)
	}

	for i := len(records) - 1; i >= 0; i-- {
		must(t, Detach(ns, records[i]))
	}
	if got := ourRules(t, pod); len(got) != 0 {
		t.Errorf("rules left after Detach: %q", got)
	}
}

// TestMovedNetDevTakesNothingOfOursBack: a netdev moved in with its own
// address shares the subnet of a sub-interface; back on the node it
// carries none of the pod's settings, and its rules are gone from the
// pod's namespace, which lives on.
func TestMovedNetDevTakesNothingOfOursBack(t *testing.T) {
	ns, node, pod := rails(t, "eth1", "eth2")
	eth1, err := node.LinkByName("eth1")
	must(t, err)
	must(t, node.AddrAdd(eth1, &netlink.Addr{IPNet: mustNet("10.0.60.1/24")}))
	moved := podnetwork.Attachment{Device: "mlx5_1", HostNetDev: "eth1", Mode: v1alpha1.ModeMove, PodInterface: "eth1"}
	records := attachAll(t, ns, moved, subInterface("mlx5_2", "eth2", "net2", "10.0.60.202/24"))

	want := []string{"1000: from 10.0.60.1/32 lookup 1000", "1001: from 10.0.60.202/32 lookup 1001"}
	if got := ourRules(t, pod); !slices.Equal(got, want) {
		t.Errorf("rules in the pod: %q, want %q", got, want)
	}
	if got := leavesBy(t, pod, "10.0.60.99", "10.0.60.1"); got != "eth1" {
		t.Errorf("from the moved netdev's own address: leaves by %s, want eth1", got)
	}
	if got := sysctl(t, ns.Pod, "eth1", "arp_ignore"); got != "1" {
		t.Errorf("moved eth1 in the pod: arp_ignore %s, want 1", got)
	}

	must(t, Detach(ns, records[0]))
	if got, want := ourRules(t, pod), want[1:]; !slices.Equal(got, want) {
		t.Errorf("rules after the moved netdev went back: %q, want only net2's %q", got, want)
	}
	for _, name := range []string{"arp_ignore", "arp_announce"} {
		if got, def := sysctl(t, ns.Node, "eth1", name), sysctl(t, ns.Node, "default", name); got != def {
			t.Errorf("eth1 back on the node: %s %s, want the node's default %s", name, got, def)
		}
	}
	must(t, Detach(ns, records[1]))
	if got := ourRules(t, pod); len(got) != 0 {
		t.Errorf("rules left: %q", got)
	}
}

// TestNoSourceRoutingWithoutASharedSubnet: one interface, or interfaces in
// different subnets, get no rule and keep the namespace's ARP settings.
func TestNoSourceRoutingWithoutASharedSubnet(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plans []podnetwork.Attachment
	}{
		{"one interface", []podnetwork.Attachment{subInterface("mlx5_1", "eth1", "net1", "10.0.60.201/24")}},
		{"different subnets", []podnetwork.Attachment{
			subInterface("mlx5_1", "eth1", "net1", "10.0.61.201/24"),
			subInterface("mlx5_2", "eth2", "net2", "10.0.62.202/24"),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, _, pod := rails(t, "eth1", "eth2")
			records := attachAll(t, ns, tc.plans...)
			if got := ourRules(t, pod); len(got) != 0 {
				t.Errorf("rules: %q, want none", got)
			}
			for _, r := range records {
				if r.SourceRouting != nil {
					t.Errorf("%s: source routing %+v, want none", r.PodInterface, *r.SourceRouting)
				}
				for _, name := range []string{"arp_ignore", "arp_announce"} {
					if got, def := sysctl(t, ns.Pod, r.PodInterface, name), sysctl(t, ns.Pod, "default", name); got != def {
						t.Errorf("%s: %s %s, want the namespace's default %s", r.PodInterface, name, got, def)
					}
				}
			}
		})
	}
}

// TestOneSubnetOnTheWire: both host netdevs on one bridge, the node's
// namespace a peer at 10.0.60.99 on it. The node asks ARP for net2's
// address (both sub-interfaces hear it) and only net2 answers; the node's
// datagram to it comes in by net2, also past a strict reverse-path filter
// (rp_filter 1), and the pod's answer leaves by net2.
func TestOneSubnetOnTheWire(t *testing.T) {
	for _, rpFilter := range []string{"0", "1"} {
		t.Run("rp_filter="+rpFilter, func(t *testing.T) { onTheWire(t, rpFilter) })
	}
}

func onTheWire(t *testing.T, rpFilter string) {
	ns, node, pod := rails(t, "eth1", "eth2")
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	must(t, node.LinkAdd(br))
	for _, port := range []string{"p-eth1", "p-eth2"} {
		l, err := node.LinkByName(port)
		must(t, err)
		must(t, node.LinkSetMaster(l, br))
	}
	must(t, node.LinkSetUp(br))
	must(t, node.AddrAdd(br, &netlink.Addr{IPNet: mustNet("10.0.60.99/24")}))
	records := attachAll(t, ns,
		subInterface("mlx5_1", "eth1", "net1", "10.0.60.201/24"),
		subInterface("mlx5_2", "eth2", "net2", "10.0.60.202/24"))
	must(t, netinfo.Within(ns.Pod, func() error {
		for _, ifname := range []string{"all", "net1", "net2"} {
			if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv4/conf", ifname, "rp_filter"), []byte(rpFilter), 0o644); err != nil {
				return err
			}
		}
		return nil
	}))

	peer := listenUDP(t, ns.Node, "10.0.60.99")
	inPod := listenUDP(t, ns.Pod, "10.0.60.202")
	if _, err := peer.WriteToUDP([]byte("hello"), inPod.LocalAddr().(*net.UDPAddr)); err != nil {
		t.Fatal(err)
	}
	if from := receive(t, inPod); from.IP.String() != "10.0.60.99" {
		t.Fatalf("the pod got a datagram from %s", from)
	}
	if _, err := inPod.WriteToUDP([]byte("hello back"), peer.LocalAddr().(*net.UDPAddr)); err != nil {
		t.Fatal(err)
	}
	if from := receive(t, peer); from.IP.String() != "10.0.60.202" {
		t.Fatalf("the node got the answer from %s", from)
	}

	if got := neighbor(t, node, "br0", "10.0.60.202"); got != records[1].HWAddr {
		t.Errorf("the node reaches 10.0.60.202 at %s, want net2's %s (net1 is %s)", got, records[1].HWAddr, records[0].HWAddr)
	}
	if got := neighbor(t, pod, "net1", "10.0.60.99"); got != "" {
		t.Errorf("net1 knows 10.0.60.99 (%s): it answered ARP for net2's address, or the pod's answer left by it", got)
	}
	if got := neighbor(t, pod, "net2", "10.0.60.99"); got == "" {
		t.Error("net2 never resolved 10.0.60.99: the pod's answer did not leave by it")
	}
}

// listenUDP opens a UDP socket on addr in the namespace ns.
func listenUDP(t *testing.T, ns netns.NsHandle, addr string) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	must(t, netinfo.Within(ns, func() (err error) {
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(addr)})
		return err
	}))
	t.Cleanup(func() { c.Close() })
	return c
}

// receive reads one datagram from c and says who sent it. The deadline
// only ends a test that would otherwise wait for a datagram lost.
func receive(t *testing.T, c *net.UDPConn) *net.UDPAddr {
	t.Helper()
	must(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	buf := make([]byte, 64)
	_, from, err := c.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("no datagram on %s: %v", c.LocalAddr(), err)
	}
	return from
}

// neighbor is the hardware address h's ARP table holds for ip on ifname,
// or "".
func neighbor(t *testing.T, h *netlink.Handle, ifname, ip string) string {
	t.Helper()
	link, err := h.LinkByName(ifname)
	must(t, err)
	neighs, err := h.NeighList(link.Attrs().Index, netlink.FAMILY_V4)
	must(t, err)
	for _, n := range neighs {
		if n.IP.String() == ip && n.HardwareAddr != nil {
			return n.HardwareAddr.String()
		}
	}
	return ""
}
