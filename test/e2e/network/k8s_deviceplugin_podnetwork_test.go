package network

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// seedPodManifest is seed 002's Master container as its PyTorchJob writes
// it (rdma/hca: 1, IPC_LOCK, the seed's NCCL env, the istio annotation),
// in a pod of its own network namespace: no hostNetwork, no toleration and
// no annotation asking for a network. Busybox stands in for the seed's
// image (the test reads the pod with ip and cat), and its GPU limit is
// left to the GPU and PyTorchJob tests; rdma is false for a bystander
// with neither the limit nor the capability.
func seedPodManifest(ns, name string, rdma bool) string {
	container := ""
	if rdma {
		container = `
      env:
        - name: NCCL_DEBUG
          value: "INFO"
        - name: NCCL_IB_DISABLE
          value: "0"
      securityContext:
        capabilities:
          add: [ "IPC_LOCK" ]
      resources:
        limits:
          rdma/hca: 1`
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  annotations:
    sidecar.istio.io/inject: "false"
spec:
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  containers:
    - name: main
      image: %s
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", "exec sleep 3600"]%s
`, name, ns, e2e.BB.Ref, container)
}

// devicePluginNetworkState is where the device plugin keeps pod-network.json.
const devicePluginNetworkState = "/run/rdma-cdi"

// TestKubeDevicePluginPodNetwork: the device plugin with podNetwork on, on
// seed 002's node with a pod network. Two pods of seed 002's spec, unchanged
// (rdma/hca: 1 is a unit of the shared resource, which gives every RoCE HCA
// NCCL would use), each get a macvlan of every HCA's netdev, named as on the
// node, with their own address from the node's range and the host subnet's
// prefix length; the kernel (the fixture's GID kernel) gives each address a
// RoCE v2 entry, and each pod's /etc/nccl.conf holds that entry's index, its
// HCAs and its eth0 for the bootstrap. A bystander gets eth0 alone. Once
// every pod is gone the node's namespace is exactly as before and the
// agent's records name no sandbox.
func TestKubeDevicePluginPodNetwork(t *testing.T) {
	node := e2e.NewFixtureNode(t, "seed002")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{PodNetwork: true, Images: []string{e2e.BB.DockerArchive(t)}})
	startGIDKernel(t, k)
	ranges := podNetworkRanges(t, node)
	k.InstallAgent(t, "device-plugin", map[string]any{"podNetwork": map[string]any{"enabled": true, "ranges": ranges}})
	k.WaitNodeAllocatable(t, e2e.SharedResource, "1000", 2*time.Minute)
	before := nodeNetState(t, k)

	ns := e2e.UniqueID("dp-podnet-")
	trainers := []string{"trainer-0", "trainer-1"}
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+seedPodManifest(ns, trainers[0], true)+"---\n"+
		seedPodManifest(ns, trainers[1], true)+"---\n"+seedPodManifest(ns, "bystander", false))
	roce := []string{"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8"}
	var ports []string
	for _, h := range roce {
		ports = append(ports, h+":1")
	}
	held := map[netip.Addr]string{}
	for _, pod := range trainers {
		k.WaitPod(t, ns, pod, "Ready", 2*time.Minute)
		addrs := podAddrs(t, k, ns, pod)
		conf := k.MustExecInPod(t, ns, pod, "main", "cat", "/etc/nccl.conf")
		m := gidIndex.FindStringSubmatch(conf)
		if m == nil {
			t.Fatalf("pod %s: no NCCL_IB_GID_INDEX in /etc/nccl.conf:\n%s\n%s", pod, conf, e2e.AgentLogTail(t, k))
		}
		for _, want := range []string{"NCCL_IB_HCA=" + strings.Join(ports, ",") + "\n", "NCCL_SOCKET_IFNAME=eth0\n"} {
			if !strings.Contains(conf, want) {
				t.Errorf("pod %s: /etc/nccl.conf lacks %q:\n%s", pod, want, conf)
			}
		}
		if eth0, err := netip.ParsePrefix(addrs["eth0"]); err != nil || !netip.MustParsePrefix(k.PodCIDR).Contains(eth0.Addr()) {
			t.Errorf("pod %s: eth0 %q, want an address of the pod network %s", pod, addrs["eth0"], k.PodCIDR)
		}
		t.Logf("pod %s: NCCL_IB_GID_INDEX=%s, addresses %v", pod, m[1], addrs)
		for i, ibdev := range roce {
			netdev, hostAddr := fixtureNetDev(t, node, ibdev)
			// Numbered in the node's order of the HCAs, never the host netdev's name.
			podIf := fmt.Sprintf("net%d", i+1)
			addr, err := netip.ParsePrefix(addrs[podIf])
			if err != nil || !inRange(addr.Addr(), fmt.Sprint(ranges[netdev])) || addr.Bits() != hostAddr.Bits() {
				t.Fatalf("pod %s: %s (of %s) %q, want a /%d address of the node's range %v (addresses %v)\n%s", pod, podIf, netdev, addrs[podIf], hostAddr.Bits(), ranges[netdev], addrs, e2e.AgentLogTail(t, k))
			}
			if other, dup := held[addr.Addr()]; dup {
				t.Fatalf("pods %s and %s both hold %s", other, pod, addr)
			}
			held[addr.Addr()] = pod
			if idx, named := roceV2Index(t, node, ibdev, addr.Addr()); fmt.Sprint(idx) != m[1] || named != podIf {
				t.Errorf("pod %s: %s's RoCE v2 entry of %s is %d on %q; nccl.conf says NCCL_IB_GID_INDEX=%s", pod, ibdev, addr, idx, named, m[1])
			}
		}
	}
	k.WaitPod(t, ns, "bystander", "Ready", time.Minute)
	if got := podAddrs(t, k, ns, "bystander"); len(got) != 2 || got["eth0"] == "" || got["lo"] == "" {
		t.Errorf("the bystander holds %v, want eth0 and lo alone", got)
	}
	if recorded := networkCheckpointSandboxes(t, k, devicePluginNetworkState); !slices.Equal(recorded, []string{ns + "/trainer-0", ns + "/trainer-1"}) {
		t.Errorf("the agent records the pod network of %v, want the two trainers", recorded)
	}

	k.MustKubectl(t, "delete", "pod", "-n", ns, "--all", "--wait=true")
	waitNodeNetState(t, k, before)
	waitNoSandboxes(t, k, devicePluginNetworkState)
}
