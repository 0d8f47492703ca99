package attach

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// neighborMAC is the hardware address of the host that neighborHolding puts on
// the pod's link.
const neighborMAC = "02:00:00:00:63:99"

// neighborHolding takes p-eth3, the far end of the node's eth3, into a namespace
// of its own and gives it neighborMAC, addrs (IPv6 ones usable at once)
// and up: another host on the link that eth3 and its sub-interfaces reach.
func neighborHolding(t *testing.T, node *netlink.Handle, addrs ...string) {
	t.Helper()
	far, farPath := fixture.NewNetNS(t)
	farNS, err := netns.GetFromPath(farPath)
	must(t, err)
	t.Cleanup(func() { farNS.Close() })
	must(t, node.LinkSetNsFd(linkNamed(t, node, "p-eth3"), int(farNS)))
	peer := linkNamed(t, far, "p-eth3")
	hw, err := net.ParseMAC(neighborMAC)
	must(t, err)
	must(t, far.LinkSetHardwareAddr(peer, hw))
	must(t, far.LinkSetUp(peer))
	for _, s := range addrs {
		a := &netlink.Addr{IPNet: mustNet(s)}
		if strings.Contains(s, ":") {
			a.Flags = unix.IFA_F_NODAD
		}
		must(t, far.AddrAdd(peer, a))
	}
}

// leftInPod names the pod's links other than the ones nodeAndPod made.
func leftInPod(t *testing.T, pod *netlink.Handle) []string {
	t.Helper()
	links, err := pod.LinkList()
	must(t, err)
	var left []string
	for _, l := range links {
		if n := l.Attrs().Name; n != "lo" && n != "eth0" && n != "p-eth0" {
			left = append(left, n)
		}
	}
	return left
}

// attachWith attaches eth3 to the pod as roce0 in mode with addrs.
func attachWith(ns Namespaces, mode v1alpha1.Mode, addrs ...string) (Record, error) {
	a := podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: mode, PodInterface: "roce0"}
	for _, s := range addrs {
		a.Addrs = append(a.Addrs, netip.MustParsePrefix(s))
	}
	return Attach(ns, a)
}

var bothModes = []v1alpha1.Mode{v1alpha1.ModeMove, v1alpha1.ModeSubInterface}

// An IPv4 address that another host on the link holds is not given to the
// pod (round 3, H1): the ARP probe's answer names the address, the pod's
// interface and the host's MAC, and the attachment is rolled back.
func TestAttachRefusesAnIPv4AddressANeighborHolds(t *testing.T) {
	for _, mode := range bothModes {
		t.Run(string(mode), func(t *testing.T) {
			node := refusedWhatANeighborHolds(t, mode, "10.0.63.77/24", neighborMAC)
			if mtu, up, addrs, routes := state(t, node, "eth3"); mtu != 4200 || !up || !slices.Equal(addrs, []string{"10.0.63.3/24"}) || len(routes) != 1 {
				t.Errorf("the node's eth3 after the refusal: mtu %d up %v addrs %v routes %v", mtu, up, addrs, routes)
			}
		})
	}
}

// refusedWhatANeighborHolds attaches in mode the address p that a
// neighbor on the link holds and checks the refusal: an error naming the
// address, the pod's interface and what else is wanted, nothing left in
// the pod. It gives the node's handle for the caller's checks.
func refusedWhatANeighborHolds(t *testing.T, mode v1alpha1.Mode, p string, want ...string) *netlink.Handle {
	t.Helper()
	ns, node, pod := nodeAndPod(t)
	neighborHolding(t, node, p)
	addr, _, _ := strings.Cut(p, "/")
	_, err := attachWith(ns, mode, p)
	if err == nil {
		t.Fatalf("Attach of %s, which the neighbor holds, succeeded", addr)
	}
	t.Log(err)
	for _, w := range append([]string{addr, "roce0"}, want...) {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Attach: %v; want it to name %s", err, w)
		}
	}
	if left := leftInPod(t, pod); len(left) != 0 {
		t.Errorf("left in the pod: %v", left)
	}
	return node
}

// A sub-interface's probe never reaches its parent (a macvlan's frames go
// out on the wire, not up the parent's stack), so the parent's own
// addresses are refused by looking at them.
func TestSubInterfaceRefusesTheParentsAddress(t *testing.T) {
	ns, node, pod := nodeAndPod(t)
	_, err := attachWith(ns, v1alpha1.ModeSubInterface, "10.0.63.3/24")
	if err == nil || !strings.Contains(err.Error(), "10.0.63.3") || !strings.Contains(err.Error(), "eth3") {
		t.Fatalf("Attach of the node's own 10.0.63.3: %v; want it refused, naming the address and eth3", err)
	}
	if left := leftInPod(t, pod); len(left) != 0 {
		t.Errorf("left in the pod: %v", left)
	}
	if _, _, addrs, _ := state(t, node, "eth3"); !slices.Equal(addrs, []string{"10.0.63.3/24"}) {
		t.Errorf("the node's eth3: %v", addrs)
	}
}

// An IPv4 address nobody on the link answers for is given to the pod.
func TestAttachTakesAFreeIPv4Address(t *testing.T) {
	for _, mode := range bothModes {
		t.Run(string(mode), func(t *testing.T) {
			ns, node, pod := nodeAndPod(t)
			neighborHolding(t, node, "10.0.63.77/24")
			r, err := attachWith(ns, mode, "10.0.63.78/24")
			must(t, err)
			if _, _, addrs, _ := state(t, pod, "roce0"); !slices.Equal(addrs, []string{"10.0.63.78/24"}) {
				t.Errorf("roce0 in the pod: %v", addrs)
			}
			must(t, Detach(ns, r))
		})
	}
}
