package kube

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// TestKubeDRAClaimStatus: after prepare, the claim's status carries our
// device's entry (Ready, networkData with the HCA's netdev, its MAC and
// exactly its addresses in the node, the fixture's among them, and the NCCL
// settings for it); a new address on the netdev shows up beside them; when
// the pod goes the entry goes. The agent may write the
// status only of claims allocated on its node.
func TestKubeDRAClaimStatus(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.DRANode(t, node, 9)
	ns := e2e.UniqueID("dra-status-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: hca
  namespace: %s
spec:
  devices:
    requests:
      - name: hca
        exactly:
          deviceClassName: roce.rdma.example.com
`, ns)+"---\n"+e2e.GlibcPodManifest(ns, "user",
		"\n  resourceClaims:\n    - name: rdma\n      resourceClaimName: hca",
		"\n      resources:\n        claims:\n          - name: rdma"))
	k.WaitPod(t, ns, "user", "Ready", 2*time.Minute)

	d := e2e.WaitDeviceStatus(t, k, ns, "hca", "a Ready and Healthy entry with networkData", func(d *resourceapi.AllocatedDeviceStatus) bool {
		return d != nil && d.NetworkData != nil && len(d.Conditions) == 2 &&
			d.Conditions[0].Type == "Ready" && d.Conditions[0].Status == "True" &&
			d.Conditions[1].Type == "Healthy" && d.Conditions[1].Status == "True"
	})
	dev, ok := e2e.DeviceByName(e2e.SliceDevices(t, k), d.Device)
	if !ok {
		t.Fatalf("status names device %s, not in the slice", d.Device)
	}
	ibdev, netdev := e2e.Attr(dev, "ibdev").(string), e2e.Attr(dev, "netdev").(string)
	mac, err := os.ReadFile(k.NodePath("/sys/class/net/" + netdev + "/address"))
	if err != nil {
		t.Fatal(err)
	}
	nd := d.NetworkData
	if nd.InterfaceName != netdev || nd.HardwareAddress != strings.TrimSpace(string(mac)) {
		t.Errorf("networkData %+v; want %s with MAC %s", nd, netdev, mac)
	}
	// Every address of the netdev, and no other: those the fixture gave it
	// are among them.
	onNetdev := waitStatusIPs(t, k, ns, "hca", netdev)
	i := slices.IndexFunc(node.Topo.NetDevs, func(n fixture.NetDev) bool { return n.Name == netdev })
	if i < 0 || len(node.Topo.NetDevs[i].Addrs) == 0 {
		t.Fatalf("seed 002's %s has no address in the fixture", netdev)
	}
	for _, a := range node.Topo.NetDevs[i].Addrs {
		if !slices.Contains(onNetdev, netip.MustParsePrefix(a).String()) {
			t.Errorf("the fixture's address %s is not on %s in the node: %v", a, netdev, onNetdev)
		}
	}
	var data map[string]string
	if d.Data == nil || json.Unmarshal(d.Data.Raw, &data) != nil || data["NCCL_IB_HCA"] != ibdev+":1" || data["NCCL_IB_GID_INDEX"] != "3" {
		t.Errorf("data %v; want NCCL_IB_HCA %s:1 and NCCL_IB_GID_INDEX 3", data, ibdev)
	}
	// The pod's own /etc/nccl.conf says the same.
	if conf := k.MustExecInPod(t, ns, "user", "main", "cat", "/etc/nccl.conf"); !strings.Contains(conf, "NCCL_IB_HCA="+ibdev+":1") {
		t.Errorf("nccl.conf in the pod does not match the status:\n%s", conf)
	}

	// An address added to the netdev reaches the status.
	if _, se, err := e2e.Run(k.InNode("ip", "addr", "add", "10.199.0.7/24", "dev", netdev)); err != nil {
		t.Fatalf("ip addr add: %v\n%s", err, se)
	}
	t.Cleanup(func() { _, _, _ = e2e.Run(k.InNode("ip", "addr", "del", "10.199.0.7/24", "dev", netdev)) })
	if ips := waitStatusIPs(t, k, ns, "hca", netdev); !slices.Contains(ips, "10.199.0.7/24") {
		t.Errorf("%s's addresses %v lack the one added, 10.199.0.7/24", netdev, ips)
	}

	// The agent's own token may write this claim's status (allocated on its
	// node), not that of a claim allocated nowhere.
	pod := k.PodNames(t, e2e.AgentNamespace, e2e.AgentSelector)[0]
	token := agentToken(t, k, pod)
	// A server-side apply of the status as the driver's field manager,
	// dry run: what the driver sends, without its result.
	patch := func(claim string) (string, error) {
		obj := fmt.Sprintf(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":%q,"namespace":%q},"status":{}}`, claim, ns)
		out, se, err := e2e.Run(k.KubectlCmd([]byte(obj), "--token="+token, "apply", "--server-side", "--subresource=status",
			"--field-manager="+apis.Group, "--force-conflicts", "--dry-run=server", "-f", "-"))
		return out + se, err
	}
	if out, err := patch("hca"); err != nil {
		t.Errorf("the agent may not write the status of a claim on its node: %v\n%s", err != nil, out)
	}
	k.Apply(t, fmt.Sprintf("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  name: idle\n  namespace: %s\nspec:\n  devices:\n    requests:\n      - name: hca\n        exactly:\n          deviceClassName: roce.rdma.example.com\n", ns))
	if out, err := patch("idle"); err == nil || !strings.Contains(out, "may not write the status of a claim allocated elsewhere") {
		t.Errorf("the agent wrote the status of an unallocated claim (err %v):\n%s", err != nil, out)
	}

	// The pod goes, the claim stays: our entry is cleared.
	k.MustKubectl(t, "delete", "pod", "-n", ns, "user", "--wait=true")
	e2e.WaitDeviceStatus(t, k, ns, "hca", "no entry of ours", func(d *resourceapi.AllocatedDeviceStatus) bool { return d == nil })
}

// netdevAddrs are the addresses on netdev in the node's network namespace,
// as prefixes in netip's form, sorted.
func netdevAddrs(t *testing.T, k *e2e.KubeEnv, netdev string) []string {
	t.Helper()
	out, se, err := e2e.Run(k.InNode("ip", "-j", "addr", "show", "dev", netdev))
	if err != nil {
		t.Fatalf("ip addr show dev %s: %v\n%s", netdev, err, se)
	}
	var links []struct {
		AddrInfo []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		t.Fatalf("ip -j addr show dev %s: %v\n%s", netdev, err, out)
	}
	var addrs []string
	for _, a := range links[0].AddrInfo {
		p, err := netip.ParsePrefix(fmt.Sprintf("%s/%d", a.Local, a.PrefixLen))
		if err != nil {
			t.Fatalf("%s's address %+v: %v", netdev, a, err)
		}
		addrs = append(addrs, p.String())
	}
	slices.Sort(addrs)
	return addrs
}

// waitStatusIPs waits up to 30 s for the networkData of our entry in claim
// ns/name to list exactly netdev's addresses in the node, and returns them.
func waitStatusIPs(t *testing.T, k *e2e.KubeEnv, ns, name, netdev string) []string {
	t.Helper()
	var got, want []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		want = netdevAddrs(t, k, netdev)
		got = nil
		if d, _ := e2e.OurDeviceStatus(t, k, ns, name); d != nil && d.NetworkData != nil {
			for _, ip := range d.NetworkData.IPs {
				p, err := netip.ParsePrefix(ip)
				if err != nil {
					t.Fatalf("status IP %q: %v", ip, err)
				}
				got = append(got, p.String())
			}
		}
		slices.Sort(got)
		if len(want) > 0 && slices.Equal(got, want) {
			return want
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim %s/%s's networkData lists %v; want exactly %s's addresses %v", ns, name, got, netdev, want)
		}
	}
}
