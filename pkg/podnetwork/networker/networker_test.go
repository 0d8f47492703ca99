package networker

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/sandboxlist"
	"github.com/rdma-cdi/rdma-cdi/pkg/statefile"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// nodeWithEth3 is a node namespace holding eth3 (02:00:00:00:63:03,
// 10.0.63.3/24) and a networker that moves it into every sandbox's pod
// namespace as eth3.
func nodeWithEth3(t *testing.T) (node *netlink.Handle, n *Networker, mac net.HardwareAddr) {
	t.Helper()
	node, nodePath := fixture.NewNetNS(t)
	mac, _ = net.ParseMAC("02:00:00:00:63:03")
	if err := node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3", HardwareAddr: mac}, PeerName: "p-eth3"}); err != nil {
		t.Fatal(err)
	}
	eth3, err := node.LinkByName("eth3")
	if err != nil {
		t.Fatal(err)
	}
	if err := node.AddrAdd(eth3, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("10.0.63.3"), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	n = &Networker{
		Plan: func(context.Context, Sandbox, podnetwork.Allocator) ([]podnetwork.Attachment, error) {
			return []podnetwork.Attachment{{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"}}, nil
		},
		NodeNetNS: nodePath, Sysfs: t.TempDir(), IndexDir: t.TempDir(), Log: logrus.New(),
	}
	n.Restore(t.TempDir())
	return node, n, mac
}

// TestStoppedAfterTheRuntimeUnpinnedTheNamespace: CRI-O removes a
// sandbox's namespace (unmounts its /var/run/netns pin) before it tells
// NRI that the sandbox stopped. The netdev moved in must still come back
// to the node with its address, not die with the namespace.
func TestStoppedAfterTheRuntimeUnpinnedTheNamespace(t *testing.T) {
	node, n, _ := nodeWithEth3(t)
	name, podPath := fixture.NewUnheldNetNS(t)
	s := Sandbox{ID: "sandbox", UID: "uid", Namespace: "ns", Name: "pod", NetNS: podPath}
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
	if held := n.Namespaces.(*Local).Held(); held != 0 || len(n.sandboxes) != 0 {
		t.Errorf("after the stop: %d namespaces held, %d sandboxes recorded; want none", held, len(n.sandboxes))
	}
}

// TestPresentCatchesUpSandboxesStartedWhileAway: a sandbox the runtime
// started while the plugin was not connected gets its interface at the
// next synchronization, and every sandbox looked at, with an interface
// or without, is in the hook's index; one that ended leaves it.
func TestPresentCatchesUpSandboxesStartedWhileAway(t *testing.T) {
	node, nodePath := fixture.NewNetNS(t)
	_, podPath := fixture.NewUnheldNetNS(t)
	_, plainPath := fixture.NewUnheldNetNS(t)
	if err := node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3"}, PeerName: "p-eth3"}); err != nil {
		t.Fatal(err)
	}
	n := &Networker{
		Plan: func(_ context.Context, s Sandbox, _ podnetwork.Allocator) ([]podnetwork.Attachment, error) {
			switch s.Name {
			case "broken":
				return nil, errors.New("its HCA is gone")
			case "plain":
				return nil, nil
			}
			return []podnetwork.Attachment{{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"}}, nil
		},
		NodeNetNS: nodePath, Sysfs: t.TempDir(), IndexDir: t.TempDir(), Log: logrus.New(),
	}
	dataDir := t.TempDir()
	n.Restore(dataDir)
	ctx := context.Background()
	trainer := Sandbox{ID: "sb-trainer", UID: "u1", Namespace: "ml", Name: "trainer", NetNS: podPath}
	plain := Sandbox{ID: "sb-plain", UID: "u2", Namespace: "ml", Name: "plain", NetNS: plainPath}
	host := Sandbox{ID: "sb-host", UID: "u3", Namespace: "ml", Name: "host"}
	_, brokenPath := fixture.NewUnheldNetNS(t)
	broken := Sandbox{ID: "sb-broken", UID: "u4", Namespace: "ml", Name: "broken", NetNS: brokenPath}
	indexed := func(id string) bool {
		t.Helper()
		ok, err := sandboxlist.Contains(n.IndexDir, id)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if _, err := sandboxlist.Contains(n.IndexDir, trainer.ID); !errors.Is(err, sandboxlist.ErrNoIndex) {
		t.Fatalf("before the first synchronization: %v, want ErrNoIndex", err)
	}

	// One pod that cannot be given its interface fails neither the
	// synchronization (the runtime would drop the plugin) nor the others.
	if err := n.Present(ctx, []Sandbox{broken, trainer, plain, host}); err != nil {
		t.Fatal(err)
	}
	if indexed(broken.ID) {
		t.Error("a sandbox whose plan failed is in the index: its containers would start without their interface")
	}
	if _, err := node.LinkByName("eth3"); err == nil {
		t.Error("eth3 still in the node's namespace: the sandbox started while away got nothing")
	}
	if got := n.Interfaces("u1"); len(got) != 1 {
		t.Errorf("trainer holds %v, want mlx5_3's interface", got)
	}
	for _, s := range []Sandbox{trainer, plain} {
		if !indexed(s.ID) {
			t.Errorf("%s: not in the index after the synchronization", s)
		}
	}
	if indexed(host.ID) {
		t.Error("a host-network sandbox is in the index")
	}
	// The checkpoint holds what was attached, for a new process to give
	// back: not the sandboxes given nothing.
	b, err := os.ReadFile(filepath.Join(dataDir, CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	var c networkCheckpoint
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(c.Sandboxes)); !slices.Equal(got, []string{trainer.ID}) {
		t.Errorf("checkpoint names %v, want only %s", got, trainer.ID)
	}

	if err := n.Present(ctx, []Sandbox{host}); err != nil {
		t.Fatal(err)
	}
	if _, err := node.LinkByName("eth3"); err != nil {
		t.Errorf("eth3 not back after its sandbox ended: %v", err)
	}
	if indexed(trainer.ID) || indexed(plain.ID) {
		t.Error("ended sandboxes still in the index")
	}
}

// TestListedOnlyOnceAttached: a sandbox is recorded before its interfaces
// are applied (to be given back after a crash) but enters the hook's list
// only once they are in place, so a container the runtime starts while
// the attach still runs (its NRI call timed out waiting) is refused and
// retried rather than run without its interface.
func TestListedOnlyOnceAttached(t *testing.T) {
	node, nodePath := fixture.NewNetNS(t)
	_, podPath := fixture.NewUnheldNetNS(t)
	if err := node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3"}, PeerName: "p-eth3"}); err != nil {
		t.Fatal(err)
	}
	s := Sandbox{ID: "sb-trainer", UID: "u1", Namespace: "ml", Name: "trainer", NetNS: podPath}
	var listedMidway, reached bool
	n := &Networker{
		Plan: func(context.Context, Sandbox, podnetwork.Allocator) ([]podnetwork.Attachment, error) {
			return []podnetwork.Attachment{{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"}}, nil
		},
		NodeNetNS: nodePath, Sysfs: t.TempDir(), IndexDir: t.TempDir(), Log: logrus.New(),
	}
	// The crash point sits after the interfaces are applied, before the
	// last save: what the hook reads there is what it read all along.
	n.CrashPoint = func(statefile.FaultPoint) {
		reached = true
		listedMidway, _ = sandboxlist.Contains(n.IndexDir, s.ID)
	}
	dataDir := t.TempDir()
	n.Restore(dataDir)
	if err := n.Started(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if !reached {
		t.Fatal("the attach never reached its crash point")
	}
	if listedMidway {
		t.Error("the sandbox was in the hook's list while its interface was still being attached")
	}
	if ok, err := sandboxlist.Contains(n.IndexDir, s.ID); err != nil || !ok {
		t.Errorf("after the attach: listed %v (%v), want listed", ok, err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, CheckpointFile)); err != nil {
		t.Errorf("no records while the attach ran: %v", err)
	}
}

// TestSharedSubnetRulesUndoneAfterARestart: a pod given two interfaces in
// one subnet gets source rules, recorded with its interfaces; a new
// process that took over the records removes them at the sandbox's stop,
// from the namespace that lives on.
func TestSharedSubnetRulesUndoneAfterARestart(t *testing.T) {
	node, nodePath := fixture.NewNetNS(t)
	_, podPath := fixture.NewUnheldNetNS(t)
	for _, name := range []string{"eth1", "eth2"} {
		if err := node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "p-" + name}); err != nil {
			t.Fatal(err)
		}
	}
	plan := func(context.Context, Sandbox, podnetwork.Allocator) ([]podnetwork.Attachment, error) {
		return []podnetwork.Attachment{
			{Device: "mlx5_1", HostNetDev: "eth1", Mode: v1alpha1.ModeSubInterface, PodInterface: "net1", Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.60.201/24")}},
			{Device: "mlx5_2", HostNetDev: "eth2", Mode: v1alpha1.ModeSubInterface, PodInterface: "net2", Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.60.202/24")}},
		}, nil
	}
	dataDir := t.TempDir()
	first := &Networker{Plan: plan, NodeNetNS: nodePath, Sysfs: t.TempDir(), Log: logrus.New()}
	first.Restore(dataDir)
	s := Sandbox{ID: "sb-trainer", UID: "u1", Namespace: "ml", Name: "trainer", NetNS: podPath}
	if err := first.Started(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Namespaces.(*Local).LetGo(s.ID) }) // the process that "ended" held the namespace
	podNS, err := netns.GetFromPath(podPath)
	if err != nil {
		t.Fatal(err)
	}
	defer podNS.Close()
	pod, err := netlink.NewHandleAt(podNS)
	if err != nil {
		t.Fatal(err)
	}
	defer pod.Close()
	rulesTo := func(table int) int {
		t.Helper()
		rules, err := pod.RuleListFiltered(netlink.FAMILY_V4, &netlink.Rule{Table: table}, netlink.RT_FILTER_TABLE)
		if err != nil {
			t.Fatal(err)
		}
		return len(rules)
	}
	if rulesTo(1000) != 1 || rulesTo(1001) != 1 {
		t.Fatalf("rules to tables 1000 and 1001: %d and %d, want one each", rulesTo(1000), rulesTo(1001))
	}

	// The agent restarts: a new process, the same records.
	second := &Networker{NodeNetNS: nodePath, Sysfs: t.TempDir(), Log: logrus.New()}
	second.Restore(dataDir)
	records := second.sandboxes[s.ID].Records
	if len(records) != 2 || records[0].SourceRouting == nil || records[1].SourceRouting == nil || records[1].SourceRouting.Table != 1001 {
		t.Fatalf("the records taken over: %+v; want both with their source routing", records)
	}
	if err := second.Stopped(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if rulesTo(1000) != 0 || rulesTo(1001) != 0 {
		t.Errorf("after the stop: rules to tables 1000 and 1001: %d and %d, want none", rulesTo(1000), rulesTo(1001))
	}
}

// TestFailedGiveBackIsRetriedAndSparesTheSynchronization (round 3, M1): a
// sandbox ends while its netdev's name in the node is squatted, so the
// give-back fails. NRI's synchronization still succeeds (an error there
// has the runtime drop the plugin, for every pod), the sandbox stays
// recorded, and once the name is free again RetryGiveBacks brings the
// netdev back with its address.
func TestFailedGiveBackIsRetriedAndSparesTheSynchronization(t *testing.T) {
	node, n, mac := nodeWithEth3(t)
	_, podPath := fixture.NewUnheldNetNS(t)
	s := Sandbox{ID: "sandbox", UID: "uid", Namespace: "ns", Name: "pod", NetNS: podPath}
	ctx := context.Background()
	if err := n.Started(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3"}, PeerName: "squat"}); err != nil {
		t.Fatal(err)
	}
	if err := n.Present(ctx, nil); err != nil {
		t.Fatalf("the synchronization failed with the give-back: %v", err)
	}
	if _, held := n.sandboxes[s.ID]; !held {
		t.Fatal("the sandbox whose give-back failed is no longer recorded: nothing would retry it")
	}
	if left := n.RetryGiveBacks(); left != 1 {
		t.Fatalf("RetryGiveBacks with the name still squatted: %d left, want 1", left)
	}
	squat, err := node.LinkByName("squat")
	if err != nil {
		t.Fatal(err)
	}
	if err := node.LinkDel(squat); err != nil {
		t.Fatal(err)
	}
	if left := n.RetryGiveBacks(); left != 0 {
		t.Fatalf("RetryGiveBacks with the name free: %d left, want 0", left)
	}
	back, err := node.LinkByName("eth3")
	if err != nil || back.Attrs().HardwareAddr.String() != mac.String() {
		t.Fatalf("eth3 after the retry: %v (err %v), want the netdev with %s", back, err, mac)
	}
	if addrs, _ := node.AddrList(back, netlink.FAMILY_V4); len(addrs) != 1 || addrs[0].IPNet.String() != "10.0.63.3/24" {
		t.Errorf("eth3 back with %v, want 10.0.63.3/24", addrs)
	}
	if len(n.sandboxes) != 0 {
		t.Errorf("%d sandboxes still recorded after the retry", len(n.sandboxes))
	}
}

// TestChangedBeforeListed: Changed (the DRA driver writes its claims'
// device metadata there) sees the pod's interface before the sandbox is
// in the hook's list, so no container of the pod starts before the
// driver knew what the pod holds: a container's metadata file is the one
// there when it was created.
func TestChangedBeforeListed(t *testing.T) {
	node, nodePath := fixture.NewNetNS(t)
	_, podPath := fixture.NewUnheldNetNS(t)
	if err := node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3"}, PeerName: "p-eth3"}); err != nil {
		t.Fatal(err)
	}
	s := Sandbox{ID: "sb-trainer", UID: "u1", Namespace: "ml", Name: "trainer", NetNS: podPath}
	type seen struct {
		listed bool
		iface  string
	}
	var calls []seen
	n := &Networker{
		Plan: func(context.Context, Sandbox, podnetwork.Allocator) ([]podnetwork.Attachment, error) {
			return []podnetwork.Attachment{{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "net3"}}, nil
		},
		NodeNetNS: nodePath, Sysfs: t.TempDir(), IndexDir: t.TempDir(), Log: logrus.New(),
	}
	n.Changed = func() {
		listed, _ := sandboxlist.Contains(n.IndexDir, s.ID)
		calls = append(calls, seen{listed: listed, iface: n.Interfaces("u1")["mlx5_3"].Name})
	}
	n.Restore(t.TempDir())
	if err := n.Started(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0] != (seen{listed: false, iface: "net3"}) {
		t.Errorf("Changed saw %+v; want once, the pod holding net3 and its sandbox not listed yet", calls)
	}
	if ok, err := sandboxlist.Contains(n.IndexDir, s.ID); err != nil || !ok {
		t.Errorf("after the attach: listed %v (%v), want listed", ok, err)
	}
}
