package kube

// `rdma-cdi-dra dra-driver` on a real control plane with DRAExtendedResource:
// the chart installed in mode dra (its DaemonSet, RBAC and DeviceClasses),
// claims from dra-claims-example.yaml, and checks in the API (the node's
// ResourceSlice) and inside the running containers.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// draNode starts (or reuses) a node on the fixture with the chart in mode
// dra, and waits until its slice lists want devices.
func draNode(t testing.TB, node *e2e.FixtureNode, want int) *e2e.KubeEnv {
	t.Helper()
	k := e2e.KubeNode(t, node, e2e.KubeOptions{
		FeatureGates: map[string]bool{"DRAExtendedResource": true},
		Images:       []string{e2e.Glibc.DockerArchive(t)},
	})
	pod := k.InstallAgent(t, "dra", nil)
	waitSlice(t, k, func(s []resourceapi.Device) bool { return len(s) == want }, fmt.Sprintf("%d devices", want),
		func() string { return k.Logs(e2e.AgentNamespace, pod, "dra") })
	return k
}

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

// sliceDevices returns the devices of the driver's ResourceSlices.
func sliceDevices(t testing.TB, k *e2e.KubeEnv) []resourceapi.Device {
	t.Helper()
	out := k.MustKubectl(t, "get", "resourceslices", "-o", "json")
	var list resourceapi.ResourceSliceList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("resourceslices: %v\n%s", err, out)
	}
	var devs []resourceapi.Device
	for _, s := range list.Items {
		if s.Spec.Driver == apis.Group {
			devs = append(devs, s.Spec.Devices...)
		}
	}
	return devs
}

func waitSlice(t testing.TB, k *e2e.KubeEnv, ok func([]resourceapi.Device) bool, what string, diagnose func() string) []resourceapi.Device {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		devs := sliceDevices(t, k)
		if ok(devs) {
			return devs
		}
		if time.Now().After(deadline) {
			t.Fatalf("ResourceSlice never had %s: %s\n%s", what, describeDevices(devs), diagnose())
		}
		time.Sleep(time.Second)
	}
}

// attr is a device attribute as a plain value (string, int64 or bool).
func attr(d resourceapi.Device, name string) any {
	a, ok := d.Attributes[resourceapi.QualifiedName(name)]
	switch {
	case !ok:
		return nil
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return *a.IntValue
	case a.BoolValue != nil:
		return *a.BoolValue
	}
	return nil
}

func describeDevices(devs []resourceapi.Device) string {
	var b bytes.Buffer
	for _, d := range devs {
		fmt.Fprintf(&b, "\n  %s:", d.Name)
		for _, n := range slices.Sorted(func(yield func(string) bool) {
			for k := range d.Attributes {
				if !yield(string(k)) {
					return
				}
			}
		}) {
			fmt.Fprintf(&b, " %s=%v", n, attr(d, n))
		}
	}
	return b.String()
}

func deviceByName(devs []resourceapi.Device, name string) (resourceapi.Device, bool) {
	i := slices.IndexFunc(devs, func(d resourceapi.Device) bool { return d.Name == name })
	if i < 0 {
		return resourceapi.Device{}, false
	}
	return devs[i], true
}

// checkAttrs compares the listed attributes of each named device.
func checkAttrs(t *testing.T, devs []resourceapi.Device, want map[string]map[string]any) {
	t.Helper()
	for name, attrs := range want {
		d, ok := deviceByName(devs, name)
		if !ok {
			t.Errorf("no device %s in the slice:%s", name, describeDevices(devs))
			continue
		}
		for a, v := range attrs {
			if got := attr(d, a); got != v {
				t.Errorf("%s %s = %v (%T), want %v (%T)", name, a, got, got, v, v)
			}
		}
	}
}

// claimTemplate is a ResourceClaimTemplate ns/name asking one device of
// the DeviceClass class.rdma.example.com, selected by the CEL expression
// cel ("" for none), with more lines of the request (each starting with a
// newline and indented under exactly: capacity, tolerations).
func claimTemplate(ns, name, class, cel, more string) string {
	if cel != "" {
		cel = "\n            selectors:\n              - cel:\n                  expression: " + cel
	}
	return fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: %s
  namespace: %s
spec:
  spec:
    devices:
      requests:
        - name: hca
          exactly:
            deviceClassName: %s.rdma.example.com%s%s
`, name, ns, class, cel, more)
}

// claimPod is a glibc pod whose container uses a claim from template.
func claimPod(ns, name, template string) string {
	return glibcPodManifest(ns, name,
		"\n  resourceClaims:\n    - name: rdma\n      resourceClaimTemplateName: "+template,
		"\n      resources:\n        claims:\n          - name: rdma")
}

// TestKubeDRASeed002: the slice of seed 002's node, the seed's own pod spec
// (rdma/hca: 1, served by the hca class's extended resource), a claim the
// node cannot satisfy, a port going down, and a device passed on after its
// pod is deleted.
func TestKubeDRASeed002(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := draNode(t, node, 9)
	devs := sliceDevices(t, k)
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
	checkAttrs(t, devs, want)
	for _, d := range devs {
		if root, _ := attr(d, "resource.kubernetes.io/pcieRoot").(string); !strings.HasPrefix(root, "pci0000:") {
			t.Errorf("%s pcieRoot %q", d.Name, root)
		}
	}

	ns := e2e.UniqueID("dra-seed-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+exampleTemplates(t, ns))
	// The seed's pod spec, unchanged: rdma/hca: 1 and IPC_LOCK.
	k.Apply(t, rdmaPodManifest(ns, "trainer", map[string]int{sharedResource: 1}, true))
	k.WaitPod(t, ns, "trainer", "Ready", 2*time.Minute)
	out := probePod(t, k, ns, "trainer")
	got := ncclHCA.FindStringSubmatch(e2e.Section(out, "nccl.conf"))
	if got == nil || strings.Count(got[1], ":1") != 1 || strings.Contains(got[1], "mlx5_0") {
		t.Fatalf("rdma/hca: 1 under DRA: want one HCA other than mlx5_0 in nccl.conf:\n%s", out)
	}
	hca := strings.TrimSuffix(strings.TrimPrefix(got[1], "="), ":1")
	checkRDMAPod(t, node, out, []string{hca}, "3")
	memlockRaised(t, out)

	// A claim only the management NIC would satisfy (roce, under 50 Gb/s):
	// Pending with the scheduler's reason, nothing prepared.
	k.Apply(t, claimTemplate(ns, "slow-roce", "roce", `device.attributes["rdma.example.com"].rate < 50`, "")+
		"---\n"+claimPod(ns, "unsatisfiable", "slow-roce"))
	waitUnschedulable(t, k, ns, "unsatisfiable", "cannot allocate all claims")

	// The trainer's pod goes: its claim is unprepared and the device free.
	// mlx5_8's port goes down: the slice says so within seconds. The
	// whole-pool claim (allocationMode All: every RoCE HCA but mlx5_0, each
	// free) then gets mlx5_1..mlx5_7, the trainer's HCA included, not mlx5_8.
	k.MustKubectl(t, "delete", "pod", "-n", ns, "trainer", "--wait=true")
	setFixturePort(t, k, node, "mlx5_8", "eth8", false)
	t.Cleanup(func() { setFixturePort(t, k, node, "mlx5_8", "eth8", true) })
	waitUnhealthy(t, k, "mlx5-8", health.CodeNoActivePort)
	k.Apply(t, claimPod(ns, "pool", "all-roce"))
	k.WaitPod(t, ns, "pool", "Ready", 2*time.Minute)
	checkRDMAPod(t, node, probePod(t, k, ns, "pool"), []string{"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"}, "3")
}

// TestKubeDRAGIDNotThree: on a node where NCCL's GID index is 5 on mlx5_1,
// the slice says so per device (mlx4_0's attributes are its first port's,
// index 3; its port 2 would be 5), and a CEL selector on rate
// picks the one fast RoCE HCA, which the container gets alone.
func TestKubeDRAGIDNotThree(t *testing.T) {
	node := e2e.NewFixtureNode(t, "gid-not-3")
	k := draNode(t, node, 3)
	checkAttrs(t, sliceDevices(t, k), map[string]map[string]any{
		"mlx4-0": {"ibdev": "mlx4_0", "ports": int64(2), "rate": int64(40), "ncclGidIndex": int64(3), "numaNode": int64(1),
			"firmware": "2.42.5000", "pciDevice": "0x1007", "defaultRoute": false},
		"mlx5-1": {"ibdev": "mlx5_1", "netdev": "eth1", "rate": int64(200), "ncclGidIndex": int64(5), "defaultRoute": false},
		"mlx5-0": {"ibdev": "mlx5_0", "netdev": "eth0", "ncclGidIndex": int64(3), "defaultRoute": true},
	})
	ns := e2e.UniqueID("dra-gid-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+exampleTemplates(t, ns)+"---\n"+claimPod(ns, "fast", "fast-roce"))
	k.WaitPod(t, ns, "fast", "Ready", 2*time.Minute)
	checkRDMAPod(t, node, probePod(t, k, ns, "fast"), []string{"mlx5_1"}, "5")
}

// TestKubeDRAPCIeRoot: on the two-socket node only mlx5_2 and mlx5_3 share
// a PCIe root; the example claim for two HCAs on one root gets exactly them.
func TestKubeDRAPCIeRoot(t *testing.T) {
	node := e2e.NewFixtureNode(t, "two-socket")
	k := draNode(t, node, 5)
	devs := sliceDevices(t, k)
	roots := map[string]any{}
	for _, d := range devs {
		roots[d.Name] = attr(d, "resource.kubernetes.io/pcieRoot")
	}
	if roots["mlx5-2"] != roots["mlx5-3"] || roots["mlx5-2"] == roots["mlx5-4"] || roots["mlx5-1"] == roots["mlx5-2"] {
		t.Fatalf("pcieRoot attributes %v: want only mlx5-2 and mlx5-3 to share one", roots)
	}
	ns := e2e.UniqueID("dra-root-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+exampleTemplates(t, ns)+"---\n"+claimPod(ns, "pair", "two-hcas-one-pcie-root"))
	k.WaitPod(t, ns, "pair", "Ready", 2*time.Minute)
	checkRDMAPod(t, node, probePod(t, k, ns, "pair"), []string{"mlx5_2", "mlx5_3"}, "3")
}

// setFixturePort brings an HCA's port and its netdev down or up on the
// node, as the kernel would report a link loss.
// taintsOn: this release keeps device taints with its default gates (the
// driver probes it; TestKubeDRAFeaturesDetected checks the probe).
func taintsOn(t testing.TB) bool { return kubeMinor(t) >= 36 }

// unhealthyTaint is device's unhealthy taint's "VALUE:EFFECT", or "".
func unhealthyTaint(d resourceapi.Device) string {
	return taintOf(d, apis.UnhealthyTaintKey(apis.Group))
}

// taintOf is device's taint of key as "VALUE:EFFECT", or "".
func taintOf(d resourceapi.Device, key string) string {
	for _, taint := range d.Taints {
		if taint.Key == key {
			return taint.Value + ":" + string(taint.Effect)
		}
	}
	return ""
}

// waitUnhealthy waits until the slice shows device unhealthy with code:
// tainted where the release keeps taints, left out where it does not.
func waitUnhealthy(t testing.TB, k *e2e.KubeEnv, device, code string) {
	t.Helper()
	waitSlice(t, k, func(d []resourceapi.Device) bool {
		dev, ok := deviceByName(d, device)
		if !taintsOn(t) {
			return !ok
		}
		return ok && unhealthyTaint(dev) == code+":NoSchedule"
	}, device+" unhealthy ("+code+")", func() string { return agentLogTail(t, k) })
}

// agentLogTail is the end of the logs of the agents' pods, for a failure.
func agentLogTail(t testing.TB, k *e2e.KubeEnv) string {
	var b strings.Builder
	for _, pod := range k.PodNames(t, e2e.AgentNamespace, "") {
		for _, mode := range []string{"dra", "device-plugin", "cdi"} {
			if _, err := k.CRIContainer(e2e.AgentNamespace, pod, mode); err == nil {
				log := k.Logs(e2e.AgentNamespace, pod, mode)
				fmt.Fprintf(&b, "--- agent %s (%s):\n%s\n", pod, mode, log[max(0, len(log)-3000):])
			}
		}
	}
	return b.String()
}

// waitHealthy waits until the slice lists device without a taint.
func waitHealthy(t testing.TB, k *e2e.KubeEnv, device string) {
	t.Helper()
	waitSlice(t, k, func(d []resourceapi.Device) bool {
		dev, ok := deviceByName(d, device)
		return ok && unhealthyTaint(dev) == ""
	}, device+" healthy", func() string { return "" })
}

func setFixturePort(t *testing.T, k *e2e.KubeEnv, node *e2e.FixtureNode, ibdev, netdev string, up bool) {
	t.Helper()
	state, link := "1: DOWN", "down"
	if up {
		state, link = "4: ACTIVE", "up"
	}
	if err := os.WriteFile(node.Sys+"/class/infiniband/"+ibdev+"/ports/1/state", []byte(state+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, se, err := e2e.Run(k.InNode("ip", "link", "set", netdev, link)); err != nil {
		t.Fatalf("ip link set %s %s: %v\n%s", netdev, link, err, se)
	}
}
