package network

// Seed 002's PyTorchJob as its users run it: two nodes, each a
// seed 002 node of its own, the real Kubeflow training operator creating
// the Master and the Worker, pods in their own network namespaces, cluster
// DNS for the Worker's rendezvous, and rdma-cdi in each of its Kubernetes
// modes giving each pod its HCA, its interface and its NCCL settings.

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// seed002Job is the PyTorchJob's name in the seed (namespace default).
const seed002Job = "pytorch-swin-transformer-nccl"

// seed002PeerNode is the second node's name.
const seed002PeerNode = "node-seed002-b"

// seed002PeerTopology is seed 002's node with other addresses: every IPv4
// (its netdevs' and its explicit GID entries') in the next /24 up, as a
// routed RoCE fabric gives each rack a subnet. Names, MACs and PCI
// addresses are the seed's: nothing links the two nodes' fixture netdevs.
func seed002PeerTopology(t testing.TB) fixture.Topology {
	return seed002Moved(t, "seed002-b", "a100-node-b", func(b *[4]byte) { b[2]++ })
}

// seed002Moved is seed 002's node named name and hostname, with every
// IPv4 (its netdevs' and its explicit GID entries') moved by move.
func seed002Moved(t testing.TB, name, hostname string, move func(*[4]byte)) fixture.Topology {
	t.Helper()
	topo, err := fixture.LoadBundled("seed002")
	if err != nil {
		t.Fatal(err)
	}
	topo.Name, topo.Hostname = name, hostname
	moved := func(a netip.Addr) netip.Addr {
		b := a.As4()
		move(&b)
		return netip.AddrFrom4(b)
	}
	for i := range topo.NetDevs {
		for j, s := range topo.NetDevs[i].Addrs {
			if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is4() {
				topo.NetDevs[i].Addrs[j] = netip.PrefixFrom(moved(p.Addr()), p.Bits()).String()
			}
		}
	}
	for i := range topo.Devices {
		for j := range topo.Devices[i].Ports {
			for k, g := range topo.Devices[i].Ports[j].GIDs {
				if a, err := netip.ParseAddr(g.GID); err == nil && a.Is4In6() {
					topo.Devices[i].Ports[j].GIDs[k].GID = netip.AddrFrom16(moved(a.Unmap()).As16()).String()
				}
			}
		}
	}
	return topo
}

// seed002Cluster is a control node and a peer, both seed 002 nodes with a
// pod network (10.244.0.0/24 and 10.244.1.0/24, routed over their link),
// the GID kernel on each, eight stand-in GPUs of the seed's resource on
// each, CoreDNS, the Volcano stand-in scheduler and the training operator.
type seed002Cluster struct {
	control, peer *e2e.KubeEnv
	nodes         map[string]*e2e.KubeEnv // by node name
	gids          map[string]*gidHistory  // each node's GID kernel's entries, by node name
}

func newSeed002Cluster(t *testing.T) *seed002Cluster {
	t.Helper()
	gates := map[string]bool{"DRAExtendedResource": true}
	images := []string{e2e.SeedTorch.DockerArchive(t)}
	// Pods resolve through CoreDNS on the control node's end of the link,
	// which pods of both nodes reach.
	dns := fmt.Sprintf("clusterDNS: [%s]\nclusterDomain: cluster.local\n", e2e.ControlLinkAddr())
	node1 := e2e.NewFixtureNode(t, "seed002")
	node2, err := e2e.BuildFixtureNode(t, seed002PeerTopology(t))
	if err != nil {
		t.Fatal(err)
	}
	c := &seed002Cluster{}
	c.control = e2e.KubeNode(t, node1, e2e.KubeOptions{
		PodNetwork: true, FeatureGates: gates, Images: images, KubeletConfig: dns,
		Peers: []string{seed002PeerNode},
		// The operator's webhook, in the node's namespace with the API
		// server, under the name its serving certificate carries.
		ExtraHosts: []string{"127.0.0.1 training-operator.kubeflow.svc"},
	})
	c.peer = e2e.KubeJoin(t, c.control, node2, e2e.KubeOptions{
		NodeName: seed002PeerNode, PodNetwork: true, PodCIDR: "10.244.1.0/24",
		FeatureGates: gates, Images: images, KubeletConfig: dns,
	})
	c.nodes = map[string]*e2e.KubeEnv{c.control.NodeName: c.control, c.peer.NodeName: c.peer}
	c.gids = map[string]*gidHistory{}
	for _, k := range []*e2e.KubeEnv{c.control, c.peer} {
		c.gids[k.NodeName] = startGIDKernel(t, k)
		k.StartDaemon(t, "fakegpu", e2e.Binary(t, "fakegpu"), "-resource", "baidu.com/a100_80g_cgpu",
			"-gpus", "gpu0=0,gpu1=0,gpu2=0,gpu3=0,gpu4=1,gpu5=1,gpu6=1,gpu7=1")
		k.WaitNodeReady(t, 2*time.Minute)
	}
	e2e.StartCoreDNS(t, c.control, e2e.ControlLinkAddr())
	e2e.StartVolcanoStandIn(t, c.control, gates)
	e2e.StartTrainingOperator(t, c.control, e2e.BB.Ref)
	return c
}

// seed002Values is the shipped deploy/examples/seed002-values.yaml, whose
// sub-interface blocks must be those of the cluster's two nodes (one per
// subnet): the example is what the test installs.
func (c *seed002Cluster) seed002Values(t *testing.T) map[string]any {
	t.Helper()
	const file = "deploy/examples/seed002-values.yaml"
	var values map[string]any
	if err := yaml.Unmarshal([]byte(e2e.ShippedManifest(t, file)), &values); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	want := map[string]string{}
	for _, k := range []*e2e.KubeEnv{c.control, c.peer} {
		for netdev, block := range subnetRanges(k.Node) {
			want[netdev] = strings.TrimPrefix(want[netdev]+","+block, ",")
		}
	}
	got := map[string]string{}
	if pn, ok := values["podNetwork"].(map[string]any); ok {
		ranges, _ := pn["ranges"].(map[string]any)
		for netdev, block := range ranges {
			got[netdev] = fmt.Sprint(block)
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("%s: podNetwork.ranges %v, want the two nodes' blocks %v", file, got, want)
	}
	return values
}

// installAgent installs the chart with the example's values in mode, and
// waits for the agent on both nodes.
func (c *seed002Cluster) installAgent(t *testing.T, mode string) {
	t.Helper()
	values := c.seed002Values(t)
	values["mode"] = mode // the example's is dra
	ref := c.control.RDMACDIImage(t)
	c.peer.RDMACDIImage(t)
	c.control.HelmInstall(t, e2e.AgentRelease, e2e.AgentNamespace, e2e.AgentValues(ref, mode, values))
	t.Cleanup(func() { c.control.HelmUninstall(t, e2e.AgentRelease, e2e.AgentNamespace) })
	c.waitAgents(t)
}

// waitAgents waits for the agent's pod on each node, one, to be Ready
// (after a restart, the DaemonSet's new ones).
func (c *seed002Cluster) waitAgents(t *testing.T) {
	t.Helper()
	for name := range c.nodes {
		var pods []string
		err := e2e.WaitFor(context.Background(), time.Minute, func() error {
			pods = strings.Fields(c.control.MustKubectl(t, "get", "pods", "-n", e2e.AgentNamespace, "-l", e2e.AgentSelector,
				"--field-selector", "spec.nodeName="+name, "-o", "jsonpath={.items[*].metadata.name}"))
			if len(pods) != 1 {
				return fmt.Errorf("agent pods on %s: %v, want one", name, pods)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		c.control.WaitPod(t, e2e.AgentNamespace, pods[0], "Ready", 3*time.Minute)
	}
}

// TestKubeSeed002PyTorchJob: seed 002's PyTorchJob and PVC, applied as the
// seed has them (its PersistentVolume, whose required fields the seed
// leaves empty, becomes a hostPath PV of the same name), on two nodes, with
// the training operator v1.9.2 making the pods and the seed's
// `schedulerName: volcano` served by a stand-in. In each of the agent's
// Kubernetes modes the job must succeed with the Master and the Worker on
// different nodes, 16 ranks all-reducing the right sum across them, and
// each pod holding its HCAs' uverbs nodes, CAP_IPC_LOCK, unlimited memlock
// and an /etc/nccl.conf naming its own node's HCAs with the GID index of
// its own address, beside the seed's NCCL_IB_DISABLE=0 and NCCL_DEBUG=INFO.
//
// What `rdma/hca: 1` is in each mode: with the device plugin, one unit of
// the shared resource, which gives the pod every RoCE HCA NCCL would use
// (and a sub-interface on each); with DRA, one whole HCA of the hca class
// (the extended-resource mapping), whose netdev is moved into the pod.
func TestKubeSeed002PyTorchJob(t *testing.T) {
	c := newSeed002Cluster(t)
	job, pv, pvc := e2e.Seed002Documents(t)
	for _, mode := range []string{"dra", "device-plugin"} {
		t.Run(mode, func(t *testing.T) {
			c.installAgent(t, mode)
			c.control.Apply(t, seed002HostPathPV(t, pv))
			c.control.Apply(t, pvc)
			c.control.Apply(t, job)
			t.Cleanup(func() {
				c.control.MustKubectl(t, "delete", "pytorchjob", seed002Job, "-n", "default", "--wait=true", "--timeout=2m")
				c.control.MustKubectl(t, "delete", "pvc", "imagenet-22k-pvc", "-n", "default", "--wait=true", "--timeout=1m")
				c.control.MustKubectl(t, "delete", "pv", "imagenet-22k-pv", "--wait=true", "--timeout=1m")
			})
			e2e.WaitPyTorchJob(t, c.control, "default", seed002Job, "Succeeded", 8*time.Minute)
			c.checkJob(t, mode)
		})
	}
}

// checkJob reads both pods' output (main.py's report, through the CRI of
// the node each ran on) and checks it.
func (c *seed002Cluster) checkJob(t *testing.T, mode string) {
	t.Helper()
	nodesUsed := map[string]string{}
	ranks := map[int]bool{}
	for _, replica := range []string{"master", "worker"} {
		pod := seed002Job + "-" + replica + "-0"
		nodeName := c.control.MustKubectl(t, "get", "pod", pod, "-n", "default", "-o", "jsonpath={.spec.nodeName}")
		k := c.nodes[nodeName]
		if k == nil {
			t.Fatalf("pod %s ran on %q, not one of %v", pod, nodeName, slices.Collect(maps.Keys(c.nodes)))
		}
		if other, dup := nodesUsed[nodeName]; dup {
			t.Fatalf("pods %s and %s both ran on %s", other, pod, nodeName)
		}
		nodesUsed[nodeName] = pod
		out := k.Logs("default", pod, "pytorch")
		t.Logf("%s on %s:\n%s", pod, nodeName, out)
		for _, m := range allreduceLine.FindAllStringSubmatch(out, -1) {
			r, _ := strconv.Atoi(m[1])
			if m[2] != "16" || m[3] != "136" || m[4] != "ok" {
				t.Errorf("%s: %s", pod, m[0])
			}
			ranks[r] = true
		}
		checkRankReport(t, k, c.gids[nodeName], pod, out, mode)
	}
	if len(ranks) != 16 {
		t.Errorf("%d ranks reported the all-reduce (%v), want 16", len(ranks), ranks)
	}
}

var (
	allreduceLine = regexp.MustCompile(`(?m)^rank (\d+)/(\d+) allreduce sum (\d+) (\S+)`)
	reportLine    = regexp.MustCompile(`(?m)^rank \d+/16 (.*)$`)
)

// checkRankReport checks what local rank 0 of pod reported about its
// container (main.py's rdma_needs and nccl_settings).
func checkRankReport(t *testing.T, k *e2e.KubeEnv, gids *gidHistory, pod, out, mode string) {
	t.Helper()
	report := map[string]bool{}
	conf := map[string]string{}
	addrs := map[string]netip.Prefix{}
	var devs []string
	for _, m := range reportLine.FindAllStringSubmatch(out, -1) {
		line := m[1]
		report[line] = true
		if kv, ok := strings.CutPrefix(line, "  "); ok {
			if name, value, ok := strings.Cut(kv, "="); ok {
				conf[name] = value
			}
		}
		if rest, ok := strings.CutPrefix(line, "/dev/infiniband: "); ok {
			devs = strings.Fields(rest)
		}
		if f := strings.Fields(line); len(f) == 3 && f[0] == "inet" {
			if p, err := netip.ParsePrefix(f[2]); err == nil {
				addrs[f[1]] = p
			}
		}
	}
	for _, want := range []string{"env NCCL_DEBUG=INFO", "env NCCL_IB_DISABLE=0", "CAP_IPC_LOCK effective"} {
		if !report[want] {
			t.Errorf("%s: no %q in its report", pod, want)
		}
	}
	checkMemlockReport(t, pod, out)
	if conf["NCCL_SOCKET_IFNAME"] != "eth0" {
		t.Errorf("%s: /etc/nccl.conf NCCL_SOCKET_IFNAME=%q, want eth0 (the pod network)", pod, conf["NCCL_SOCKET_IFNAME"])
	}
	var hcas []string
	for _, h := range strings.Split(conf["NCCL_IB_HCA"], ",") {
		if name, _, ok := strings.Cut(h, ":"); ok {
			hcas = append(hcas, name)
		}
	}
	wantHCAs := 1
	if mode == "device-plugin" {
		wantHCAs = 8 // the shared unit: every RoCE HCA NCCL would use
	}
	if len(hcas) != wantHCAs {
		t.Fatalf("%s: /etc/nccl.conf NCCL_IB_HCA=%q, want %d HCAs", pod, conf["NCCL_IB_HCA"], wantHCAs)
	}
	idx, err := strconv.Atoi(conf["NCCL_IB_GID_INDEX"])
	if err != nil {
		t.Fatalf("%s: /etc/nccl.conf NCCL_IB_GID_INDEX=%q", pod, conf["NCCL_IB_GID_INDEX"])
	}
	// Exactly its HCAs' uverbs nodes: no other HCA of the node reached
	// the pod (in DRA mode, another pod's).
	var want []string
	for _, hca := range hcas {
		want = append(want, uverbsOf(t, k.Node, hca))
	}
	for _, d := range devs {
		if strings.HasPrefix(d, "uverbs") && !slices.Contains(want, d) {
			t.Errorf("%s: its /dev/infiniband %v has %s, which is none of its HCAs' (%v)", pod, devs, d, want)
		}
	}
	for _, hca := range hcas {
		dev, ok := k.Node.Topo.DeviceByName(hca)
		if !ok {
			t.Errorf("%s: NCCL_IB_HCA names %s, which node %s does not have", pod, hca, k.NodeName)
			continue
		}
		if uverbs := uverbsOf(t, k.Node, hca); !slices.Contains(devs, uverbs) {
			t.Errorf("%s: %s's %s not in its /dev/infiniband %v", pod, hca, uverbs, devs)
		}
		netdev := dev.Ports[0].NetDev
		// DRA keeps the host netdev's name; the device plugin numbers
		// the pod's interfaces net1..netN in the node's order of its HCAs.
		iface := netdev
		if mode == "device-plugin" {
			iface = fmt.Sprintf("net%d", inNodeOrder(k.Node.Topo, hcas, hca)+1)
		}
		addr, ok := addrs[iface]
		if !ok {
			t.Errorf("%s: no %s (%s's interface) among its addresses %v", pod, iface, hca, addrs)
			continue
		}
		// The entry as the kernel made it while the pod ran: a
		// sub-interface's went with its sandbox; a moved netdev's came back
		// with it to the node, as it was before the pod.
		got, ndev := gids.roceV2(hca, addr.Addr(), iface)
		if got < 0 {
			got, ndev = roceV2Index(t, k.Node, hca, addr.Addr())
		}
		if got != idx || ndev != iface {
			t.Errorf("%s: NCCL_IB_GID_INDEX %d, but the RoCE v2 entry of its %s (%s) on %s is %d (on %q)", pod, idx, iface, addr, hca, got, ndev)
		}
	}
}

// inNodeOrder is how many of hcas come before hca in the node's order of
// its devices.
func inNodeOrder(topo fixture.Topology, hcas []string, hca string) int {
	n := 0
	for _, d := range topo.Devices {
		if d.Name == hca {
			return n
		}
		if slices.Contains(hcas, d.Name) {
			n++
		}
	}
	return n
}

// seed002HostPathPV is the seed's PersistentVolume with its CSI source,
// whose required fields the seed leaves empty, replaced by a hostPath of
// the same capacity and access mode: the storage admin's part.
func seed002HostPathPV(t testing.TB, pv string) string {
	t.Helper()
	i := strings.Index(pv, "\n  csi:")
	if i < 0 {
		t.Fatalf("seed 002's PersistentVolume has no csi source:\n%s", pv)
	}
	return pv[:i] + "\n  hostPath:\n    path: /run/rdma-cdi-e2e-imagenet\n    type: DirectoryOrCreate\n"
}

// uverbsOf is the uverbsN node of ibdev in node's fixture sysfs.
func uverbsOf(t testing.TB, node *e2e.FixtureNode, ibdev string) string {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(node.Sys, "class/infiniband_verbs/uverbs*"))
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "ibdev")); err == nil && strings.TrimSpace(string(b)) == ibdev {
			return filepath.Base(d)
		}
	}
	t.Fatalf("no uverbs node of %s in %s", ibdev, node.Sys)
	return ""
}

var memlockLine = regexp.MustCompile(`(?m)^rank \d+/16 memlock soft (\S+) hard (\S+)$`)

// checkMemlockReport: the hook set memlock to hooks.memlock (unlimited).
// Where the runtime runs without CAP_SYS_RESOURCE, as root does on these
// test machines, no process may raise a hard limit above the runtime's (8
// MiB): then the soft limit raised to the hard one is all there is to see.
func checkMemlockReport(t *testing.T, pod, out string) {
	t.Helper()
	m := memlockLine.FindStringSubmatch(out)
	switch {
	case m == nil:
		t.Errorf("%s: no memlock line in its report", pod)
	case hasCapability(unix.CAP_SYS_RESOURCE):
		if m[1] != "unlimited" || m[2] != "unlimited" {
			t.Errorf("%s: memlock soft %s hard %s, want unlimited", pod, m[1], m[2])
		}
	case m[1] != m[2]:
		t.Errorf("%s: memlock soft %s hard %s, want the soft limit raised to the hard one", pod, m[1], m[2])
	default:
		t.Logf("%s: memlock %s (no CAP_SYS_RESOURCE here: the hard limit stays the runtime's)", pod, m[2])
	}
}

// hasCapability reports whether this process has capability c in its
// effective set.
func hasCapability(c int) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			eff, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			return err == nil && eff&(1<<uint(c)) != 0
		}
	}
	return false
}
