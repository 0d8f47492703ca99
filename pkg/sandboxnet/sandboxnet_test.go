package sandboxnet

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/rdma-cdi/rdma-cdi/pkg/nrisandbox"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnet"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// unheldNetNS makes a named network namespace (/run/netns/NAME) that
// nothing but its bind mount holds, as a runtime pins a sandbox's, and
// returns its name and path.
func unheldNetNS(t *testing.T) (string, string) {
	t.Helper()
	name := fmt.Sprintf("rdmacdi-sbn-%d", os.Getpid())
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		ns, err := netns.NewNamed(name)
		if err == nil {
			ns.Close()
		}
		if serr := netns.Set(orig); serr == nil {
			runtime.UnlockOSThread()
		} else if err == nil {
			err = serr // the thread stays locked and goes with the goroutine
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("network namespace %s: %v", name, err)
	}
	t.Cleanup(func() { _ = netns.DeleteNamed(name) })
	return name, filepath.Join("/run/netns", name)
}

// TestStoppedAfterTheRuntimeUnpinnedTheNamespace: CRI-O removes a
// sandbox's namespace (unmounts its /var/run/netns pin) before it tells
// NRI that the sandbox stopped. The netdev moved in must still come back
// to the node with its address, not die with the namespace.
func TestStoppedAfterTheRuntimeUnpinnedTheNamespace(t *testing.T) {
	node, nodePath := fixture.NewNetNS(t)
	name, podPath := unheldNetNS(t)
	mac, _ := net.ParseMAC("02:00:00:00:63:03")
	if err := node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3", HardwareAddr: mac}, PeerName: "p-eth3"}); err != nil {
		t.Fatal(err)
	}
	eth3, err := node.LinkByName("eth3")
	if err != nil {
		t.Fatal(err)
	}
	_, ipnet, _ := net.ParseCIDR("10.0.63.0/24")
	ipnet.IP = net.ParseIP("10.0.63.3")
	if err := node.AddrAdd(eth3, &netlink.Addr{IPNet: ipnet}); err != nil {
		t.Fatal(err)
	}
	n := &Networker{
		Plan: func(context.Context, nrisandbox.Sandbox, podnet.Allocator) ([]podnet.Attachment, error) {
			return []podnet.Attachment{{Device: "mlx5_3", HostNetDev: "eth3", Mode: podnet.ModeMove, PodInterface: "eth3"}}, nil
		},
		NodeNetNS: nodePath, Sysfs: t.TempDir(), Log: logrus.New(),
	}
	n.Restore(t.TempDir())
	s := nrisandbox.Sandbox{ID: "sandbox", UID: "uid", Namespace: "ns", Name: "pod", NetNS: podPath}
	ctx := context.Background()
	if err := n.Started(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := node.LinkByName("eth3"); err == nil {
		t.Fatal("eth3 still in the node's namespace after the sandbox started")
	}
	if err := netns.DeleteNamed(name); err != nil {
		t.Fatal(err)
	}
	if err := n.Stopped(ctx, s); err != nil {
		t.Fatalf("Stopped after the namespace was unpinned: %v", err)
	}
	back, err := node.LinkByName("eth3")
	if err != nil {
		t.Fatalf("eth3 is not back in the node's namespace: %v", err)
	}
	addrs, err := node.AddrList(back, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range addrs {
		got = append(got, a.IPNet.String())
	}
	if !slices.Equal(got, []string{"10.0.63.3/24"}) {
		t.Errorf("eth3 back with %v, want 10.0.63.3/24", got)
	}
	if len(n.held) != 0 || len(n.sandboxes) != 0 {
		t.Errorf("after the stop: %d namespaces held, %d sandboxes recorded; want none", len(n.held), len(n.sandboxes))
	}
}
