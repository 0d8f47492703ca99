package dradriver

import (
	"context"
	"encoding/json"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// ipamDriver is a started driver on testNode with addresses on eth0 and
// eth1, pod networking on, and eth1's subnet given by the real host-local
// IPAM plugin (10.1.0.100 and .101), whose store is returned.
func ipamDriver(t *testing.T, dir string) (*Driver, config.Config, string) {
	t.Helper()
	store := filepath.Join(dir, "host-local")
	conf, err := json.Marshal(map[string]any{"type": "host-local", "dataDir": store,
		"ranges": [][]map[string]string{{{"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.100", "rangeEnd": "10.1.0.101"}}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.PodNetwork.Enabled = true
	cfg.PodNetwork.IPAM = []config.PodNetworkIPAM{{Subnet: "10.1.0.0/24", Config: string(conf)}}
	cfg.PodNetwork.CNIBinDirs = []string{fixture.CNIPluginDir(t)}
	node := testNode()
	node.NetDevs = []model.NetDev{
		{Name: "eth0", Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24")}},
		{Name: "eth1", Addrs: []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24")}},
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	d := newDriver(t, Options{Name: testDriver, NodeName: "node-a", Log: log})
	d.Update(node, cfg)
	d.mu.Lock()
	d.restore(dir)
	d.mu.Unlock()
	return d, cfg, filepath.Join(store, "rdma-cdi")
}

func reservedClaim(uid, pod string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	c := claim(uid, results...)
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p-" + pod, UID: types.UID(pod)}}
	return c
}

func unprepareOne(t *testing.T, d *Driver, c *resourceapi.ResourceClaim) error {
	t.Helper()
	out, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: c.UID}})
	if err != nil {
		t.Fatal(err)
	}
	return out[c.UID]
}

// TestPrepareDelegatesAddressesToACNIIPAMPlugin: a claim whose HCA's
// netdev is in a pod_network.ipam subnet gets its pod's address from the
// plugin at prepare (host-local, the real binary), keeps it across a new
// process, and frees it at unprepare; a claim that fails to prepare frees
// what it got; a failed DEL keeps the claim prepared for the kubelet's
// retry.
func TestPrepareDelegatesAddressesToACNIIPAMPlugin(t *testing.T) {
	dir := t.TempDir()
	d, cfg, store := ipamDriver(t, dir)
	holds := func(addr string) bool {
		_, err := os.Stat(filepath.Join(store, addr))
		return err == nil
	}

	a := reservedClaim("a", "pod-a", result("r", testDriver, "mlx5-1"))
	if r := prepareOne(t, d, a); r.Err != nil {
		t.Fatal(r.Err)
	}
	got := d.prepared["a"].Addresses
	if len(got) != 1 || got[0].Addr != netip.MustParsePrefix("10.1.0.100/24") || got[0].NetDev != "eth1" || got[0].Pod != "pod-a" || !holds("10.1.0.100") {
		t.Fatalf("claim a's addresses %+v (plugin holds .100: %v)", got, holds("10.1.0.100"))
	}
	plans, err := d.PlanPod("pod-a", &podnetwork.Pool{})
	if err != nil || len(plans) != 1 || len(plans[0].Addrs) != 1 || plans[0].Addrs[0] != got[0].Addr {
		t.Fatalf("pod-a's plan %+v, %v: want eth1 with %v", plans, err, got[0].Addr)
	}
	if plans, err := d.PlanPod("pod-x", &podnetwork.Pool{}); err != nil || len(plans) != 0 {
		t.Fatalf("a pod without claims: %+v, %v", plans, err)
	}

	// mlx5-1 is a's: b's prepare fails, and the plugin holds nothing for it.
	b := reservedClaim("b", "pod-b", result("r", testDriver, "mlx5-1"))
	if r := prepareOne(t, d, b); r.Err == nil || !strings.Contains(r.Err.Error(), "prepared for claim a") {
		t.Fatalf("claim b on a's HCA: %v", r.Err)
	}
	if holds("10.1.0.101") {
		t.Error("the plugin still holds .101 for the claim that failed")
	}
	// eth0 is in no plugin's subnet.
	c := reservedClaim("c", "pod-c", result("r", testDriver, "mlx5-0"))
	if r := prepareOne(t, d, c); r.Err != nil || len(d.prepared["c"].Addresses) != 0 {
		t.Fatalf("claim c on eth0: %v, %+v", r.Err, d.prepared["c"].Addresses)
	}
	// Prepared again (the kubelet's retry): the same address, no new ADD.
	if r := prepareOne(t, d, a); r.Err != nil || len(d.prepared["a"].Addresses) != 1 || holds("10.1.0.101") {
		t.Fatalf("a prepared again: %v, %+v", r.Err, d.prepared["a"].Addresses)
	}

	d, _, _ = ipamDriver(t, dir) // a new process
	if got := d.prepared["a"].Addresses; len(got) != 1 || got[0].Addr != netip.MustParsePrefix("10.1.0.100/24") {
		t.Fatalf("taken over: %+v", got)
	}
	broken := cfg
	broken.PodNetwork.CNIBinDirs = []string{t.TempDir()}
	d.Update(d.node, broken)
	if err := unprepareOne(t, d, a); err == nil || !strings.Contains(err.Error(), "freeing 10.1.0.100/24 of mlx5-1") {
		t.Fatalf("unprepare without the plugin: %v", err)
	}
	if _, ok := d.prepared["a"]; !ok || !holds("10.1.0.100") {
		t.Fatal("a failed DEL let the claim go")
	}
	d.Update(d.node, cfg)
	if err := unprepareOne(t, d, a); err != nil || holds("10.1.0.100") {
		t.Fatalf("unprepare: %v; plugin still holds .100: %v", err, holds("10.1.0.100"))
	}
	if _, ok := d.prepared["a"]; ok {
		t.Fatal("a is still prepared")
	}
}
