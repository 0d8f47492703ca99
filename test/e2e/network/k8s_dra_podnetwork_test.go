package network

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/dradriver"
	"github.com/rdma-cdi/rdma-cdi/pkg/hooks"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/networker"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// podNetworkRange is the node's sub-interface block on seed 002's eth1
// (25.11.128.2/27); podNetworkRanges gives every RoCE netdev one.
const podNetworkRange = "25.11.128.10-25.11.128.20"

// podNetworkRanges are subnetRanges of a seed 002 node, checked: eth1's is
// podNetworkRange.
func podNetworkRanges(t testing.TB, node *e2e.FixtureNode) map[string]any {
	t.Helper()
	out := map[string]any{}
	for netdev, block := range subnetRanges(node) {
		out[netdev] = block
	}
	if out["eth1"] != podNetworkRange {
		t.Fatalf("eth1's range %v, want %s", out["eth1"], podNetworkRange)
	}
	return out
}

// subnetRanges are eleven addresses from the tenth of each fixture
// netdev's IPv4 subnet on (the default route's netdev left out), by netdev.
func subnetRanges(node *e2e.FixtureNode) map[string]string {
	out := map[string]string{}
	for _, n := range node.Topo.NetDevs {
		if len(n.Addrs) == 0 || n.DefaultRoute {
			continue
		}
		p, err := netip.ParsePrefix(n.Addrs[0])
		if err != nil || !p.Addr().Is4() {
			continue
		}
		first := p.Masked().Addr()
		for range 10 {
			first = first.Next()
		}
		last := first
		for range 10 {
			last = last.Next()
		}
		out[n.Name] = first.String() + "-" + last.String()
	}
	return out
}

// podNetworkDRANode is a seed 002 node of its own (the GID kernel writes
// its sysfs) with a pod network, the GID kernel following its netdevs, and
// the chart in mode dra with podNetwork on. opts say more of the node (its
// Runtime); the pod network, DRAExtendedResource and the Glibc image are
// added to them.
func podNetworkDRANode(t testing.TB, opts e2e.KubeOptions) (*e2e.FixtureNode, *e2e.KubeEnv) {
	t.Helper()
	node := e2e.NewFixtureNode(t, "seed002")
	opts.PodNetwork = true
	opts.FeatureGates = map[string]bool{"DRAExtendedResource": true}
	opts.Images = append(slices.Clone(opts.Images), e2e.Glibc.DockerArchive(t))
	k := e2e.KubeNode(t, node, opts)
	startGIDKernel(t, k)
	pod := k.InstallAgent(t, "dra", map[string]any{
		"podNetwork": map[string]any{"enabled": true, "ranges": podNetworkRanges(t, node)},
	})
	e2e.WaitSlice(t, k, func(s []resourceapi.Device) bool { return len(s) == 9 }, "9 devices",
		func() string { return k.Logs(e2e.AgentNamespace, pod, "dra") })
	return node, k
}

// startGIDKernel runs the fixture's emulation of ib_core's GID upkeep on
// k's node until the test ends: addresses appearing on an HCA's netdev, or
// on a macvlan of it, in the node's namespace or a pod's, get GID entries
// as the kernel would make them. It returns the history of the entries it
// wrote, for checks made after an interface is gone.
func startGIDKernel(t testing.TB, k *e2e.KubeEnv) *gidHistory {
	t.Helper()
	h := &gidHistory{}
	gk, err := fixture.NewGIDKernel(fixture.GIDKernelConfig{
		Topology:  k.Node.Topo,
		Sysfs:     k.Node.Sys,
		NodeNetNS: fmt.Sprintf("/proc/%d/ns/net", k.PID()),
		NetNSDir:  k.NodePath("/run/netns"),
		OnError:   func(err error) { t.Logf("GID kernel: %v", err) },
		OnWrite:   h.add,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = gk.Run(ctx, 50*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// gidHistory is every GID entry a GID kernel wrote, by device.
type gidHistory struct {
	mu      sync.Mutex
	written map[string][]gidWrite
}

type gidWrite struct {
	index int
	slot  fixture.GIDSlot
}

func (h *gidHistory) add(device string, _, index int, slot fixture.GIDSlot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.written == nil {
		h.written = map[string][]gidWrite{}
	}
	h.written[device] = append(h.written[device], gidWrite{index, slot})
}

// roceV2 is the index and netdev of the last RoCE v2 entry written for addr
// on device's port while ndev carried it; -1 when there was none. The
// netdev's name matters: a moved netdev is renamed to its travel name
// before it leaves the pod, with the pod's address still on it, and the
// kernel's entry follows the rename.
func (h *gidHistory) roceV2(device string, addr netip.Addr, ndev string) (int, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	want := netip.AddrFrom16(addr.As16())
	ws := h.written[device]
	for i := len(ws) - 1; i >= 0; i-- {
		g, err := netip.ParseAddr(ws[i].slot.GID)
		if err == nil && g == want && ws[i].slot.Type == "RoCE v2" && ws[i].slot.NDev == ndev {
			return ws[i].index, ws[i].slot.NDev
		}
	}
	return -1, ""
}

// podNetPod is a busybox pod in its own network namespace (no
// hostNetwork, no toleration) using a claim from template.
func podNetPod(ns, name, template string) string { return podNetPodOf(ns, name, template, e2e.BB) }

// podNetPodOf is podNetPod with another image.
func podNetPodOf(ns, name, template string, img e2e.Image) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
spec:
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  resourceClaims:
    - name: rdma
      resourceClaimTemplateName: %s
  containers:
    - name: main
      image: %s
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", "exec sleep 3600"]
      resources:
        claims:
          - name: rdma
`, name, ns, template, img.Ref)
}

// nodeNetState is the node namespace's netdevs as a pod network leaves
// them: name, MAC, MTU, state and global addresses of each, but the pod
// network's own bridge and veths.
func nodeNetState(t *testing.T, k *e2e.KubeEnv) []string {
	t.Helper()
	out, se, err := e2e.Run(k.InNode("ip", "-j", "addr", "show"))
	if err != nil {
		t.Fatalf("ip addr in the node: %v: %s", err, se)
	}
	var links []struct {
		IfName    string `json:"ifname"`
		Address   string `json:"address"`
		MTU       int    `json:"mtu"`
		OperState string `json:"operstate"`
		AddrInfo  []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
			Scope     string `json:"scope"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil {
		t.Fatalf("ip -j addr: %v\n%s", err, out)
	}
	var state []string
	for _, l := range links {
		if l.IfName == "cni0" || strings.HasPrefix(l.IfName, "veth") {
			continue
		}
		var addrs []string
		for _, a := range l.AddrInfo {
			if a.Scope == "global" {
				addrs = append(addrs, fmt.Sprintf("%s/%d", a.Local, a.PrefixLen))
			}
		}
		slices.Sort(addrs)
		state = append(state, fmt.Sprintf("%s %s mtu %d %s %v", l.IfName, l.Address, l.MTU, l.OperState, addrs))
	}
	slices.Sort(state)
	routes, se, err := e2e.Run(k.InNode("ip", "route", "show"))
	if err != nil {
		t.Fatalf("ip route in the node: %v: %s", err, se)
	}
	for _, r := range strings.Split(strings.TrimSpace(routes), "\n") {
		if !strings.Contains(r, "cni0") {
			state = append(state, "route "+r)
		}
	}
	return state
}

// roceV2Index is the index of the RoCE v2 GID of addr on ibdev's port 1 in
// the fixture's sysfs, as the GID kernel wrote it, with the netdev it
// names; -1 when there is none.
func roceV2Index(t *testing.T, node *e2e.FixtureNode, ibdev string, addr netip.Addr) (int, string) {
	t.Helper()
	port := filepath.Join(node.Sys, "class/infiniband", ibdev, "ports/1")
	want := netip.AddrFrom16(addr.As16())
	for i := 0; i < 256; i++ {
		g, err := os.ReadFile(filepath.Join(port, "gids", fmt.Sprint(i)))
		if err != nil {
			break
		}
		gid, err := netip.ParseAddr(strings.TrimSpace(string(g)))
		typ, _ := os.ReadFile(filepath.Join(port, "gid_attrs/types", fmt.Sprint(i)))
		if err != nil || gid != want || strings.TrimSpace(string(typ)) != "RoCE v2" {
			continue
		}
		ndev, _ := os.ReadFile(filepath.Join(port, "gid_attrs/ndevs", fmt.Sprint(i)))
		return i, strings.TrimSpace(string(ndev))
	}
	return -1, ""
}

// claimedHCA is the ibdev of the one device a pod's claim got.
func claimedHCA(t *testing.T, k *e2e.KubeEnv, ns, pod string) string {
	t.Helper()
	c := claimReservedFor(t, k, ns, pod)
	if c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s/%s of pod %s: want one device allocated, have %+v", ns, c.Name, pod, c.Status.Allocation)
	}
	return strings.ReplaceAll(c.Status.Allocation.Devices.Results[0].Device, "-", "_")
}

// claimReservedFor is the claim reserved for pod ns/name.
func claimReservedFor(t *testing.T, k *e2e.KubeEnv, ns, pod string) resourceapi.ResourceClaim {
	t.Helper()
	var claims resourceapi.ResourceClaimList
	if err := json.Unmarshal([]byte(k.MustKubectl(t, "get", "resourceclaims", "-n", ns, "-o", "json")), &claims); err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		for _, r := range c.Status.ReservedFor {
			if r.Resource == "pods" && r.Name == pod {
				return c
			}
		}
	}
	t.Fatalf("no claim reserved for %s/%s", ns, pod)
	return resourceapi.ResourceClaim{}
}

var (
	inetLine = regexp.MustCompile(`(?m)^\d+: (\S+)\s+inet (\S+)`)
	gidIndex = regexp.MustCompile(`(?m)^NCCL_IB_GID_INDEX=(\d+)$`)
)

// podAddrs are the IPv4 addresses in a pod, by interface.
func podAddrs(t *testing.T, k *e2e.KubeEnv, ns, pod string) map[string]string {
	t.Helper()
	out := k.MustExecInPod(t, ns, pod, "main", "ip", "-o", "-4", "addr", "show")
	addrs := map[string]string{}
	for _, m := range inetLine.FindAllStringSubmatch(out, -1) {
		addrs[m[1]] = m[2]
	}
	return addrs
}

// checkPodGID: the pod's nccl.conf names ibdev with the index of the RoCE
// v2 entry the kernel made for addr on ndev, and the pod's eth0 for the
// bootstrap.
func checkPodGID(t *testing.T, k *e2e.KubeEnv, node *e2e.FixtureNode, ns, pod, ibdev, ndev string, addr netip.Prefix) {
	t.Helper()
	conf := k.MustExecInPod(t, ns, pod, "main", "cat", "/etc/nccl.conf")
	idx, named := roceV2Index(t, node, ibdev, addr.Addr())
	if idx < 0 || named != ndev {
		t.Fatalf("%s: the GID kernel has no RoCE v2 entry for %s on %s (found %d on %q)", ibdev, addr, ndev, idx, named)
	}
	m := gidIndex.FindStringSubmatch(conf)
	if m == nil || m[1] != fmt.Sprint(idx) {
		t.Errorf("pod %s: /etc/nccl.conf NCCL_IB_GID_INDEX should be %d (the RoCE v2 entry of %s on %s):\n%s", pod, idx, addr, ndev, conf)
	}
	for _, want := range []string{"NCCL_IB_HCA=" + ibdev + ":1\n", "NCCL_SOCKET_IFNAME=eth0\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("pod %s: /etc/nccl.conf lacks %q:\n%s", pod, want, conf)
		}
	}
}

// TestKubeDRAPodNetwork: pods without hostNetwork on a node with a pod
// network, containerd its runtime (testDRAPodNetwork).
func TestKubeDRAPodNetwork(t *testing.T) {
	testDRAPodNetwork(t, e2e.KubeOptions{})
}

// testDRAPodNetwork: pods without hostNetwork on a node with a pod network
// and opts' runtime. An exclusive claim gives the pod its HCA's netdev with
// an address of the node's range (never the node's own), and
// /etc/nccl.conf the GID index the kernel gave that address; two pods sharing mlx5_1 by bandwidth each get a
// macvlan of eth1 with an address of the node's range and their own GID; a
// claim with a bad address fails the prepare and moves nothing; once every
// pod is gone the node's namespace is exactly as before and the driver's
// records name no sandbox.
func testDRAPodNetwork(t *testing.T, opts e2e.KubeOptions) {
	node, k := podNetworkDRANode(t, opts)
	e2e.CheckNodeRuntime(t, k)
	before := nodeNetState(t, k)
	ns := e2e.UniqueID("dra-podnet-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+e2e.InNamespace(t, podNetworkTemplates(t), ns))

	t.Run("exclusive claim moves the netdev", func(t *testing.T) {
		k.Apply(t, podNetPod(ns, "whole", "hca-with-netdev"))
		k.WaitPod(t, ns, "whole", "Ready", 2*time.Minute)
		ibdev := claimedHCA(t, k, ns, "whole")
		netdev, nodeAddr := fixtureNetDev(t, node, ibdev)
		got := podAddrs(t, k, ns, "whole")
		addr := movedAddr(t, node, netdev, nodeAddr, got[netdev])
		if eth0, err := netip.ParsePrefix(got["eth0"]); err != nil || !netip.MustParsePrefix(k.PodCIDR).Contains(eth0.Addr()) {
			t.Errorf("pod whole: eth0 %q, want an address of the pod network %s", got["eth0"], k.PodCIDR)
		}
		if _, _, err := e2e.Run(k.InNode("ip", "link", "show", netdev)); err == nil {
			t.Errorf("%s is still in the node's namespace", netdev)
		}
		checkPodGID(t, k, node, ns, "whole", ibdev, netdev, addr)
		waitClaimNetworkData(t, k, ns, "whole", netdev, addr)
		k.MustKubectl(t, "delete", "pod", "-n", ns, "whole", "--wait=true")
		waitNodeNetState(t, k, before)
		waitNoSandboxes(t, k, draNetworkState)
	})

	t.Run("shared HCA gives each pod a sub-interface", func(t *testing.T) {
		e2e.NeedsKube(t, 36, "consumable capacity: no HCA is shared")
		k.Apply(t, e2e.HCA1Claim(ns, "share40", "shared", "40"))
		for _, p := range []string{"a", "b"} {
			k.Apply(t, podNetPod(ns, p, "share40"))
		}
		seen := map[string]string{}
		for _, p := range []string{"a", "b"} {
			k.WaitPod(t, ns, p, "Ready", 2*time.Minute)
			addr, err := netip.ParsePrefix(podAddrs(t, k, ns, p)["eth1"])
			if err != nil || !inRange(addr.Addr(), podNetworkRange) || addr.Bits() != 27 {
				t.Fatalf("pod %s: eth1 %v, want a /27 address of the node's range %s", p, addr, podNetworkRange)
			}
			if other, dup := seen[addr.String()]; dup {
				t.Fatalf("pods %s and %s both hold %s", other, p, addr)
			}
			seen[addr.String()] = p
			checkPodGID(t, k, node, ns, p, "mlx5_1", "eth1", addr)
			waitClaimNetworkData(t, k, ns, p, "eth1", addr)
		}
		if _, _, err := e2e.Run(k.InNode("ip", "addr", "show", "eth1")); err != nil {
			t.Errorf("eth1 left the node's namespace: %v", err)
		}
		k.MustKubectl(t, "delete", "pod", "-n", ns, "a", "b", "--wait=true")
		waitNodeNetState(t, k, before)
		waitNoSandboxes(t, k, draNetworkState)
	})

	t.Run("bad address fails the pod and moves nothing", func(t *testing.T) {
		bad := e2e.WithClaimConfig(e2e.ClaimTemplate(ns, "bad-address", "roce", "", ""), `addresses: ["25.11.128.300/27"]`)
		k.Apply(t, bad+"---\n"+podNetPod(ns, "bad", "bad-address"))
		e2e.WaitPodEvent(t, k, ns, "bad", `addresses[0] \"25.11.128.300/27\"`)
		if got := nodeNetState(t, k); !slices.Equal(got, before) {
			t.Errorf("the node's namespace changed:\nbefore %v\nafter  %v", before, got)
		}
		k.MustKubectl(t, "delete", "pod", "-n", ns, "bad", "--wait=true")
	})
}

// waitClaimNetworkData waits until the status of the claim reserved for
// pod shows the interface the pod holds: its name and address.
func waitClaimNetworkData(t *testing.T, k *e2e.KubeEnv, ns, pod, ifname string, addr netip.Prefix) {
	t.Helper()
	var last string
	err := e2e.WaitFor(context.Background(), time.Minute, func() error {
		claims, err := k.Claims(ns)
		if err != nil {
			return err
		}
		for _, c := range claims {
			if len(c.Status.ReservedFor) != 1 || c.Status.ReservedFor[0].Name != pod {
				continue
			}
			for _, d := range c.Status.Devices {
				last = fmt.Sprintf("%+v", d.NetworkData)
				if nd := d.NetworkData; nd != nil && nd.InterfaceName == ifname && slices.Contains(nd.IPs, addr.String()) {
					return nil
				}
			}
		}
		return fmt.Errorf("not yet")
	})
	if err != nil {
		t.Errorf("claim of pod %s: networkData %s, want %s with %s", pod, last, ifname, addr)
	}
}

// podNetworkTemplates are the shipped example's claim templates.
func podNetworkTemplates(t *testing.T) string {
	t.Helper()
	var keep []string
	for _, doc := range strings.Split(e2e.ShippedManifest(t, "deploy/examples/pod-network-claims.yaml"), "\n---\n") {
		if strings.Contains(doc, "kind: ResourceClaimTemplate") {
			keep = append(keep, doc)
		}
	}
	if len(keep) != 2 {
		t.Fatalf("pod-network-claims.yaml has %d templates, want 2", len(keep))
	}
	return strings.Join(keep, "\n---\n")
}

// fixtureNetDev is ibdev's port netdev and its IPv4 address in the fixture.
func fixtureNetDev(t *testing.T, node *e2e.FixtureNode, ibdev string) (string, netip.Prefix) {
	t.Helper()
	topo, err := node.Topo.Complete()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range topo.Devices {
		if d.Name != ibdev || len(d.Ports) == 0 {
			continue
		}
		for _, n := range topo.NetDevs {
			if n.Name == d.Ports[0].NetDev && len(n.Addrs) > 0 {
				return n.Name, netip.MustParsePrefix(n.Addrs[0])
			}
		}
	}
	t.Fatalf("%s has no netdev with an address in the fixture", ibdev)
	return "", netip.Prefix{}
}

// movedAddr checks that got, the address of a netdev moved into a pod,
// is one of the node's range for it in its subnet, and not the node's own
// nodeAddr (round 3, M3: the tenant never gets the node's fabric identity
// by default). The kernel then writes the address new GID entries, which
// the pod's hook must find in its own namespace.
func movedAddr(t *testing.T, node *e2e.FixtureNode, netdev string, nodeAddr netip.Prefix, got string) netip.Prefix {
	t.Helper()
	addr, err := netip.ParsePrefix(got)
	r := subnetRanges(node)[netdev]
	if err != nil || addr == nodeAddr || addr.Bits() != nodeAddr.Bits() || r == "" || !inRange(addr.Addr(), r) {
		t.Fatalf("moved %s holds %q, want an address of the node's range %s in %s, not the node's %s", netdev, got, r, nodeAddr.Masked(), nodeAddr)
	}
	return addr
}

func inRange(a netip.Addr, r string) bool {
	first, last, _ := strings.Cut(r, "-")
	return !a.Less(netip.MustParseAddr(first)) && !netip.MustParseAddr(last).Less(a)
}

// waitNodeNetState waits until the node's namespace is as before.
func waitNodeNetState(t *testing.T, k *e2e.KubeEnv, before []string) {
	t.Helper()
	var got []string
	err := e2e.WaitFor(context.Background(), 30*time.Second, func() error {
		if got = nodeNetState(t, k); !slices.Equal(got, before) {
			return fmt.Errorf("differs")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the node's namespace is not as before its pods:\nbefore %v\nnow    %v\n%s", before, got, e2e.AgentLogTail(t, k))
	}
}

// BenchmarkKubePodNetworkStart: pod creation to its container running
// (timePodStart) on a node with a pod network, for a pod with one HCA whose
// claim asks for no interface (mode none: the same pod on the same CNI
// without pod networking), for one whose netdev is moved in, and for one
// given a sub-interface, interleaved round by round. Medians, and each
// case's ratio to mode none, are reported.
//
//	go test ./test/e2e/network -run '^$' -bench BenchmarkKubePodNetworkStart -benchtime 10x
func BenchmarkKubePodNetworkStart(b *testing.B) {
	_, k := podNetworkDRANode(b, e2e.KubeOptions{})
	ns := e2e.UniqueID("podnet-start-")
	template := func(name, mode string) string {
		return e2e.WithClaimConfig(e2e.ClaimTemplate(ns, name, "roce", "", ""), "mode: "+mode)
	}
	k.Apply(b, e2e.NamespaceManifest(ns)+"---\n"+template("none", "none")+"---\n"+template("move", "move")+"---\n"+template("sub", "sub-interface"))
	pod := func(template string) func(string) string {
		// timePodStart deletes each pod, waiting: its netdev is back.
		return func(n string) string { return podNetPodOf(ns, n, template, e2e.Glibc) }
	}
	e2e.TimePodStarts(b, k, ns, []e2e.PodStartCase{{Name: "none", Manifest: pod("none")}, {Name: "move", Manifest: pod("move")}, {Name: "sub-interface", Manifest: pod("sub")}})
}

// draNetworkState is where the DRA driver keeps pod-network.json.
const draNetworkState = "/var/lib/kubelet/plugins/" + apis.Group

// networkCheckpointSandboxes are the pods the pod-network.json in the
// node's directory dir still names.
func networkCheckpointSandboxes(t *testing.T, k *e2e.KubeEnv, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(k.NodePath(dir + "/" + networker.CheckpointFile))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Sandboxes map[string]networker.SandboxNetwork `json:"sandboxes"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s: %v", networker.CheckpointFile, err)
	}
	var pods []string
	for _, s := range c.Sandboxes {
		pods = append(pods, s.Pod)
	}
	slices.Sort(pods)
	return pods
}

// waitNoSandboxes waits until the records in the node's directory dir
// name no sandbox. The records must be there: a driver that never wrote
// them (pod networking not running) would pass an emptiness check.
func waitNoSandboxes(t *testing.T, k *e2e.KubeEnv, dir string) {
	t.Helper()
	if _, err := os.Stat(k.NodePath(dir + "/" + networker.CheckpointFile)); err != nil {
		t.Fatalf("the pod network's records: %v", err)
	}
	var left []string
	if err := e2e.WaitFor(context.Background(), time.Minute, func() error {
		if left = networkCheckpointSandboxes(t, k, dir); len(left) > 0 {
			return fmt.Errorf("left: %v", left)
		}
		return nil
	}); err != nil {
		t.Fatalf("the driver still records the pod network of %v\n%s", left, e2e.AgentLogTail(t, k))
	}
}

// waitSandboxGone waits until the runtime has no ready sandbox of the pod
// (its network namespace is gone with it).
func waitSandboxGone(t *testing.T, k *e2e.KubeEnv, ns, pod string) {
	t.Helper()
	if err := e2e.WaitFor(context.Background(), 2*time.Minute, func() error {
		resp, err := k.CRI.Runtime.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
			State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
			LabelSelector: map[string]string{"io.kubernetes.pod.namespace": ns, "io.kubernetes.pod.name": pod},
		}})
		if err == nil && len(resp.Items) > 0 {
			err = fmt.Errorf("sandbox %s still ready", resp.Items[0].Id)
		}
		return err
	}); err != nil {
		t.Fatalf("pod %s/%s: %v", ns, pod, err)
	}
}

// stopAgent keeps the agent's DaemonSet off the node (a node selector no
// node has) until the returned function puts it back and waits for it.
func stopAgent(t *testing.T, k *e2e.KubeEnv) (restart func()) {
	t.Helper()
	k.MustKubectl(t, "patch", "daemonset/"+e2e.AgentRelease, "-n", e2e.AgentNamespace, "--type=merge", "-p",
		`{"spec":{"template":{"spec":{"nodeSelector":{"rdma-cdi-e2e/nowhere":"true"}}}}}`)
	if err := e2e.WaitFor(context.Background(), 2*time.Minute, func() error {
		if pods := k.PodNames(t, e2e.AgentNamespace, e2e.AgentSelector); len(pods) > 0 {
			return fmt.Errorf("agent pods %v", pods)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return func() {
		k.MustKubectl(t, "patch", "daemonset/"+e2e.AgentRelease, "-n", e2e.AgentNamespace, "--type=json", "-p",
			`[{"op":"remove","path":"/spec/template/spec/nodeSelector/rdma-cdi-e2e~1nowhere"}]`)
		k.WaitPodsOf(t, e2e.AgentNamespace, e2e.AgentSelector, "Ready", 3*time.Minute)
	}
}

// TestKubeDRAPodNetworkFaults: nothing is lost when pod networking fails
// halfway (the second of a pod's two interfaces cannot be made: the first
// is given back and the pod does not start), when the driver dies after a
// move and before recording it (the pod runs with its netdev; the
// restarted driver gives it back at the pod's end), when a pod's sandbox
// starts while the driver's NRI plugin is away (its container is refused
// until the plugin, back, has given the sandbox its interface), or when a pod with a
// sub-interface is deleted while the driver is down (it died with the
// pod's namespace; the restarted driver lets go of its record). After each
// the node's namespace is exactly as before and no record is left.
func TestKubeDRAPodNetworkFaults(t *testing.T) {
	node, k := podNetworkDRANode(t, e2e.KubeOptions{})
	before := nodeNetState(t, k)
	ns := e2e.UniqueID("dra-podnet-faults-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+e2e.InNamespace(t, podNetworkTemplates(t), ns))

	t.Run("second interface fails", func(t *testing.T) {
		// Two HCAs whose interfaces both take one name: the second's
		// fails once the first is in the pod, which is rolled back. (A
		// name the claim config refuses, as the pod's own eth0, would fail
		// at prepare, before any interface moves.)
		two := e2e.WithClaimConfig(e2e.ClaimTemplate(ns, "two", "roce", "", ""), "interfaceName: net9") + `        - name: second
          exactly:
            deviceClassName: roce.rdma.example.com
`
		k.Apply(t, two+"---\n"+podNetPod(ns, "halfway", "two"))
		e2e.WaitPodEvent(t, k, ns, "halfway", "rdma-cdi pod network of "+ns+"/halfway")
		// The rollback, seen while the pod still exists: the first
		// interface is back in the node and nothing is recorded, between
		// the runtime's retries of the sandbox, and the pod never runs.
		waitNodeNetState(t, k, before)
		waitNoSandboxes(t, k, draNetworkState)
		if phase := k.MustKubectl(t, "get", "pod", "-n", ns, "halfway", "-o", "jsonpath={.status.phase}"); phase != "Pending" {
			t.Errorf("pod halfway is %s, want Pending: it started without its second interface", phase)
		}
		k.MustKubectl(t, "delete", "pod", "-n", ns, "halfway", "--wait=true")
		waitNodeNetState(t, k, before)
		waitNoSandboxes(t, k, draNetworkState)
	})

	t.Run("driver killed after a move", func(t *testing.T) {
		const point = "attach-before-checkpoint"
		marker := k.NodePath("/var/lib/kubelet/plugins/" + apis.Group + "/.crashed-" + point)
		t.Cleanup(func() { os.Remove(marker); e2e.SetAgentEnv(t, k, dradriver.CrashEnv, "") })
		e2e.SetAgentEnv(t, k, dradriver.CrashEnv, point)
		_, restarts := e2e.AgentRestarts(t, k)
		k.Apply(t, podNetPod(ns, "crash", "hca-with-netdev"))
		k.WaitPod(t, ns, "crash", "Ready", 3*time.Minute)
		if _, err := os.Stat(marker); err != nil {
			t.Fatalf("the driver never reached %s: %v", point, err)
		}
		ibdev := claimedHCA(t, k, ns, "crash")
		netdev, nodeAddr := fixtureNetDev(t, node, ibdev)
		movedAddr(t, node, netdev, nodeAddr, podAddrs(t, k, ns, "crash")[netdev])
		// The restarted driver is serving NRI before the pod goes.
		if err := e2e.WaitFor(context.Background(), 2*time.Minute, func() error {
			pod, n := e2e.AgentRestarts(t, k)
			if n != restarts+1 || !strings.Contains(k.Logs(e2e.AgentNamespace, pod, "dra"), "NRI plugin 10-rdma-cdi connected") {
				return fmt.Errorf("restarts %d, want %d, and NRI connected", n, restarts+1)
			}
			return nil
		}); err != nil {
			t.Fatalf("%v\n%s", err, e2e.AgentLogTail(t, k))
		}
		k.MustKubectl(t, "delete", "pod", "-n", ns, "crash", "--wait=true")
		waitNodeNetState(t, k, before)
		waitNoSandboxes(t, k, draNetworkState)
	})

	t.Run("sandbox started while the plugin is away", func(t *testing.T) {
		// The runtime's NRI socket moved aside: the restarted driver serves
		// the kubelet (claims are prepared) but its NRI plugin cannot
		// register, so the runtime starts the pod's sandbox without it.
		sock := k.NRISocket()
		if err := os.Rename(sock, sock+".away"); err != nil {
			t.Fatal(err)
		}
		back := func() { _ = os.Rename(sock+".away", sock) }
		t.Cleanup(back)
		k.MustKubectl(t, "delete", "pod", "-n", e2e.AgentNamespace, "-l", e2e.AgentSelector, "--wait=true")
		k.WaitPodsOf(t, e2e.AgentNamespace, e2e.AgentSelector, "Ready", 3*time.Minute)
		k.Apply(t, podNetPod(ns, "early", "hca-with-subinterface"))
		// Its container is refused, not started without its interface.
		e2e.WaitPodEvent(t, k, ns, "early", hooks.ErrSandboxNotHandled.Error())
		back()
		k.WaitPod(t, ns, "early", "Ready", 4*time.Minute)
		addr, err := netip.ParsePrefix(podAddrs(t, k, ns, "early")["net1"])
		if err != nil {
			t.Fatalf("pod early has no net1 once the plugin is back: %v\n%s", err, e2e.AgentLogTail(t, k))
		}
		checkPodGID(t, k, node, ns, "early", claimedHCA(t, k, ns, "early"), "net1", addr)
		k.MustKubectl(t, "delete", "pod", "-n", ns, "early", "--wait=true")
		waitNodeNetState(t, k, before)
		waitNoSandboxes(t, k, draNetworkState)
	})

	t.Run("pod deleted while the driver is down", func(t *testing.T) {
		k.Apply(t, podNetPod(ns, "orphan", "hca-with-subinterface"))
		k.WaitPod(t, ns, "orphan", "Ready", 2*time.Minute)
		if got := podAddrs(t, k, ns, "orphan")["net1"]; got == "" {
			t.Fatal("pod orphan has no net1")
		}
		restart := stopAgent(t, k)
		// The kubelet stops the sandbox at once, and finishes the pod once
		// the driver is back to unprepare its claim.
		k.MustKubectl(t, "delete", "pod", "-n", ns, "orphan", "--wait=false")
		waitSandboxGone(t, k, ns, "orphan")
		restart()
		k.MustKubectl(t, "wait", "--for=delete", "pod/orphan", "-n", ns, "--timeout=3m")
		waitNodeNetState(t, k, before)
		waitNoSandboxes(t, k, draNetworkState)
	})
}
