package networker

// Round 3's red-team reproductions (../shared/redteam/round3/pkg/sandboxnet),
// ported to today's code: the networker's NRI handlers (Started, Stopped,
// Present) and its give-back retry (RetryGiveBacks, every 30 s in
// Service.Run), with the planner doing what the DRA driver does with a
// claim's config (v1alpha1.Decode, MergeClassAndClaim, podnetwork.Plan).
// They log what each attack gets now; they assert nothing.

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

func rtMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// rtMoveNetworker is a node namespace holding eth3 (02:00:00:00:63:03) and
// a networker that moves it into every sandbox's namespace.
func rtMoveNetworker(t *testing.T) (*netlink.Handle, *Networker) {
	node, nodePath := fixture.NewNetNS(t)
	mac, _ := net.ParseMAC("02:00:00:00:63:03")
	rtMust(t, node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3", HardwareAddr: mac}, PeerName: "p-eth3"}))
	n := &Networker{
		Plan: func(context.Context, Sandbox, podnetwork.Allocator) ([]podnetwork.Attachment, error) {
			return []podnetwork.Attachment{{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"}}, nil
		},
		NodeNetNS: nodePath, Sysfs: t.TempDir(), IndexDir: t.TempDir(), Log: logrus.New(),
	}
	n.Restore(t.TempDir())
	return node, n
}

func rtPodHandle(t *testing.T, path string) *netlink.Handle {
	podNS, err := netns.GetFromPath(path)
	rtMust(t, err)
	defer podNS.Close()
	pod, err := netlink.NewHandleAt(podNS)
	rtMust(t, err)
	return pod
}

// rtAfterStop runs what happens after the tenant's pod is deleted: the
// stop, the runtime removing the pin, the give-back retries, the HCA's
// next tenant and three NRI synchronizations.
func rtAfterStop(t *testing.T, node *netlink.Handle, n *Networker, s Sandbox, name string) {
	ctx := context.Background()
	t.Logf("StopPodSandbox: %v", n.Stopped(ctx, s))
	rtMust(t, netns.DeleteNamed(name)) // the runtime removes the pin
	t.Logf("after the stop: %d records kept, %d pod namespaces held open by the agent, %d ended sandboxes to retry", len(n.sandboxes), len(n.held), len(n.ended))
	for i := range 3 {
		t.Logf("RetryGiveBacks #%d: %d still held", i+1, n.RetryGiveBacks())
	}
	_, err := node.LinkByName("eth3")
	t.Logf("eth3 in the node's namespace: err=%v", err)
	_, pod2Path := fixture.NewUnheldNetNS(t)
	s2 := Sandbox{ID: "sb-b", UID: "ub", Namespace: "tenant-b", Name: "b", NetNS: pod2Path}
	t.Logf("next tenant's sandbox with the same HCA: %v", n.Started(ctx, s2))
	for i := range 3 {
		t.Logf("NRI Synchronize #%d (sandbox a gone): Present -> %v", i+1, n.Present(ctx, nil))
	}
}

// M1, first trigger: the tenant changes its moved netdev's MAC.
func TestRedTeamMACChangeKeepsTheNetdevAndBreaksSync(t *testing.T) {
	node, n := rtMoveNetworker(t)
	name, podPath := fixture.NewUnheldNetNS(t)
	s := Sandbox{ID: "sb-a", UID: "ua", Namespace: "tenant-a", Name: "a", NetNS: podPath}
	rtMust(t, n.Started(context.Background(), s))
	pod := rtPodHandle(t, podPath)
	in, err := pod.LinkByName("eth3")
	rtMust(t, err)
	rtMust(t, pod.LinkSetDown(in))
	other, _ := net.ParseMAC("02:00:00:00:99:99")
	rtMust(t, pod.LinkSetHardwareAddr(in, other))
	pod.Close()
	rtAfterStop(t, node, n, s, name)
}

// M1, second trigger (the netattach reproduction TestRedTeamTravelNameSquat,
// followed through the networker): the tenant makes a link under the name
// its netdev travels home under, in its own namespace, before its pod ends.
func TestRedTeamTravelNameSquatKeepsTheNetdev(t *testing.T) {
	node, n := rtMoveNetworker(t)
	name, podPath := fixture.NewUnheldNetNS(t)
	s := Sandbox{ID: "sb-a", UID: "ua", Namespace: "tenant-a", Name: "a", NetNS: podPath}
	rtMust(t, n.Started(context.Background(), s))
	pod := rtPodHandle(t, podPath)
	rtMust(t, pod.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "rdmamv00006303"}, PeerName: "x"}))
	pod.Close()
	rtAfterStop(t, node, n, s, name)
}

// M2: one pod's static addresses take the node's whole range. The planner
// is the DRA driver's: the claim's config merged under its DeviceClass's
// (MergeClassAndClaim), then podnetwork.Plan. class is the DeviceClass's
// config: none (the original's set-up) or one whose operator lets claims
// set addresses in the fabric's subnet.
func TestRedTeamStaticAddressesExhaustTheRange(t *testing.T) {
	for _, class := range []string{"", `"allowedPrefixes":["10.0.63.0/24"]`} {
		t.Run("class{"+class+"}", func(t *testing.T) {
			node, nodePath := fixture.NewNetNS(t)
			_, hogPath := fixture.NewUnheldNetNS(t)
			_, victimPath := fixture.NewUnheldNetNS(t)
			rtMust(t, node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth3"}, PeerName: "p-eth3"}))
			for _, l := range []string{"eth3", "p-eth3"} {
				ll, _ := node.LinkByName(l)
				rtMust(t, node.LinkSetUp(ll))
			}
			eth3, _ := node.LinkByName("eth3")
			ip, ipn, _ := net.ParseCIDR("10.0.63.3/24")
			ipn.IP = ip
			rtMust(t, node.AddrAdd(eth3, &netlink.Addr{IPNet: ipn}))
			r, _ := podnetwork.ParseRange("10.0.63.200-10.0.63.203")
			const header = `"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig"`
			classCfg, err := v1alpha1.Decode([]byte(`{` + header + map[bool]string{true: "," + class, false: ""}[class != ""] + `}`))
			rtMust(t, err)
			configs := map[string]string{
				"hog":    `{` + header + `,"mode":"sub-interface","addresses":["10.0.63.200/24","10.0.63.201/24","10.0.63.202/24","10.0.63.203/24"]}`,
				"victim": `{` + header + `,"mode":"sub-interface"}`,
			}
			n := &Networker{
				Plan: func(_ context.Context, s Sandbox, pool podnetwork.Allocator) ([]podnetwork.Attachment, error) {
					own, err := v1alpha1.Decode([]byte(configs[s.Name]))
					if err != nil {
						return nil, err
					}
					cfg, err := v1alpha1.MergeClassAndClaim([]v1alpha1.PodNetworkConfig{classCfg}, []v1alpha1.PodNetworkConfig{own})
					if err != nil {
						return nil, err
					}
					dev := podnetwork.Device{IBDev: "mlx5_3", NetDev: "eth3", RoCE: true, Shared: true, Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.63.3/24")}}
					a, ok, err := podnetwork.Plan(dev, cfg, pool)
					if !ok || err != nil {
						return nil, err
					}
					return []podnetwork.Attachment{a}, nil
				},
				NodeNetNS: nodePath, Sysfs: t.TempDir(), Addresses: StaticRanges{"eth3": {r}}, Log: logrus.New(),
			}
			n.Restore(t.TempDir())
			ctx := context.Background()
			hog := Sandbox{ID: "sb-hog", UID: "u1", Namespace: "tenant-a", Name: "hog", NetNS: hogPath}
			victim := Sandbox{ID: "sb-victim", UID: "u2", Namespace: "tenant-b", Name: "victim", NetNS: victimPath}
			t.Logf("tenant A's pod with four static addresses: %v", n.Started(ctx, hog))
			t.Logf("tenant B's pod, range address: %v", n.Started(ctx, victim))
			t.Logf("in use now: %v", n.addressesInUse())
			_ = n.Stopped(ctx, hog)
			_ = n.Stopped(ctx, victim)
		})
	}
}
