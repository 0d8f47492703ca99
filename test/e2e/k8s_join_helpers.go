package e2e

// A second node in the cluster of a KubeNode: KubeJoin starts containerd
// and a kubelet in namespaces of their own, with a fixture node of their
// own as their host, registered with the first node's API server. The two
// network namespaces are joined by a veth pair (peerLink) with routes
// between their pod subnets, as a cluster's CNI routes pods between nodes:
// no overlay, no NAT, every pod reaching every other by its address.

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"
)

// peerLink is the link between a control node and its peer i
// (KubeOptions.Peers): a /30 of 172.31.255.0/24 per peer, the control
// node's end first.
func peerLink(i int) (controlEnd, peerEnd netip.Prefix) {
	base := netip.AddrFrom4([4]byte{172, 31, 255, byte(4 * i)})
	return netip.PrefixFrom(base.Next(), 30), netip.PrefixFrom(base.Next().Next(), 30)
}

// ControlLinkAddr is the control node's end of its link to its first peer:
// an address that pods of every node reach, where the cluster DNS listens.
func ControlLinkAddr() string {
	controlEnd, _ := peerLink(0)
	return controlEnd.Addr().String()
}

// linkNodes joins control's and peer's network namespaces with a veth pair
// (control's end peerN, peer's ctl0) and routes each one's InternalIP and
// pod subnet through the other's end; both forward (they route their
// pods' traffic).
func linkNodes(control, peer *KubeEnv, i int) error {
	controlEnd, peerEnd := peerLink(i)
	name := fmt.Sprintf("peer%d", i)
	type step struct {
		on     *KubeEnv
		script string
	}
	steps := []step{
		{control, fmt.Sprintf("ip link add %s type veth peer name ctl0 netns %d && ip addr add %s dev %s && ip link set %s up && echo 1 >/proc/sys/net/ipv4/ip_forward",
			name, peer.pid, controlEnd, name, name)},
		{peer, fmt.Sprintf("ip addr add %s dev ctl0 && ip link set ctl0 up && echo 1 >/proc/sys/net/ipv4/ip_forward", peerEnd)},
	}
	// Each node's InternalIP through the link, as a cluster's nodes reach
	// one another: the peer's hostNetwork pods reach the API server
	// through the kubernetes Service (DNAT after the source address was
	// picked: the InternalIP), and the API server the peer's kubelet.
	if control.NodeIP != "" && peer.NodeIP != "" {
		steps = append(steps, step{control, fmt.Sprintf("ip route add %s/32 via %s", peer.NodeIP, peerEnd.Addr())},
			step{peer, fmt.Sprintf("ip route add %s/32 via %s", control.NodeIP, controlEnd.Addr())})
	}
	if control.PodCIDR != "" && peer.PodCIDR != "" {
		steps = append(steps, step{control, fmt.Sprintf("ip route add %s via %s", peer.PodCIDR, peerEnd.Addr())},
			step{peer, fmt.Sprintf("ip route add %s via %s", control.PodCIDR, controlEnd.Addr())})
	}
	for _, s := range steps {
		if out, err := s.on.InNode("/bin/sh", "-ec", s.script).CombinedOutput(); err != nil {
			return fmt.Errorf("linking nodes %s and %s (%s): %v: %s", control.NodeName, peer.NodeName, s.script, err, out)
		}
	}
	return nil
}

// KubeJoin returns a node (containerd and a kubelet; opts say more, as for
// KubeNode) whose host is the fixture node, joined to control's cluster:
// opts.NodeName must be among the Peers control was started with, and its
// PodCIDR differ from control's. Its Kubectl reaches the same API server.
// It is shared like KubeNode's nodes.
func KubeJoin(t testing.TB, control *KubeEnv, node *FixtureNode, opts KubeOptions) *KubeEnv {
	t.Helper()
	if opts.NodeName == "" {
		t.Fatal("KubeJoin needs KubeOptions.NodeName")
	}
	if requireKubeRuntime(t, opts.Runtime) == runtimeContainerd {
		opts.Runtime = ""
	}
	if opts.PodNetwork && (opts.PodCIDR == "" || opts.PodCIDR == control.PodCIDR) {
		t.Fatalf("KubeJoin: node %s needs a pod subnet of its own (control's is %s)", opts.NodeName, control.PodCIDR)
	}
	images := append([]string{Pause.DockerArchive(t), BB.DockerArchive(t)}, opts.Images...)
	return GetOwned(t, node.owner, "kube-join\x00"+control.Dir+"\x00"+node.Dir+"\x00"+opts.key(), func(c Cleaner) (*KubeEnv, error) {
		start := time.Now()
		k, err := startKube(c, node, opts, control.BinDir, images, control)
		if err == nil {
			t.Logf("kubernetes %s node %s joined %s in %v (%s)", KubeVersion(), k.NodeName, control.NodeName,
				time.Since(start).Round(100*time.Millisecond), filepath.Base(k.Dir))
		}
		return k, err
	})
}
