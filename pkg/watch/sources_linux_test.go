package watch

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// privateNetNS makes a network namespace without entering it and returns
// its file path and a handle inside it.
func privateNetNS(t *testing.T) (string, *netlink.Handle) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatalf("new netns: %v", err)
	}
	if err := netns.Set(orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(ns)), h
}

func waitEvent(t *testing.T, events <-chan Event, substr string) Event {
	t.Helper()
	deadline := time.After(5 * time.Second)
	var seen []string
	for {
		select {
		case ev := <-events:
			if strings.Contains(ev.String(), substr) {
				return ev
			}
			seen = append(seen, ev.String())
		case <-deadline:
			t.Fatalf("no event containing %q within 5s; saw %q", substr, seen)
		}
	}
}

func TestNetlinkEventsInNamespace(t *testing.T) {
	needRoot(t)
	nsPath, h := privateNetNS(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan Event, 256)
	log, _ := newLogger()
	if err := Netlink(ctx, nsPath, events, log); err != nil {
		t.Fatal(err)
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "wtest0"}, PeerName: "wtest1"}
	if err := h.LinkAdd(veth); err != nil {
		t.Fatalf("veth: %v", err)
	}
	waitEvent(t, events, "link wtest0")
	link, err := h.LinkByName("wtest0")
	if err != nil {
		t.Fatal(err)
	}
	ip, ipnet, _ := net.ParseCIDR("10.77.0.5/24")
	ipnet.IP = ip
	if err := h.AddrAdd(link, &netlink.Addr{IPNet: ipnet}); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, events, "address 10.77.0.5/24 added")
	if ev.Source != "netlink" {
		t.Fatalf("source %q", ev.Source)
	}
	if err := h.LinkSetUp(link); err != nil {
		t.Fatal(err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.ParseIP("10.77.0.1")}); err != nil {
		t.Fatalf("default route: %v", err)
	}
	waitEvent(t, events, "default route added")

	// Events of the caller's namespace must not leak in: the subscription
	// is in nsPath only.
	for len(events) > 0 {
		<-events
	}
	host, err := netlink.NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	hv := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "wthost0"}, PeerName: "wthost1"}
	if err := host.LinkAdd(hv); err != nil {
		t.Fatalf("host veth: %v", err)
	}
	defer host.LinkDel(hv)
	select {
	case ev := <-events:
		if strings.Contains(ev.Detail, "wthost") {
			t.Fatalf("saw a host-namespace event: %v", ev)
		}
	case <-time.After(300 * time.Millisecond):
	}
}

// TestUeventSocket sends a uevent-formatted datagram to the kernel uevent
// multicast group (root may) and checks filtering by subsystem.
func TestUeventSocket(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan Event, 16)
	log, _ := newLogger()
	if err := Uevents(ctx, nil, events, log); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	sendUevent := func(msg string) {
		t.Helper()
		if err := unix.Sendto(fd, []byte(msg), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
			t.Skipf("cannot multicast a uevent here: %v", err)
		}
	}
	sendUevent("add@/devices/virtual/net/wtx\x00ACTION=add\x00SUBSYSTEM=net\x00")
	sendUevent("add@/devices/pci0000:00/0000:17:00.0/infiniband/mlx5_9\x00ACTION=add\x00SUBSYSTEM=infiniband\x00NAME=mlx5_9\x00")
	ev := waitEvent(t, events, "infiniband")
	if ev.Source != "uevent" || ev.Detail != "infiniband mlx5_9 add" {
		t.Fatalf("event %+v", ev)
	}
	// The net uevent was sent first: had it passed the filter, it would have come first.
	cancel()
}
