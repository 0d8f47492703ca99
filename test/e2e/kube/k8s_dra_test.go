package kube

// `rdma-cdi-dra dra-driver` on a real control plane with DRAExtendedResource:
// the chart installed in mode dra (its DaemonSet, RBAC and DeviceClasses),
// claims from dra-claims-example.yaml, and checks in the API (the node's
// ResourceSlice) and inside the running containers.

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// exampleTemplates are the ResourceClaimTemplates of the shipped example
// claims, for namespace ns.
func exampleTemplates(t testing.TB, ns string) string {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(e2e.ShippedManifest(t, "deploy/kubernetes/dra-claims-example.yaml")))
	var out []string
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			break
		}
		if doc["kind"] != "ResourceClaimTemplate" {
			continue
		}
		doc["metadata"].(map[string]any)["namespace"] = ns
		b, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	if len(out) < 6 {
		t.Fatalf("dra-claims-example.yaml has %d templates", len(out))
	}
	return strings.Join(out, "---\n")
}

// checkAttrs compares the listed attributes of each named device.
func checkAttrs(t *testing.T, devs []resourceapi.Device, want map[string]map[string]any) {
	t.Helper()
	for name, attrs := range want {
		d, ok := e2e.DeviceByName(devs, name)
		if !ok {
			t.Errorf("no device %s in the slice:%s", name, e2e.DescribeDevices(devs))
			continue
		}
		for a, v := range attrs {
			if got := e2e.Attr(d, a); got != v {
				t.Errorf("%s %s = %v (%T), want %v (%T)", name, a, got, got, v, v)
			}
		}
	}
}

// TestKubeDRASeed002: the slice of seed 002's node, the seed's own pod spec
// (rdma/hca: 1, served by the hca class's extended resource), a claim the
// node cannot satisfy, a port going down, and a device passed on after its
// pod is deleted.
func TestKubeDRASeed002(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.DRANode(t, node, 9)
	devs := e2e.SliceDevices(t, k)
	roceAttrs := func(ibdev, netdev string, numa int64, pci string) map[string]any {
		return map[string]any{
			"ibdev": ibdev, "netdev": netdev, "linkLayer": "Ethernet", "portState": "ACTIVE", "rate": int64(100),
			"numaNode": numa, "pciAddress": pci, "pciVendor": "0x15b3", "ncclGidIndex": int64(3), "defaultRoute": false,
		}
	}
	want := map[string]map[string]any{
		"mlx5-0": {"ibdev": "mlx5_0", "netdev": "eth0", "rate": int64(25), "defaultRoute": true, "pciDevice": "0x1017",
			"firmware": "16.35.2000", "ncclGidIndex": int64(3), "pciAddress": "0000:16:00.0"},
		"mlx5-1": roceAttrs("mlx5_1", "eth1", 0, "0000:54:00.0"),
	}
	want["mlx5-1"]["firmware"] = "22.35.2000"
	// Each RoCE HCA in a /27 of its own (seed 002's rails): the subnet is
	// its rail; the management NIC, on the default route, has none.
	want["mlx5-1"]["rail"] = "25.11.128.0/27"
	want["mlx5-4"] = map[string]any{"ibdev": "mlx5_4", "rail": "25.11.128.96/27"}
	checkAttrs(t, devs, want)
	for _, d := range devs {
		if root, _ := e2e.Attr(d, "resource.kubernetes.io/pcieRoot").(string); !strings.HasPrefix(root, "pci0000:") {
			t.Errorf("%s pcieRoot %q", d.Name, root)
		}
		if rail := e2e.Attr(d, "rail"); (rail == nil) != (d.Name == "mlx5-0") {
			t.Errorf("%s rail %v: want one on every RoCE HCA but the management NIC's", d.Name, rail)
		}
	}

	ns := e2e.UniqueID("dra-seed-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+exampleTemplates(t, ns))
	// A claim for the HCA on one rail gets it.
	k.Apply(t, e2e.ClaimTemplate(ns, "rail-96", "roce", `'device.attributes["rdma.example.com"].rail == "25.11.128.96/27"'`, "")+
		"---\n"+e2e.ClaimPod(ns, "on-rail", "rail-96"))
	k.WaitPod(t, ns, "on-rail", "Ready", 2*time.Minute)
	e2e.CheckRDMAPod(t, node, e2e.ProbePod(t, k, ns, "on-rail"), []string{"mlx5_4"}, "3")
	k.MustKubectl(t, "delete", "pod", "-n", ns, "on-rail", "--wait=true")
	// The seed's pod spec, unchanged: rdma/hca: 1 and IPC_LOCK.
	k.Apply(t, rdmaPodManifest(ns, "trainer", map[string]int{e2e.SharedResource: 1}, true))
	k.WaitPod(t, ns, "trainer", "Ready", 2*time.Minute)
	out := e2e.ProbePod(t, k, ns, "trainer")
	got := e2e.NCCLHCA.FindStringSubmatch(e2e.Section(out, "nccl.conf"))
	if got == nil || strings.Count(got[1], ":1") != 1 || strings.Contains(got[1], "mlx5_0") {
		t.Fatalf("rdma/hca: 1 under DRA: want one HCA other than mlx5_0 in nccl.conf:\n%s", out)
	}
	hca := strings.TrimSuffix(strings.TrimPrefix(got[1], "="), ":1")
	e2e.CheckRDMAPod(t, node, out, []string{hca}, "3")
	memlockRaised(t, out)

	// A claim only the management NIC would satisfy (roce, under 50 Gb/s):
	// Pending with the scheduler's reason, nothing prepared.
	k.Apply(t, e2e.ClaimTemplate(ns, "slow-roce", "roce", `device.attributes["rdma.example.com"].rate < 50`, "")+
		"---\n"+e2e.ClaimPod(ns, "unsatisfiable", "slow-roce"))
	waitUnschedulable(t, k, ns, "unsatisfiable", "cannot allocate all claims")

	// The trainer's pod goes: its claim is unprepared and the device free.
	// mlx5_8's port goes down: the slice says so within seconds. The
	// whole-pool claim (allocationMode All: every RoCE HCA but mlx5_0, each
	// free) then gets mlx5_1..mlx5_7, the trainer's HCA included, not mlx5_8.
	k.MustKubectl(t, "delete", "pod", "-n", ns, "trainer", "--wait=true")
	e2e.SetFixturePort(t, k, node, "mlx5_8", "eth8", false)
	t.Cleanup(func() { e2e.SetFixturePort(t, k, node, "mlx5_8", "eth8", true) })
	e2e.WaitUnhealthy(t, k, "mlx5-8", health.CodeNoActivePort)
	k.Apply(t, e2e.ClaimPod(ns, "pool", "all-roce"))
	k.WaitPod(t, ns, "pool", "Ready", 2*time.Minute)
	pool := e2e.ProbePod(t, k, ns, "pool")
	e2e.CheckRDMAPod(t, node, pool, []string{"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"}, "3")
	// Seven HCAs in seven /27s: NCCL routes by subnet (2.30's
	// subnet-aware routing), whose default /24 would join them all.
	if conf := e2e.Section(pool, "nccl.conf"); !strings.Contains(conf, "NCCL_IB_SUBNET_AWARE_ROUTING=1\n") || !strings.Contains(conf, "NCCL_IB_SUBNET_PREFIX_LEN=27\n") {
		t.Errorf("a pod with HCAs on seven rails: nccl.conf without subnet-aware routing over /27s:\n%s", conf)
	}
	if conf := e2e.Section(out, "nccl.conf"); strings.Contains(conf, "NCCL_IB_SUBNET_AWARE_ROUTING") {
		t.Errorf("a pod with one HCA: nccl.conf asks for subnet-aware routing:\n%s", conf)
	}
}

// TestKubeDRAGIDNotThree: on a node where NCCL's GID index is 5 on mlx5_1,
// the slice says so per device (mlx4_0's attributes are its first port's,
// index 3; its port 2 would be 5), and a CEL selector on rate
// picks the one fast RoCE HCA, which the container gets alone.
func TestKubeDRAGIDNotThree(t *testing.T) {
	node := e2e.NewFixtureNode(t, "gid-not-3")
	k := e2e.DRANode(t, node, 3)
	checkAttrs(t, e2e.SliceDevices(t, k), map[string]map[string]any{
		"mlx4-0": {"ibdev": "mlx4_0", "ports": int64(2), "rate": int64(40), "ncclGidIndex": int64(3), "numaNode": int64(1),
			"firmware": "2.42.5000", "pciDevice": "0x1007", "defaultRoute": false},
		"mlx5-1": {"ibdev": "mlx5_1", "netdev": "eth1", "rate": int64(200), "ncclGidIndex": int64(5), "defaultRoute": false},
		"mlx5-0": {"ibdev": "mlx5_0", "netdev": "eth0", "ncclGidIndex": int64(3), "defaultRoute": true},
	})
	ns := e2e.UniqueID("dra-gid-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+exampleTemplates(t, ns)+"---\n"+e2e.ClaimPod(ns, "fast", "fast-roce"))
	k.WaitPod(t, ns, "fast", "Ready", 2*time.Minute)
	e2e.CheckRDMAPod(t, node, e2e.ProbePod(t, k, ns, "fast"), []string{"mlx5_1"}, "5")
}

// TestKubeDRAPCIeRoot: on the two-socket node only mlx5_2 and mlx5_3 share
// a PCIe root; the example claim for two HCAs on one root gets exactly them.
func TestKubeDRAPCIeRoot(t *testing.T) {
	node := e2e.NewFixtureNode(t, "two-socket")
	k := e2e.DRANode(t, node, 5)
	devs := e2e.SliceDevices(t, k)
	roots := map[string]any{}
	for _, d := range devs {
		roots[d.Name] = e2e.Attr(d, "resource.kubernetes.io/pcieRoot")
	}
	if roots["mlx5-2"] != roots["mlx5-3"] || roots["mlx5-2"] == roots["mlx5-4"] || roots["mlx5-1"] == roots["mlx5-2"] {
		t.Fatalf("pcieRoot attributes %v: want only mlx5-2 and mlx5-3 to share one", roots)
	}
	ns := e2e.UniqueID("dra-root-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+exampleTemplates(t, ns)+"---\n"+e2e.ClaimPod(ns, "pair", "two-hcas-one-pcie-root"))
	k.WaitPod(t, ns, "pair", "Ready", 2*time.Minute)
	e2e.CheckRDMAPod(t, node, e2e.ProbePod(t, k, ns, "pair"), []string{"mlx5_2", "mlx5_3"}, "3")
}
