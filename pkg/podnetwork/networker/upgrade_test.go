package networker

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/attach"
	"github.com/rdma-cdi/rdma-cdi/pkg/statefile"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// releasedRecords is the pod-network.json the previous release's save
// wrote (testdata, captured from that code): sandbox-trainer holds
// mlx5_3's eth3, moved in as net1, and a sub-interface of eth4 as net2.
const releasedRecords = "testdata/pod-network-v1.json"

// restoreFixture restores a networker from the released records, with the
// pod's namespace path replaced by podNetNS when that is set.
func restoreFixture(t *testing.T, podNetNS string) (*Networker, string) {
	t.Helper()
	b, err := os.ReadFile(releasedRecords)
	if err != nil {
		t.Fatal(err)
	}
	if podNetNS != "" {
		b = bytes.ReplaceAll(b, []byte("/var/run/netns/cni-1234"), []byte(podNetNS))
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CheckpointFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	n := &Networker{Log: log, Sysfs: t.TempDir()}
	n.Restore(dir)
	return n, dir
}

// An agent of this release takes over the records of the last one: every
// field the give-back reads is there.
func TestRestoreReadsTheLastReleasesRecords(t *testing.T) {
	n, _ := restoreFixture(t, "")
	e, ok := n.sandboxes["sandbox-trainer"]
	if !ok || e.Pod != "ml/trainer-0" || e.UID != "pod-uid-1" || e.NetNS != "/var/run/netns/cni-1234" || len(e.Records) != 2 {
		t.Fatalf("sandbox-trainer restored as %+v (found %v)", e, ok)
	}
	p := netip.MustParsePrefix
	moved, sub := e.Records[0], e.Records[1]
	if moved.Mode != v1alpha1.ModeMove || moved.Device != "mlx5_3" || moved.HostNetDev != "eth3" ||
		moved.PodInterface != "net1" || moved.HWAddr != "02:00:00:00:63:03" || moved.Saved == nil {
		t.Fatalf("moved netdev's record: %+v", moved)
	}
	saved := moved.Saved
	if saved.Name != "eth3" || saved.MTU != 4200 || !slices.Equal(saved.Addrs, []netip.Prefix{p("10.0.63.3/24"), p("fd00:63::3/64")}) ||
		!slices.Equal(saved.Routes, []attach.SavedRoute{{Dst: p("10.200.0.0/16"), Gw: netip.MustParseAddr("10.0.63.1"), Metric: 100}}) {
		t.Errorf("eth3's saved state: %+v", *saved)
	}
	if sub.Mode != v1alpha1.ModeSubInterface || sub.HostNetDev != "eth4" || sub.HWAddr != "02:00:00:00:64:82" ||
		!slices.Equal(sub.Addrs, []netip.Prefix{p("10.0.64.130/24")}) {
		t.Errorf("sub-interface's record: %+v", sub)
	}
	if got := n.Interfaces("pod-uid-1"); got["mlx5_3"].Name != "net1" || got["mlx5_4"].Name != "net2" {
		t.Errorf("the pod's interfaces for claim statuses: %+v", got)
	}
	if !n.addressesInUse()[netip.MustParseAddr("10.0.64.130")] {
		t.Error("the sub-interface's address is free again: it could go to a second pod")
	}
}

// The give-back runs from the last release's records: at the sandbox's
// stop eth3 comes back to the node under its own name with its addresses
// and route, and the sub-interface is deleted.
func TestGiveBackFromTheLastReleasesRecords(t *testing.T) {
	node, nodePath := fixture.NewNetNS(t)
	pod, podPath := fixture.NewNetNS(t)
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	if err := pod.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "net1", HardwareAddr: mac("02:00:00:00:63:03")}, PeerName: "peer1"}); err != nil {
		t.Fatal(err)
	}
	if err := pod.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "parent4"}, PeerName: "peer4"}); err != nil {
		t.Fatal(err)
	}
	parent, err := pod.LinkByName("parent4")
	if err != nil {
		t.Fatal(err)
	}
	if err := pod.LinkAdd(&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "net2", HardwareAddr: mac("02:00:00:00:64:82"), ParentIndex: parent.Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE}); err != nil {
		t.Fatal(err)
	}
	n, _ := restoreFixture(t, podPath)
	n.NodeNetNS = nodePath
	if err := n.Stopped(context.Background(), Sandbox{ID: "sandbox-trainer"}); err != nil {
		t.Fatalf("give-back: %v", err)
	}
	eth3, err := node.LinkByName("eth3")
	if err != nil {
		t.Fatalf("eth3 is not back in the node's namespace: %v", err)
	}
	addrs, err := node.AddrList(eth3, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) != 1 || addrs[0].IPNet.String() != "10.0.63.3/24" {
		t.Errorf("eth3 back with %v, want 10.0.63.3/24", addrs)
	}
	if eth3.Attrs().MTU != 4200 {
		t.Errorf("eth3 back with MTU %d, want 4200", eth3.Attrs().MTU)
	}
	routes, err := node.RouteList(eth3, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(routes, func(r netlink.Route) bool {
		return r.Dst != nil && r.Dst.String() == "10.200.0.0/16" && r.Gw.String() == "10.0.63.1"
	}) {
		t.Errorf("eth3's route to 10.200.0.0/16 is not back: %v", routes)
	}
	if _, err := pod.LinkByName("net2"); err == nil {
		t.Error("the sub-interface is still in the pod")
	}
	if len(n.sandboxes) != 0 {
		t.Errorf("records left: %+v", n.sandboxes)
	}
}

// Records that cannot be read are set aside, named in the log, and
// survive the next save: they are the account of the netdevs in pods an
// operator gives back by hand.
func TestRestoreSetsBadRecordsAsideAndKeepsThem(t *testing.T) {
	released, err := os.ReadFile(releasedRecords)
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{
		"cut short":     released[:len(released)/2],
		"newer version": bytes.Replace(released, []byte(`"version":1`), []byte(`"version":99`), 1),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, CheckpointFile)
			if err := os.WriteFile(path, body, 0o600); err != nil {
				t.Fatal(err)
			}
			var logged bytes.Buffer
			log := logrus.New()
			log.SetOutput(&logged)
			n := &Networker{Log: log}
			n.Restore(dir)
			if len(n.sandboxes) != 0 {
				t.Errorf("restored %+v from a bad file", n.sandboxes)
			}
			asides, _ := filepath.Glob(statefile.SetAsidePattern(path))
			if len(asides) != 1 {
				t.Fatalf("set-aside copies: %v", asides)
			}
			if !strings.Contains(logged.String(), asides[0]) || !strings.Contains(logged.String(), "level=error") {
				t.Errorf("the log does not name the copy %s: %s", asides[0], logged.String())
			}
			if err := n.save(); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(asides[0]); !bytes.Equal(b, body) {
				t.Errorf("the set-aside copy changed after a save: %q", b)
			}
		})
	}
}

// After a node's reboot the runtime still lists the sandboxes it knew
// (NOTREADY, from its metadata on disk) until the kubelet removes them,
// but their network namespaces died with the node. At the first
// synchronization their records are given back, not kept until that
// removal: found by TestKubePodNetworkLifecycle, whose pod's old sandbox
// stayed recorded after the pod was gone.
func TestSynchronizationReleasesSandboxesWhoseNamespaceIsGone(t *testing.T) {
	node, nodePath := fixture.NewNetNS(t)
	// The moved netdev is back in the node's namespace as the boot named
	// it, without its addresses.
	mac, _ := net.ParseMAC("02:00:00:00:63:03")
	if err := node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3", HardwareAddr: mac}, PeerName: "peer3"}); err != nil {
		t.Fatal(err)
	}
	n, _ := restoreFixture(t, filepath.Join(t.TempDir(), "cni-gone-with-the-reboot"))
	n.NodeNetNS = nodePath
	listed := []Sandbox{{ID: "sandbox-trainer", Namespace: "ml", Name: "trainer-0"}}
	if err := n.Present(context.Background(), listed); err != nil {
		t.Fatalf("synchronization: %v", err)
	}
	if len(n.sandboxes) != 0 {
		t.Errorf("records of a sandbox whose namespace is gone still kept: %+v", n.sandboxes)
	}
	eth3, err := node.LinkByName("eth3")
	if err != nil {
		t.Fatal(err)
	}
	if addrs, _ := node.AddrList(eth3, netlink.FAMILY_V4); len(addrs) != 1 || addrs[0].IPNet.String() != "10.0.63.3/24" {
		t.Errorf("eth3 given back with %v, want its saved 10.0.63.3/24", addrs)
	}
}
