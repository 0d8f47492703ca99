package network

// Two nodes whose RoCE netdevs share their subnets, one chart for both:
// the cluster's pools, held in blocks as Leases, give no address to two
// pods.

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// sameSubnetPeer is the second node's name.
const sameSubnetPeer = "node-seed002-c"

// newSameSubnetCluster is a control node and a peer, both seed 002 nodes
// with a pod network and the GID kernel, the peer's every IPv4 one host up
// in the same subnet (25.11.128.2/27 is 25.11.128.3/27 there).
func newSameSubnetCluster(t *testing.T) *seed002Cluster {
	t.Helper()
	gates := map[string]bool{"DRAExtendedResource": true}
	images := []string{e2e.BB.DockerArchive(t)}
	peer, err := e2e.BuildFixtureNode(t, seed002Moved(t, "seed002-c", "a100-node-c", func(b *[4]byte) { b[3]++ }))
	if err != nil {
		t.Fatal(err)
	}
	c := &seed002Cluster{}
	c.control = e2e.KubeNode(t, e2e.NewFixtureNode(t, "seed002"), e2e.KubeOptions{
		PodNetwork: true, FeatureGates: gates, Images: images, Peers: []string{sameSubnetPeer},
	})
	c.peer = e2e.KubeJoin(t, c.control, peer, e2e.KubeOptions{
		NodeName: sameSubnetPeer, PodNetwork: true, PodCIDR: "10.244.1.0/24", FeatureGates: gates, Images: images,
	})
	c.nodes = map[string]*e2e.KubeEnv{c.control.NodeName: c.control, c.peer.NodeName: c.peer}
	c.gids = map[string]*gidHistory{}
	for _, k := range []*e2e.KubeEnv{c.control, c.peer} {
		c.gids[k.NodeName] = startGIDKernel(t, k)
		k.WaitNodeReady(t, 2*time.Minute)
	}
	return c
}

// sameSubnetPools are the upper half of each RoCE netdev's subnet, which
// holds neither node's address, and every node's own addresses.
func sameSubnetPools(t *testing.T, c *seed002Cluster) (pools []string, own map[netip.Addr]string) {
	t.Helper()
	own = map[netip.Addr]string{}
	for _, k := range []*e2e.KubeEnv{c.control, c.peer} {
		for _, n := range k.Node.Topo.NetDevs {
			for _, a := range n.Addrs {
				if p, err := netip.ParsePrefix(a); err == nil {
					own[p.Addr()] = k.NodeName
				}
			}
		}
	}
	for netdev := range subnetRanges(c.control.Node) {
		host, peerHost := fixtureAddr(t, c.control, netdev), fixtureAddr(t, c.peer, netdev)
		subnet := host.Masked()
		if !subnet.Contains(peerHost.Addr()) || peerHost == host {
			t.Fatalf("%s: the peer's %s is not another address of the control node's subnet %s", netdev, peerHost, subnet)
		}
		upper := subnet.Addr()
		for range 1 << (31 - subnet.Bits()) {
			upper = upper.Next()
		}
		pool := netip.PrefixFrom(upper, subnet.Bits()+1)
		for a, node := range own {
			if pool.Contains(a) {
				t.Fatalf("pool %s holds node %s's own %s", pool, node, a)
			}
		}
		pools = append(pools, pool.String())
	}
	return pools, own
}

// fixtureAddr is k's fixture netdev's IPv4 address.
func fixtureAddr(t *testing.T, k *e2e.KubeEnv, netdev string) netip.Prefix {
	t.Helper()
	for _, n := range k.Node.Topo.NetDevs {
		if n.Name == netdev && len(n.Addrs) > 0 {
			if p, err := netip.ParsePrefix(n.Addrs[0]); err == nil {
				return p
			}
		}
	}
	t.Fatalf("node %s has no %s address", k.NodeName, netdev)
	return netip.Prefix{}
}

// onNode pins a pod manifest to node (the scheduler still allocates its
// claims there).
func onNode(manifest, node string) string {
	return strings.Replace(manifest, "\nspec:\n", fmt.Sprintf(`
spec:
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchFields: [{key: metadata.name, operator: In, values: [%q]}]
`, node), 1)
}

// addressLeases are the address Leases' ranges, by holder.
func addressLeases(t *testing.T, c *seed002Cluster) map[string][]podnetwork.Range {
	t.Helper()
	var list coordinationv1.LeaseList
	out := c.control.MustKubectl(t, "get", "leases", "-n", e2e.AgentNamespace, "-l", apis.AddressBlockLabel, "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	held := map[string][]podnetwork.Range{}
	for _, l := range list.Items {
		r, err := podnetwork.ParseRange(l.Annotations[apis.AddressRangeAnnotation])
		if err != nil || l.Spec.HolderIdentity == nil {
			t.Fatalf("lease %s: range %v, holder %v", l.Name, err, l.Spec.HolderIdentity)
		}
		held[*l.Spec.HolderIdentity] = append(held[*l.Spec.HolderIdentity], r)
	}
	return held
}

func inAny(a netip.Addr, ranges []podnetwork.Range) bool {
	for _, r := range ranges {
		if !a.Less(r.First) && !r.Last.Less(a) {
			return true
		}
	}
	return false
}

// TestKubePodNetworkSameSubnet: two nodes whose RoCE netdevs share every
// subnet, the chart with podNetwork.pools (the upper half of each subnet,
// blocks of 4), pods with sub-interfaces on both nodes: in mode
// device-plugin (seed 002's pod, every RoCE HCA) and in mode dra (shares of
// mlx5_1). Every pod address is distinct, in its netdev's subnet with its
// prefix length, never a node's own, inside a block its own node holds,
// and each pod's NCCL_IB_GID_INDEX is the RoCE v2 entry of its own
// address. The agents restart and pods come and go: no address a live pod
// holds goes to another. In mode dra the config names two rails of two
// NICs each, alike on both nodes, and a claim for two HCAs with
// matchAttribute on the rail gets a pair of one rail on each node
// (checkRailPairs). At the end the peer's Node is deleted, and the
// garbage collector takes its Leases.
func TestKubePodNetworkSameSubnet(t *testing.T) {
	c := newSameSubnetCluster(t)
	pools, own := sameSubnetPools(t, c)
	nodes := []string{c.control.NodeName, c.peer.NodeName}
	for _, mode := range []string{"device-plugin", "dra", whereaboutsMode} {
		t.Run(mode, func(t *testing.T) {
			dra := mode != "device-plugin"
			if dra {
				e2e.NeedsKube(t, 36, "consumable capacity: no HCA is shared")
			}
			ref := c.control.RDMACDIImage(t)
			c.peer.RDMACDIImage(t)
			podNetwork := map[string]any{"enabled": true, "pools": pools, "blockSize": 4}
			values := map[string]any{"podNetwork": podNetwork}
			allowed := func(node string) []podnetwork.Range { return addressLeases(t, c)[node] }
			var ippools func() map[string]string
			switch mode {
			case "dra":
				values["config"] = map[string]any{"topology": map[string]any{"rails": pairedRails}}
			case whereaboutsMode:
				var rng podnetwork.Range
				rng, ippools = c.useWhereabouts(t, podNetwork)
				allowed = func(string) []podnetwork.Range { return []podnetwork.Range{rng} }
			}
			agentMode := mode
			if dra {
				agentMode = "dra"
			}
			c.control.HelmInstall(t, e2e.AgentRelease, e2e.AgentNamespace, e2e.AgentValues(ref, agentMode, values))
			c.waitAgents(t)
			ns := e2e.UniqueID("same-subnet-")
			setup := e2e.NamespaceManifest(ns)
			hcas := []string{"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8"}
			pod := func(name string) string { return seedPodManifest(ns, name, true) }
			// served waits until both nodes' agents serve their HCAs.
			served := func() {
				for _, k := range c.nodes {
					k.WaitNodeAllocatable(t, e2e.SharedResource, "1000", 2*time.Minute)
				}
			}
			if dra {
				setup += "---\n" + e2e.HCA1Claim(ns, "share", "shared", "20")
				hcas = hcas[:1]
				pod = func(name string) string { return podNetPod(ns, name, "share") }
				served = func() {
					for _, k := range c.nodes {
						e2e.WaitSlice(t, k, func(s []resourceapi.Device) bool { return len(s) == 9 }, "9 devices", func() string { return e2e.AgentLogTail(t, k) })
					}
				}
			}
			served()
			c.control.Apply(t, setup)
			t.Cleanup(func() { c.control.MustKubectl(t, "delete", "namespace", ns, "--wait=true", "--timeout=2m") })

			held := map[netip.Addr]string{} // what live pods hold, to whom
			start := func(names ...string) {
				t.Helper()
				for i, name := range names {
					c.control.Apply(t, onNode(pod(name), nodes[i%2]))
				}
				for _, name := range names {
					c.control.WaitPod(t, ns, name, "Ready", 2*time.Minute)
					c.checkSameSubnetPod(t, ns, name, hcas, !dra, own, held, allowed)
				}
				if ippools != nil {
					checkWhereaboutsHolds(t, ippools, ns, held)
				}
			}
			stop := func(names ...string) {
				t.Helper()
				c.control.MustKubectl(t, append([]string{"delete", "pod", "-n", ns, "--wait=true"}, names...)...)
				maps.DeleteFunc(held, func(_ netip.Addr, p string) bool { return slices.Contains(names, p) })
			}
			start("p0", "p1", "p2", "p3")
			c.control.MustKubectl(t, "delete", "pod", "-n", e2e.AgentNamespace, "-l", e2e.AgentSelector, "--wait=true")
			c.waitAgents(t)
			served()
			stop("p0", "p1")
			// Whereabouts' own allocator is what its mode tests: one
			// node's pair of new pods shows the reuse.
			more := []string{"p4", "p5", "p6", "p7"}
			if mode == whereaboutsMode {
				more = more[:2]
			}
			start(more...)
			stop(append([]string{"p2", "p3"}, more...)...)
			if ippools != nil {
				checkWhereaboutsHolds(t, ippools, ns, held)
			}
			if mode == "dra" {
				c.checkRailPairs(t, ns)
			}
		})
	}

	t.Run("deleting a Node frees its blocks", func(t *testing.T) {
		if len(addressLeases(t, c)[c.peer.NodeName]) == 0 {
			t.Fatalf("the peer holds no block: %v", addressLeases(t, c))
		}
		c.control.MustKubectl(t, "delete", "node", c.peer.NodeName, "--wait=true")
		deadline := time.Now().Add(2 * time.Minute)
		for len(addressLeases(t, c)[c.peer.NodeName]) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the deleted node's leases are still there: %v", addressLeases(t, c))
			}
			time.Sleep(time.Second)
		}
		if len(addressLeases(t, c)[c.control.NodeName]) == 0 {
			t.Error("the control node's leases went too")
		}
	})
}

// checkSameSubnetPod checks the sub-interfaces pod got on the node it runs
// on, one per HCA of hcas, each inside allowed(node), and adds its
// addresses to held. numbered: the
// pod's interfaces are net1, net2, ... in the order of hcas (a device
// plugin's pod), not named after their host netdevs (a claim's default).
func (c *seed002Cluster) checkSameSubnetPod(t *testing.T, ns, pod string, hcas []string, numbered bool, own map[netip.Addr]string, held map[netip.Addr]string,
	allowed func(node string) []podnetwork.Range) {
	t.Helper()
	nodeName := c.control.MustKubectl(t, "get", "pod", pod, "-n", ns, "-o", "jsonpath={.spec.nodeName}")
	k := c.nodes[nodeName]
	if k == nil {
		t.Fatalf("pod %s ran on %q", pod, nodeName)
	}
	blocks := allowed(nodeName)
	addrs := podAddrs(t, k, ns, pod)
	conf := k.MustExecInPod(t, ns, pod, "main", "cat", "/etc/nccl.conf")
	m := gidIndex.FindStringSubmatch(conf)
	if m == nil {
		t.Fatalf("pod %s: no NCCL_IB_GID_INDEX in /etc/nccl.conf:\n%s\n%s", pod, conf, e2e.AgentLogTail(t, k))
	}
	for i, ibdev := range hcas {
		netdev, host := fixtureNetDev(t, k.Node, ibdev)
		podIf := netdev
		if numbered {
			podIf = fmt.Sprintf("net%d", i+1)
		}
		addr, err := netip.ParsePrefix(addrs[podIf])
		switch {
		case err != nil || !host.Masked().Contains(addr.Addr()) || addr.Bits() != host.Bits():
			t.Fatalf("pod %s on %s: %s %q, want a /%d address of %s (addresses %v)\n%s", pod, nodeName, podIf, addrs[podIf], host.Bits(), host.Masked(), addrs, e2e.AgentLogTail(t, k))
		case own[addr.Addr()] != "":
			t.Errorf("pod %s holds node %s's own %s", pod, own[addr.Addr()], addr)
		case held[addr.Addr()] != "":
			t.Errorf("pods %s and %s both hold %s", held[addr.Addr()], pod, addr)
		case !inAny(addr.Addr(), blocks):
			t.Errorf("pod %s's %s is in none of %s's ranges %v", pod, addr, nodeName, blocks)
		}
		held[addr.Addr()] = pod
		got, ndev := c.gids[nodeName].roceV2(ibdev, addr.Addr(), podIf)
		if got < 0 {
			got, ndev = roceV2Index(t, k.Node, ibdev, addr.Addr())
		}
		if fmt.Sprint(got) != m[1] || ndev != podIf {
			t.Errorf("pod %s: NCCL_IB_GID_INDEX=%s, but the RoCE v2 entry of its %s (%s) on %s is %d (on %q)", pod, m[1], netdev, addr, ibdev, got, ndev)
		}
	}
}

// pairedRails name the rails of a node with two NICs per rail, alike on
// both nodes (the config the chart writes to every node): mlx5_1 and
// mlx5_2 on rail-a, mlx5_3 and mlx5_4 on rail-b; the others keep the rail
// of their own subnet.
var pairedRails = []map[string]any{
	{"rail": "rail-a", "netdev": "eth[12]"},
	{"rail": "rail-b", "netdev": "eth[34]"},
}

// railOf are pairedRails by device.
var railOf = map[string]string{"mlx5-1": "rail-a", "mlx5-2": "rail-a", "mlx5-3": "rail-b", "mlx5-4": "rail-b"}

// checkRailPairs: both nodes publish the configured rails, and a claim
// for two HCAs constrained by matchAttribute on the rail gets, on each
// node, two HCAs of one rail. The pods ask for no interface (mode none):
// the allocation is what is checked.
func (c *seed002Cluster) checkRailPairs(t *testing.T, ns string) {
	t.Helper()
	for _, k := range []*e2e.KubeEnv{c.control, c.peer} {
		for _, d := range e2e.SliceDevices(t, k) {
			if want, ok := railOf[d.Name]; ok && e2e.Attr(d, "rail") != want {
				t.Errorf("node %s: %s rail %v, want %s", k.NodeName, d.Name, e2e.Attr(d, "rail"), want)
			}
		}
	}
	pair := e2e.WithClaimConfig(fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: rail-pair, namespace: %s}
spec:
  spec:
    devices:
      requests:
        - {name: a, exactly: {deviceClassName: roce.%s}}
        - {name: b, exactly: {deviceClassName: roce.%s}}
      constraints:
        - {requests: [a, b], matchAttribute: %s/rail}
`, ns, apis.Group, apis.Group, apis.Group), "mode: none")
	c.control.Apply(t, pair)
	for i, node := range []string{c.control.NodeName, c.peer.NodeName} {
		pod := fmt.Sprintf("pair-%d", i)
		c.control.Apply(t, onNode(podNetPod(ns, pod, "rail-pair"), node))
		c.control.WaitPod(t, ns, pod, "Ready", 2*time.Minute)
		claims, err := c.control.Claims(ns)
		if err != nil {
			t.Fatal(err)
		}
		var rails, devices []string
		for _, cl := range claims {
			if len(cl.Status.ReservedFor) != 1 || cl.Status.ReservedFor[0].Name != pod || cl.Status.Allocation == nil {
				continue
			}
			for _, r := range cl.Status.Allocation.Devices.Results {
				if r.Pool != node {
					t.Errorf("pod %s on %s: %s from pool %s", pod, node, r.Device, r.Pool)
				}
				devices, rails = append(devices, r.Device), append(rails, railOf[r.Device])
			}
		}
		if len(devices) != 2 || rails[0] == "" || rails[0] != rails[1] {
			t.Errorf("pod %s on %s got %v, want two HCAs of one rail (%v)", pod, node, devices, railOf)
		}
		c.control.MustKubectl(t, "delete", "pod", "-n", ns, pod, "--wait=true")
	}
}

// whereaboutsMode is the DRA mode with mlx5_1's subnet's addresses from
// Whereabouts (pod_network.ipam) instead of a pool.
const whereaboutsMode = "dra, addresses from Whereabouts"

// useWhereabouts installs Whereabouts and changes podNetwork's values so
// that it gives mlx5_1's subnet's pod addresses from the range the pools
// had there (the pool itself taken out: one allocator per subnet). It
// returns the range, and a reader of Whereabouts' IPPools: each address
// it holds, with its pod (namespace/name).
func (c *seed002Cluster) useWhereabouts(t *testing.T, podNetwork map[string]any) (podnetwork.Range, func() map[string]string) {
	t.Helper()
	w := e2e.InstallWhereabouts(t, c.control)
	_, host := fixtureNetDev(t, c.control.Node, "mlx5_1")
	subnet := host.Masked()
	var pools []string
	var rng string
	for _, p := range podNetwork["pools"].([]string) {
		if subnet.Contains(netip.MustParsePrefix(p).Addr()) {
			rng = p
		} else {
			pools = append(pools, p)
		}
	}
	r, err := podnetwork.ParseRange(rng)
	if err != nil {
		t.Fatalf("no pool in mlx5_1's subnet %s (%v): %v", subnet, podNetwork["pools"], err)
	}
	podNetwork["pools"] = pools
	podNetwork["ipam"] = []map[string]any{{"subnet": subnet.String(), "config": map[string]any{
		"type": "whereabouts", "range": rng, "configuration_path": w.Conf,
	}}}
	podNetwork["cniBinDir"] = w.BinDir
	podNetwork["ipamHostPaths"] = []string{w.ConfDir}
	return r, func() map[string]string {
		var list struct {
			Items []struct {
				Spec struct {
					Range       string `json:"range"`
					Allocations map[string]struct {
						PodRef string `json:"podref"`
					} `json:"allocations"`
				} `json:"spec"`
			} `json:"items"`
		}
		out := c.control.MustKubectl(t, "get", "ippools.whereabouts.cni.cncf.io", "-n", "kube-system", "-o", "json")
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatal(err)
		}
		held := map[string]string{}
		for _, p := range list.Items {
			base, err := netip.ParsePrefix(p.Spec.Range)
			if err != nil {
				t.Fatalf("IPPool range %q: %v", p.Spec.Range, err)
			}
			for offset, a := range p.Spec.Allocations {
				addr := base.Masked().Addr()
				n, err := strconv.Atoi(offset)
				if err != nil {
					t.Fatalf("IPPool %s: allocation %q", p.Spec.Range, offset)
				}
				for range n {
					addr = addr.Next()
				}
				held[addr.String()] = a.PodRef
			}
		}
		return held
	}
}

// checkWhereaboutsHolds: Whereabouts' IPPools hold, within a minute, the
// addresses the live pods of ns hold (held) and no other: a claim's
// address is freed when the kubelet unprepares it, after its pod is gone.
func checkWhereaboutsHolds(t *testing.T, ippools func() map[string]string, ns string, held map[netip.Addr]string) {
	t.Helper()
	want := map[string]string{}
	for a, pod := range held {
		want[a.String()] = ns + "/" + pod
	}
	var got map[string]string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		if got = ippools(); maps.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Whereabouts holds %v, want %v (the live pods')", got, want)
		}
	}
}
