package netnsworker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/attach"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/networker"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

func quietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// serve starts a worker for node's namespace, pods' namespaces under the
// fixtures' netns directory, and gives a client of it.
func serve(t *testing.T, nodePath string, peerUID int) (*Server, *Client) {
	t.Helper()
	s := &Server{NetNSDir: filepath.Dir(nodePath), NodeNetNS: nodePath, PeerUID: peerUID, Log: quietLog()}
	socket := filepath.Join(t.TempDir(), "run", "worker.sock")
	l, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(func() { l.Close(); s.Close() })
	fi, err := os.Stat(socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	c := &Client{Socket: socket}
	t.Cleanup(func() { c.Close() })
	return s, c
}

// sidePath is a path beside the fixtures' namespaces, removed at the end.
func sidePath(t *testing.T, dir, kind string) string {
	t.Helper()
	p := filepath.Join(dir, fmt.Sprintf("rdmacdi-%s-%d", kind, os.Getpid()))
	t.Cleanup(func() { _ = os.Remove(p) })
	return p
}

// TestWorkerRefusesWhatIsNotAPodsNamespace: the agent asking is the
// network-facing piece; the worker checks every namespace path itself. A
// path outside the netns directory, one not clean, a symbolic link in it
// (to a pod's namespace, or to the node's), a plain file, the node's own
// namespace pinned there and the worker's own are each refused, saying
// why, and nothing is planned.
func TestWorkerRefusesWhatIsNotAPodsNamespace(t *testing.T) {
	_, nodePath := fixture.NewNetNS(t)
	_, podPath := fixture.NewUnheldNetNS(t)
	dir := filepath.Dir(nodePath)
	_, c := serve(t, nodePath, 0)

	link := sidePath(t, dir, "link")
	if err := os.Symlink(podPath, link); err != nil {
		t.Fatal(err)
	}
	nodeLink := sidePath(t, dir, "nodelink")
	if err := os.Symlink("/proc/1/ns/net", nodeLink); err != nil {
		t.Fatal(err)
	}
	plain := sidePath(t, dir, "plain")
	if err := os.WriteFile(plain, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	own := sidePath(t, dir, "own")
	if err := os.WriteFile(own, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/proc/self/ns/net", own, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(own, unix.MNT_DETACH) })

	for _, c2 := range []struct{ path, want string }{
		{"/tmp/pod", "is not a file directly under " + dir},
		{"/proc/1/ns/net", "is not a file directly under"},
		{dir + "/../netns/" + filepath.Base(podPath), "is not a file directly under"},
		{dir + "/sub/" + filepath.Base(podPath), "is not a file directly under"},
		{filepath.Base(podPath), "is not a file directly under"},
		{dir, "is not a file directly under"},
		{link, "is a symbolic link: refused"},
		{nodeLink, "is a symbolic link: refused"},
		{plain, "is not a namespace (nsfs): refused"},
		{nodePath, "is the node's own: refused"},
		{own, "is the node's own: refused"},
	} {
		plans := []podnetwork.Attachment{{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeSubInterface, PodInterface: "net1"}}
		if _, err := c.Plan(c2.path, plans); err == nil || !strings.Contains(err.Error(), c2.want) {
			t.Errorf("Plan in %s: %v, want an error with %q", c2.path, err, c2.want)
		}
		if _, err := c.Apply("sb", c2.path, []attach.Record{{Attachment: plans[0]}}); err == nil || !strings.Contains(err.Error(), c2.want) {
			t.Errorf("Apply in %s: %v, want an error with %q", c2.path, err, c2.want)
		}
		if left, err := c.Release("sb", c2.path, []attach.Record{{Attachment: plans[0]}}); err == nil || len(left) != 1 {
			t.Errorf("Release in %s: %v (%d left), want a refusal with the record left", c2.path, err, len(left))
		}
	}
	// The refusals are the worker's, not a broken connection's.
	if names, err := c.PodLinkNames(podPath); err != nil || !names["lo"] {
		t.Errorf("PodLinkNames of a pod's namespace after the refusals: %v, %v", names, err)
	}
}

// TestWorkerRefusesAPeerNotRoot: the worker serves only the uid it is
// told (root's, the agent's): another's connection is closed unserved.
func TestWorkerRefusesAPeerNotRoot(t *testing.T) {
	_, nodePath := fixture.NewNetNS(t)
	_, podPath := fixture.NewUnheldNetNS(t)
	_, c := serve(t, nodePath, 4242) // the test runs as root: not the uid served
	if _, err := c.PodLinkNames(podPath); err == nil {
		t.Fatal("a peer of another uid was served")
	}

	socket := filepath.Join(t.TempDir(), "s.sock")
	l, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		conn, err := net.Dial("unix", socket)
		if err == nil {
			defer conn.Close()
			_, _ = conn.Read(make([]byte, 1))
		}
	}()
	conn, err := l.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := CheckPeer(conn, 4242); err == nil || !strings.Contains(err.Error(), "refused a connection from uid 0") {
		t.Errorf("CheckPeer of root's connection, serving uid 4242: %v", err)
	}
	if err := CheckPeer(conn, 0); err != nil {
		t.Errorf("CheckPeer of root's connection, serving root: %v", err)
	}
}

// TestNetworkerThroughTheWorker: a networker with no capability work of
// its own moves eth3 into a pod and makes a sub-interface of eth4 there
// through the worker, records what the worker reports, and has both back
// at the sandbox's stop, after the runtime unpinned the namespace (the
// worker held it). A move whose record does not name the netdev as it is
// is refused by the worker.
func TestNetworkerThroughTheWorker(t *testing.T) {
	node, nodePath := fixture.NewNetNS(t)
	name, podPath := fixture.NewUnheldNetNS(t)
	mac, _ := net.ParseMAC("02:00:00:00:63:03")
	for _, l := range []netlink.Link{
		&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3", HardwareAddr: mac}, PeerName: "p-eth3"},
		&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth4"}, PeerName: "p-eth4"},
	} {
		if err := node.LinkAdd(l); err != nil {
			t.Fatal(err)
		}
	}
	eth3, err := node.LinkByName("eth3")
	if err != nil {
		t.Fatal(err)
	}
	if err := node.AddrAdd(eth3, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("10.0.63.3"), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	_, c := serve(t, nodePath, 0)

	forged := attach.Record{Attachment: podnetwork.Attachment{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"},
		HWAddr: "02:00:00:00:99:99", Kind: "veth", Saved: &attach.Saved{Name: "eth3"}}
	if _, err := c.Apply("forged", podPath, []attach.Record{forged}); err == nil || !strings.Contains(err.Error(), "the record says 02:00:00:00:99:99") {
		t.Errorf("Apply of a record naming another netdev: %v", err)
	}

	n := &networker.Networker{
		Plan: func(context.Context, networker.Sandbox, podnetwork.Allocator) ([]podnetwork.Attachment, error) {
			return []podnetwork.Attachment{
				{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"},
				{Device: "mlx5_4", HostNetDev: "eth4", Mode: v1alpha1.ModeSubInterface, PodInterface: "net2", Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.64.130/24")}},
			}, nil
		},
		Namespaces: c, Sysfs: t.TempDir(), IndexDir: t.TempDir(), Log: quietLog(),
	}
	n.Restore(t.TempDir())
	s := networker.Sandbox{ID: "sb", UID: "uid", Namespace: "ns", Name: "pod", NetNS: podPath}
	if err := n.Started(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	got := n.Interfaces("uid")
	if got["mlx5_3"].Name != "eth3" || got["mlx5_3"].HWAddr != mac.String() ||
		got["mlx5_4"].Name != "net2" || len(got["mlx5_4"].Addrs) != 1 {
		t.Errorf("the pod's interfaces as the worker reported them: %+v", got)
	}
	podNS, err := netns.GetFromPath(podPath)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := netlink.NewHandleAt(podNS)
	podNS.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"eth3", "net2"} {
		if _, err := pod.LinkByName(l); err != nil {
			t.Errorf("%s in the pod: %v", l, err)
		}
	}
	pod.Close()
	if gone, err := c.Gone(s.ID, podPath); err != nil || gone {
		t.Errorf("Gone of a live sandbox: %v, %v", gone, err)
	}
	if err := netns.DeleteNamed(name); err != nil {
		t.Fatal(err)
	}
	if gone, err := c.Gone(s.ID, podPath); err != nil || gone {
		t.Errorf("Gone of a held sandbox whose pin is removed: %v, %v; the worker holds it", gone, err)
	}
	if err := n.Stopped(context.Background(), s); err != nil {
		t.Fatalf("Stopped: %v", err)
	}
	back, err := node.LinkByName("eth3")
	if err != nil {
		t.Fatalf("eth3 is not back in the node's namespace: %v", err)
	}
	addrs, err := node.AddrList(back, netlink.FAMILY_V4)
	if err != nil || len(addrs) != 1 || addrs[0].IPNet.String() != "10.0.63.3/24" {
		t.Errorf("eth3 back with %v (%v), want 10.0.63.3/24", addrs, err)
	}
	if gone, err := c.Gone(s.ID, podPath); err != nil || !gone {
		t.Errorf("Gone after the give-back, the pin removed: %v, %v", gone, err)
	}
}

// TestClientReconnects: a worker that restarted is reached again on the
// next request; a request while it is away fails, saying where.
func TestClientReconnects(t *testing.T) {
	_, nodePath := fixture.NewNetNS(t)
	_, podPath := fixture.NewUnheldNetNS(t)
	s := &Server{NetNSDir: filepath.Dir(nodePath), NodeNetNS: nodePath, Log: quietLog()}
	socket := filepath.Join(t.TempDir(), "worker.sock")
	start := func() *net.UnixListener {
		l, err := Listen(socket)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = s.Serve(l) }()
		return l
	}
	l := start()
	c := &Client{Socket: socket}
	defer c.Close()
	if _, err := c.PodLinkNames(podPath); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := c.PodLinkNames(podPath); err == nil || !strings.Contains(err.Error(), socket) {
		t.Errorf("with the worker away: %v, want an error naming %s", err, socket)
	}
	l = start()
	defer l.Close()
	if _, err := c.PodLinkNames(podPath); err != nil {
		t.Errorf("after the worker came back: %v", err)
	}
	if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Error(err)
	}
}

// TestReadyWaitsForALateWorker: after a reboot the worker's container may
// start after the agent's. Ready returns only once the worker listens, and
// the request after it is served on that connection; with no worker it
// returns when its context ends, naming the socket.
func TestReadyWaitsForALateWorker(t *testing.T) {
	_, nodePath := fixture.NewNetNS(t)
	socket := filepath.Join(t.TempDir(), "run", "worker.sock")
	c := &Client{Socket: socket}
	t.Cleanup(func() { c.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := c.Ready(ctx); err == nil || !strings.Contains(err.Error(), socket) {
		t.Fatalf("Ready with no worker: %v, want the context's error naming %s", err, socket)
	}

	var listening atomic.Bool // set before Listen: no dial succeeds before it
	go func() {
		time.Sleep(2 * readyPoll)
		s := &Server{NetNSDir: filepath.Dir(nodePath), NodeNetNS: nodePath, Log: quietLog()}
		listening.Store(true)
		l, err := Listen(socket)
		if err != nil {
			t.Error(err)
			return
		}
		t.Cleanup(func() { l.Close(); s.Close() })
		_ = s.Serve(l)
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if !listening.Load() {
		t.Fatal("Ready returned before the worker listened")
	}
	if _, err := c.Gone("sb", filepath.Join(filepath.Dir(nodePath), "no-such-pod")); err != nil {
		t.Errorf("a request after Ready: %v", err)
	}
}

// TestPingAnswersUnlessTheWorkerIsStuck: a worker answers a ping, and one
// whose state a request holds forever answers none within the client's
// timeout (what its liveness probe sees).
func TestPingAnswersUnlessTheWorkerIsStuck(t *testing.T) {
	_, nodePath := fixture.NewNetNS(t)
	s, c := serve(t, nodePath, 0)
	if err := c.Ping(); err != nil {
		t.Fatalf("ping: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c.Timeout = 200 * time.Millisecond
	if err := c.Ping(); err == nil || !strings.Contains(err.Error(), "no answer within") {
		t.Errorf("ping of a stuck worker: %v, want no answer within %v", err, c.Timeout)
	}
}
