package network

import (
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// sandboxList is where the agent lists the sandboxes it has handled
// (pod_network.state_dir's default, on the node's tmpfs /run).
const sandboxList = "/run/rdma-cdi/pod-sandboxes.json"

// TestKubePodNetworkLifecycle: pod networking across the node's life, on
// seed 002's node in mode dra, with a pod whose claim asks for a
// sub-interface named net1. Each step ends with the pod's container
// started after its interface was in: net1 holds an address of the node's
// range and /etc/nccl.conf names the GID index the kernel gave that
// address (a container started before the attach would name the node's
// static index).
//
//   - first install: the pod is created before the agent, so the kubelet
//     prepares its claim as soon as the driver registers, while the NRI
//     plugin may not have synchronized yet;
//   - reboot: every node process killed and /run emptied (the list with
//     it) while the pod runs; the kubelet starts a new sandbox and
//     container, and the hook must not let the container start before
//     the agent has given the new sandbox its interface;
//   - two sub-interfaces in one subnet: each address has its own table
//     and source rule, and its traffic leaves by its own interface;
//   - pod networking turned off by an upgrade: the list goes, and a pod
//     with an HCA in its own network namespace starts as without pod
//     networking.
func TestKubePodNetworkLifecycle(t *testing.T) {
	node := e2e.NewFixtureNode(t, "seed002")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{
		PodNetwork: true, FeatureGates: map[string]bool{"DRAExtendedResource": true},
		Images: []string{e2e.Glibc.DockerArchive(t)},
	})
	startGIDKernel(t, k)
	ns := e2e.UniqueID("podnet-life-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+
		e2e.WithClaimConfig(e2e.ClaimTemplate(ns, "sub", "roce", `'device.attributes["rdma.example.com"].ibdev == "mlx5_2"'`, ""), "mode: sub-interface, interfaceName: net1")+"---\n"+
		podNetPod(ns, "user", "sub"))
	values := map[string]any{"podNetwork": map[string]any{"enabled": true, "ranges": podNetworkRanges(t, node)}}

	// The first install, with the pod pending; installed by the test, not
	// a subtest, whose end would uninstall it.
	k.InstallAgent(t, "dra", values)
	k.WaitPod(t, ns, "user", "Ready", 3*time.Minute)
	checkSubInterfaceFromStart(t, k, node, ns, "user")

	t.Run("reboot", func(t *testing.T) {
		old := e2e.ContainerOf(t, k, ns, "user").ContainerID
		k.RebootNode(t, nil)
		if err := e2e.WaitContainerReplaced(t, k, ns, "user", old, 4*time.Minute); err != nil {
			t.Fatalf("the pod did not run again after the reboot: %v\n%s\n%s", err, k.PodEvents(ns, "user"), e2e.AgentLogTail(t, k))
		}
		checkSubInterfaceFromStart(t, k, node, ns, "user")
		t.Logf("the pod's events across the reboot:\n%s", k.PodEvents(ns, "user"))
	})

	t.Run("two interfaces in one subnet", func(t *testing.T) {
		e2e.NeedsKube(t, 36, "consumable capacity: no HCA is shared")
		// Two 40 Gb/s shares of mlx5_7, so two macvlans of eth7 in its
		// subnet, in one pod.
		const mlx57 = `'device.attributes["rdma.example.com"].ibdev == "mlx5_7"'`
		capacity := "\n            capacity:\n              requests:\n                bandwidth: \"40\""
		pod := strings.Replace(podNetPod(ns, "twice", "one"), "      resourceClaimTemplateName: one\n",
			"      resourceClaimTemplateName: one\n    - name: rdma2\n      resourceClaimTemplateName: two\n", 1)
		pod = strings.Replace(pod, "          - name: rdma\n", "          - name: rdma\n          - name: rdma2\n", 1)
		k.Apply(t, e2e.WithClaimConfig(e2e.ClaimTemplate(ns, "one", "shared", mlx57, capacity), "mode: sub-interface, interfaceName: net1")+"---\n"+
			e2e.WithClaimConfig(e2e.ClaimTemplate(ns, "two", "shared", mlx57, capacity), "mode: sub-interface, interfaceName: net2")+"---\n"+pod)
		k.WaitPod(t, ns, "twice", "Ready", 3*time.Minute)
		addrs := podAddrs(t, k, ns, "twice")
		rules := k.MustExecInPod(t, ns, "twice", "main", "ip", "rule", "show")
		for _, ifname := range []string{"net1", "net2"} {
			addr, err := netip.ParsePrefix(addrs[ifname])
			if err != nil {
				t.Fatalf("pod twice: %s has no IPv4 address (%v)", ifname, addrs)
			}
			// Each address its own table, numbered by the interface's
			// place in the plan (docs/kubernetes.md).
			m := regexp.MustCompile(`(?m)^(\d+):\s+from ` + regexp.QuoteMeta(addr.Addr().String()) + ` lookup (\d+)\s*$`).FindStringSubmatch(rules)
			if m == nil || m[1] != m[2] {
				t.Errorf("pod twice: no rule from %s to a table of its own:\n%s", addr.Addr(), rules)
				continue
			}
			if routes := k.MustExecInPod(t, ns, "twice", "main", "ip", "route", "show", "table", m[2]); !strings.Contains(routes, "dev "+ifname) {
				t.Errorf("pod twice: table %s, %s's by its rule, holds no route by %s:\n%s", m[2], addr.Addr(), ifname, routes)
			}
			peer := addr.Masked().Addr().Next().Next().Next() // another host of the subnet
			if via := k.MustExecInPod(t, ns, "twice", "main", "ip", "route", "get", peer.String(), "from", addr.Addr().String()); !strings.Contains(via, "dev "+ifname) {
				t.Errorf("pod twice: traffic from %s to %s leaves by %q, want %s", addr.Addr(), peer, via, ifname)
			}
			if v := strings.TrimSpace(k.MustExecInPod(t, ns, "twice", "main", "cat", "/proc/sys/net/ipv4/conf/"+ifname+"/arp_ignore")); v != "1" {
				t.Errorf("pod twice: %s arp_ignore %s, want 1", ifname, v)
			}
		}
		k.MustKubectl(t, "delete", "pod", "-n", ns, "twice", "--wait=true", "--timeout=2m")
	})

	t.Run("pod networking turned off", func(t *testing.T) {
		k.MustKubectl(t, "delete", "pod", "-n", ns, "user", "--wait=true", "--timeout=2m")
		waitNoSandboxes(t, k, draNetworkState)
		k.HelmUpgrade(t, e2e.AgentRelease, e2e.AgentNamespace, e2e.AgentValues(k.RDMACDIImage(t), "dra", nil))
		// The old agent's pod lingers (Succeeded) until the new one rolls out.
		k.MustKubectl(t, "rollout", "status", "daemonset/"+e2e.AgentRelease, "-n", e2e.AgentNamespace, "--timeout=3m")
		if err := e2e.WaitFor(t.Context(), time.Minute, func() error {
			if _, err := os.Stat(k.NodePath(sandboxList)); err == nil {
				return fmt.Errorf("%s is still there", sandboxList)
			}
			return nil
		}); err != nil {
			t.Fatalf("with pod networking off: %v\n%s", err, e2e.AgentLogTail(t, k))
		}
		// A pod in its own network namespace whose claim asks for nothing
		// of the network: with pod networking off it starts with its
		// HCA's nodes and the pod network's eth0 alone.
		k.Apply(t, e2e.ClaimTemplate(ns, "plain", "roce", `'device.attributes["rdma.example.com"].ibdev == "mlx5_3"'`, "")+"---\n"+podNetPod(ns, "plain", "plain"))
		k.WaitPod(t, ns, "plain", "Ready", 2*time.Minute)
		if got := podAddrs(t, k, ns, "plain"); len(got) != 2 || got["eth0"] == "" {
			t.Errorf("pod plain has addresses %v, want lo and its eth0 only", got)
		}
		want := uverbsOf(t, node, "mlx5_3")
		if devs := k.MustExecInPod(t, ns, "plain", "main", "ls", "/dev/infiniband"); !slices.Contains(strings.Fields(devs), want) {
			t.Errorf("pod plain's /dev/infiniband holds %q, want mlx5_3's %s", devs, want)
		}
	})
}

// checkSubInterfaceFromStart: pod holds net1, a macvlan of its HCA's
// netdev with an address of the node's range, and its container's
// /etc/nccl.conf (written by the hook at the container's start) names the
// GID index of that address.
func checkSubInterfaceFromStart(t *testing.T, k *e2e.KubeEnv, node *e2e.FixtureNode, ns, pod string) {
	t.Helper()
	ibdev := claimedHCA(t, k, ns, pod)
	netdev, _ := fixtureNetDev(t, node, ibdev)
	addr, err := netip.ParsePrefix(podAddrs(t, k, ns, pod)["net1"])
	if err != nil || !inRange(addr.Addr(), subnetRanges(node)[netdev]) {
		t.Fatalf("pod %s: net1 %v, want an address of %s's range %s", pod, addr, netdev, subnetRanges(node)[netdev])
	}
	checkPodGID(t, k, node, ns, pod, ibdev, "net1", addr)
}
