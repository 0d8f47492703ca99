package network

// The pod network of a KubeNode (KubeOptions.PodNetwork): Debian's CNI
// bridge and host-local plugins run by containerd's CRI plugin.

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// TestKubePodNetwork: a node with a pod network is Ready and untainted,
// NRI listens, and pods without hostNetwork and without tolerations
// schedule, run with an eth0 in the pod subnet and a default route via the
// bridge, reach each other, and give their addresses back when deleted.
func TestKubePodNetwork(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{PodNetwork: true})
	if k.PodCIDR != e2e.DefaultPodCIDR || k.PodGateway() != "10.244.0.1" {
		t.Fatalf("pod subnet %q gateway %q, want %s via 10.244.0.1", k.PodCIDR, k.PodGateway(), e2e.DefaultPodCIDR)
	}
	subnet := netip.MustParsePrefix(k.PodCIDR)
	gw := k.PodGateway()

	// KubeNode waited for this; nothing may have taken it back.
	k.WaitNodeReady(t, 30*time.Second)
	// containerd's NRI plugin listens where NRISocket says.
	if sock := k.NRISocket(); sock == "" {
		t.Error("NRISocket is empty on a node with a pod network")
	} else if c, err := net.DialTimeout("unix", sock, 5*time.Second); err != nil {
		t.Errorf("NRI socket %s: %v\n%s", sock, err, e2e.TailFile(k.Proc("containerd").Log, 3000))
	} else {
		c.Close()
	}

	ns := "podnet-" + e2e.UniqueID("")
	pods := []string{"a", "b"}
	manifest := fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", ns)
	for _, name := range pods {
		// No hostNetwork, no tolerations: the pod network and an
		// untainted node are what let it run.
		manifest += fmt.Sprintf(`---
apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
spec:
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  containers:
    - name: main
      image: %s
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", "exec sleep 3600"]
`, name, ns, e2e.BB.Ref)
	}
	k.Apply(t, manifest)
	t.Cleanup(func() { _, _, _ = k.Kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false") })
	// Scheduling first, with a short bound: a NotReady or tainted node
	// leaves the pods Pending, and the failure shows the scheduler's
	// reason (the untolerated taint) at once.
	for _, name := range pods {
		k.WaitPod(t, ns, name, "PodScheduled", 30*time.Second)
	}
	ips := map[string]string{}
	for _, name := range pods {
		k.WaitPod(t, ns, name, "Ready", 2*time.Minute)
		hostNet, _, _ := k.Kubectl("get", "pod", "-n", ns, name, "-o", "jsonpath={.spec.hostNetwork}")
		podIP, _, _ := k.Kubectl("get", "pod", "-n", ns, name, "-o", "jsonpath={.status.podIP}")
		if strings.TrimSpace(hostNet) == "true" {
			t.Fatalf("pod %s has hostNetwork", name)
		}
		addrs := k.MustExecInPod(t, ns, name, "main", "ip", "-o", "addr")
		var eth0 []netip.Prefix
		for _, line := range strings.Split(addrs, "\n") {
			f := strings.Fields(line)
			if len(f) < 4 || f[2] != "inet" {
				continue
			}
			if dev, _, _ := strings.Cut(f[1], "@"); dev != "eth0" {
				continue
			}
			if p, err := netip.ParsePrefix(f[3]); err == nil {
				eth0 = append(eth0, p)
			}
		}
		if len(eth0) != 1 || !subnet.Contains(eth0[0].Addr()) || eth0[0].Bits() != subnet.Bits() {
			t.Fatalf("pod %s: eth0's IPv4 addresses %v, want one in %s\nip -o addr:\n%s", name, eth0, subnet, addrs)
		}
		ip := eth0[0].Addr().String()
		if strings.TrimSpace(podIP) != ip {
			t.Errorf("pod %s: status.podIP %q, eth0 has %s", name, podIP, ip)
		}
		if k.NodeIP != "" && strings.Contains(addrs, " "+k.NodeIP+"/") {
			t.Errorf("pod %s sees the node's address %s: not in a network namespace of its own\n%s", name, k.NodeIP, addrs)
		}
		routes := k.MustExecInPod(t, ns, name, "main", "ip", "route")
		if !strings.Contains(routes, "default via "+gw+" dev eth0") {
			t.Errorf("pod %s: no default route via %s on eth0:\n%s", name, gw, routes)
		}
		// host-local's lease, in the node's own /var/lib/cni.
		if _, err := os.Stat(filepath.Join(k.Dir, "varlibcni", "networks", "e2e-pods", ip)); err != nil {
			t.Errorf("pod %s: no host-local lease for %s in the node's /var/lib/cni: %v", name, ip, err)
		}
		ips[name] = ip
	}
	if ips["a"] == ips["b"] {
		t.Fatalf("both pods have %s", ips["a"])
	}
	t.Logf("pods a %s, b %s in %s via %s", ips["a"], ips["b"], subnet, gw)
	// The node's end of the network (made at the first pod's CNI ADD): the
	// bridge with the gateway address.
	if out, se, err := e2e.Run(k.InNode("ip", "-o", "-4", "addr", "show", "dev", "cni0")); err != nil || !strings.Contains(out, " "+gw+"/24 ") {
		t.Errorf("cni0 in the node: %q, %v %s; want %s/24", out, err, se, gw)
	}
	if _, err := os.Stat("/var/lib/cni"); err == nil {
		if _, err := os.Stat(filepath.Join("/var/lib/cni/networks/e2e-pods", ips["a"])); err == nil {
			t.Errorf("the node's host-local lease leaked to the host's /var/lib/cni")
		}
	}

	// Each pod reaches the other over the bridge.
	for _, c := range [][2]string{{"a", "b"}, {"b", "a"}} {
		var so, se string
		code := -1
		for try := 0; try < 3 && code != 0; try++ {
			var err error
			if so, se, code, err = k.ExecInPod(ns, c[0], "main", "ping", "-c1", "-W2", ips[c[1]]); err != nil {
				t.Fatal(err)
			}
		}
		if code != 0 {
			t.Errorf("ping from pod %s (%s) to pod %s (%s): exit %d\n%s%s", c[0], ips[c[0]], c[1], ips[c[1]], code, so, se)
		}
	}

	// Deleted, a pod's sandbox goes through CNI DEL: its lease is gone.
	k.MustKubectl(t, "delete", "pod", "-n", ns, "a", "--wait=true", "--timeout=90s")
	lease := filepath.Join(k.Dir, "varlibcni", "networks", "e2e-pods", ips["a"])
	if err := e2e.WaitFor(t.Context(), 30*time.Second, func() error {
		if _, err := os.Stat(lease); err == nil {
			return fmt.Errorf("%s still leased", ips["a"])
		}
		return nil
	}); err != nil {
		t.Errorf("pod a deleted: %v\n%s", err, e2e.TailFile(k.Proc("containerd").Log, 3000))
	}
}
