package kube

// The chart on the real API server and kubelet: server-side validation of
// every mode, the per-node policy against the agent's own token, an upgrade
// under a pod holding an HCA, an uninstall that leaves nothing behind, and
// the DRA features the driver detects on this release.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestKubeHelmServerSideValid: every mode's rendering passes the API
// server's own validation and admission (a server-side dry run), which a
// client-side `helm lint` cannot check: CEL selectors, the policy's
// expressions, the DeviceClass fields this release knows.
func TestKubeHelmServerSideValid(t *testing.T) {
	k := e2e.KubeNode(t, e2e.SharedFixtureNode(t, "seed002"), e2e.KubeOptions{})
	k.Apply(t, e2e.NamespaceManifest(e2e.AgentNamespace))
	for _, mode := range e2e.ChartModes {
		manifest, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", mode, nil))
		if err != nil {
			t.Fatal(err)
		}
		out, se, err := e2e.Run(k.KubectlCmd([]byte(manifest), "apply", "--dry-run=server", "-f", "-"))
		if err != nil {
			t.Errorf("mode %s: the API server refuses the chart: %v\n%s%s", mode, err, out, se)
			continue
		}
		objects := 0
		for _, docs := range e2e.RenderedDocs(t, manifest) {
			objects += len(docs)
		}
		if n := strings.Count(out, "(server dry run)"); n != objects {
			t.Errorf("mode %s: %d of %d objects validated:\n%s", mode, n, objects, out)
		}
	}
}

// agentToken is a token of the agent's service account bound to its pod,
// as the kubelet mounts it (with the pod's node in its extra info).
func agentToken(t *testing.T, k *e2e.KubeEnv, pod string) string {
	t.Helper()
	return strings.TrimSpace(k.MustKubectl(t, "create", "token", e2e.AgentRelease, "-n", e2e.AgentNamespace,
		"--bound-object-kind=Pod", "--bound-object-name="+pod, "--duration=10m"))
}

// probeSlice is a ResourceSlice of node for the driver, as YAML.
func probeSlice(node string) string {
	return fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: policy-probe-%s
spec:
  driver: %s
  nodeName: %s
  pool: {name: policy-probe, resourceSliceCount: 1}
  devices: [{name: probe}]
`, node, apis.Group, node)
}

// TestKubeHelmPerNodePolicy: with the chart's ValidatingAdmissionPolicy,
// the agent's own token (bound to its pod, so naming its node) may write
// its node's ResourceSlices and is refused another node's, although RBAC
// allows both; a token naming no node is refused; the admin is not
// affected. Writes are server-side dry runs: admission runs, nothing is
// stored.
func TestKubeHelmPerNodePolicy(t *testing.T) {
	k := e2e.KubeNode(t, e2e.SharedFixtureNode(t, "seed002"), e2e.KubeOptions{})
	pod := k.InstallAgent(t, "dra", nil)
	token := agentToken(t, k, pod)
	create := func(token, node string) (string, error) {
		args := []string{"create", "--dry-run=server", "-f", "-"}
		if token != "" {
			args = append([]string{"--token=" + token}, args...)
		}
		out, se, err := e2e.Run(k.KubectlCmd([]byte(probeSlice(node)), args...))
		return out + se, err
	}
	if out, err := create(token, k.NodeName); err != nil {
		t.Fatalf("the agent may not write its own node's slice: %v\n%s", err, out)
	}
	out, err := create(token, "some-other-node")
	if err == nil || !strings.Contains(out, "the agent on node "+k.NodeName+" may not write a ResourceSlice of node some-other-node") {
		t.Fatalf("the agent wrote another node's slice (err %v):\n%s", err, out)
	}
	unbound := strings.TrimSpace(k.MustKubectl(t, "create", "token", e2e.AgentRelease, "-n", e2e.AgentNamespace, "--duration=10m"))
	if out, err := create(unbound, k.NodeName); err == nil || !strings.Contains(out, "names no node") {
		t.Fatalf("a token bound to no pod wrote a slice (err %v):\n%s", err, out)
	}
	if out, err := create("", "some-other-node"); err != nil {
		t.Fatalf("the policy stops the admin too: %v\n%s", err, out)
	}
	// RBAC alone would have let the agent write it: the policy is what refuses.
	if out := k.MustKubectl(t, "auth", "can-i", "create", "resourceslices.resource.k8s.io",
		"--as=system:serviceaccount:"+e2e.AgentNamespace+":"+e2e.AgentRelease); strings.TrimSpace(out) != "yes" {
		t.Fatalf("auth can-i create resourceslices as the agent: %q", out)
	}
}

// TestKubeHelmSlicePolicyDriver: on its own node, the agent's pod-bound
// token may not create, rewrite or delete a ResourceSlice of another driver
// (the node's GPUs), nor turn another driver's slice into its own: the
// per-node policy checks spec.driver of the stored and the new object. The
// writes are server-side dry runs with the verbs the agent's role grants.
func TestKubeHelmSlicePolicyDriver(t *testing.T) {
	k := e2e.KubeNode(t, e2e.SharedFixtureNode(t, "seed002"), e2e.KubeOptions{})
	pod := k.InstallAgent(t, "dra", nil)
	agent := k.ClientsetAs(t, agentToken(t, k, pod)).ResourceV1().ResourceSlices()
	admin := k.Clientset(t).ResourceV1().ResourceSlices()
	ctx := context.Background()
	dryRun := []string{metav1.DryRunAll}
	slice := func(driver string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "probe-" + strings.ReplaceAll(driver, ".", "-") + "-" + k.NodeName},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &k.NodeName,
				Pool: resourceapi.ResourcePool{Name: "probe", ResourceSliceCount: 1}, Devices: []resourceapi.Device{{Name: "probe"}}},
		}
	}
	refused := "the agent of driver " + apis.Group + " may not write a ResourceSlice of driver gpu.nvidia.com"
	check := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), refused) {
			t.Errorf("%s: %v, want %q", what, err, refused)
		}
	}
	_, err := agent.Create(ctx, slice("gpu.nvidia.com"), metav1.CreateOptions{DryRun: dryRun})
	check("create of another driver's slice on the agent's node", err)

	// A GPU slice that exists (the admin's, as the GPU driver's would be).
	gpu, err := admin.Create(ctx, slice("gpu.nvidia.com"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, gpu.Name, metav1.DeleteOptions{}) })
	relabeled := gpu.DeepCopy()
	relabeled.Labels = map[string]string{"rdma-cdi/probe": "1"}
	_, err = agent.Update(ctx, relabeled, metav1.UpdateOptions{DryRun: dryRun})
	check("update of another driver's slice", err)
	// Turning it into ours is refused before admission on every release:
	// spec.driver is immutable.
	takenOver := gpu.DeepCopy()
	takenOver.Spec.Driver = apis.Group
	if _, err = agent.Update(ctx, takenOver, metav1.UpdateOptions{DryRun: dryRun}); err == nil || !strings.Contains(err.Error(), "spec.driver") {
		t.Errorf("update of another driver's slice to ours: %v", err)
	}
	check("delete of another driver's slice", agent.Delete(ctx, gpu.Name, metav1.DeleteOptions{DryRun: dryRun}))

	if _, err := agent.Create(ctx, slice(apis.Group), metav1.CreateOptions{DryRun: dryRun}); err != nil {
		t.Fatalf("the agent may no longer write its own slice: %v", err)
	}
}

// allocatedClaim is a claim with an HCA of ours and a GPU of another
// driver, allocated (as the scheduler would) with selector, and the GPU
// driver's status entry, as YAML for the admin to apply; status is written
// separately, through the status subresource.
func allocatedClaim(name, node, operator string) (claim, status string) {
	claim = fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: %s, namespace: default}
spec:
  devices:
    requests:
      - {name: hca, exactly: {deviceClassName: hca.%s}}
      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}
`, name, apis.Group)
	status = fmt.Sprintf(`{"status":{
  "allocation":{"devices":{"results":[
      {"request":"hca","driver":%q,"pool":%q,"device":"mlx5-1"},
      {"request":"gpu","driver":"gpu.nvidia.com","pool":%q,"device":"gpu-0"}]},
    "nodeSelector":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":%q,"values":[%q]}]}]}},
  "devices":[%s]}}`, apis.Group, node, node, operator, node, deviceStatus("gpu.nvidia.com", node, "gpu-0", "True"))
	return claim, status
}

// deviceStatus is a claim's status.devices entry, as JSON.
func deviceStatus(driver, pool, device, ready string) string {
	return fmt.Sprintf(`{"driver":%q,"pool":%q,"device":%q,"conditions":[{"type":"Ready","status":%q,"reason":"Prepared","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}`,
		driver, pool, device, ready)
}

// TestKubeHelmClaimStatusPolicy: with its own pod-bound token, the agent
// may write its driver's status entry of a claim allocated to its node, and
// is refused another driver's entry on the same claim (the GPU's), a
// reservedFor change, an allocation's removal, a claim whose selector
// excludes its node (NotIn) instead of naming it, and one whose selector
// names its node or another (two ORed terms); a changed allocation is
// refused by the API on every release (immutable once set). Before 1.37
// the policy refuses each, with its message (the old policy took one
// term naming the node as enough);
// 1.37's API server checks them itself (resourceclaims/driver per driver
// and node, resourceclaims/binding), in its validation, which runs before
// admission: there its refusal is the one seen. So the writes are made
// twice: as installed, and after a careless operator grants the agent's
// account resourceclaims/driver for every driver and node and
// resourceclaims/binding, which pass the API server's own checks and leave
// only the policy to refuse (deleting the policy fails that half on every
// release). The writes are patches of the status subresource, as the
// driver makes them, in server-side dry runs.
func TestKubeHelmClaimStatusPolicy(t *testing.T) {
	k := e2e.KubeNode(t, e2e.SharedFixtureNode(t, "seed002"), e2e.KubeOptions{})
	pod := k.InstallAgent(t, "dra", nil)
	agent := k.ClientsetAs(t, agentToken(t, k, pod)).ResourceV1().ResourceClaims("default")
	setUp := func(name, operator, node string) {
		claim, status := allocatedClaim(name, node, operator)
		k.Apply(t, claim)
		k.MustKubectl(t, "patch", "resourceclaim", name, "-n", "default", "--subresource=status", "--type=merge", "-p", status)
	}
	setUp("policy-here", "In", k.NodeName)
	setUp("policy-notin", "NotIn", "some-other-node")
	// Without other drivers' entries, whose removal with the allocation
	// the policy would refuse first.
	setUp("policy-alone", "In", k.NodeName)
	k.MustKubectl(t, "patch", "resourceclaim", "policy-alone", "-n", "default", "--subresource=status", "--type=merge", "-p", `{"status":{"devices":null}}`)
	// Allocated to this node or another: the terms are ORed.
	claim, status := allocatedClaim("policy-either", k.NodeName, "In")
	k.Apply(t, claim)
	k.MustKubectl(t, "patch", "resourceclaim", "policy-either", "-n", "default", "--subresource=status", "--type=merge", "-p",
		strings.Replace(status, `"nodeSelectorTerms":[`, `"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["some-other-node"]}]},`, 1))
	patch := func(claim, body string) error {
		_, err := agent.Patch(context.Background(), claim, types.MergePatchType, []byte(body),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		return err
	}
	devices := func(entries ...string) string { return `{"status":{"devices":[` + strings.Join(entries, ",") + `]}}` }
	gpu := func(ready string) string { return deviceStatus("gpu.nvidia.com", k.NodeName, "gpu-0", ready) }
	ours := deviceStatus(apis.Group, k.NodeName, "mlx5-1", "True")
	if err := patch("policy-here", devices(gpu("True"), ours)); err != nil {
		t.Fatalf("the agent may not write its own entry of a claim on its node: %v", err)
	}
	othersRefused := "the agent of driver " + apis.Group + " may not write another driver's status.devices entries"
	const (
		apiDriverCheck  = `requires resource="resourceclaims/driver"`
		apiBindingCheck = `requires resource="resourceclaims/binding"`
	)
	elsewhere := "the agent on node " + k.NodeName + " may not write the status of a claim allocated elsewhere"
	// A set allocation is immutable on every release: the API refuses a
	// change first, whatever the role. Its removal (a deallocation) is
	// the policy's to refuse.
	allocationImmutable := "field is immutable"
	if e2e.KubeMinor(t) >= 37 {
		allocationImmutable = "field cannot be modified once set"
	}
	// refusal is the policy's; onAPI137 the API server's own on 1.37
	// while the role is the chart's.
	cases := map[string]struct{ claim, body, refusal, onAPI137 string }{
		"another driver's entry changed": {"policy-here", devices(gpu("False"), ours), othersRefused, apiDriverCheck},
		"another driver's entry removed": {"policy-here", devices(ours), othersRefused, apiDriverCheck},
		"reservedFor": {"policy-here", `{"status":{"reservedFor":[{"resource":"pods","name":"intruder","uid":"00000000-0000-0000-0000-000000000001"}]}}`,
			"the agent may not change a claim's reservedFor", apiBindingCheck},
		"a node selector naming another node too": {"policy-either", devices(gpu("True"), ours), elsewhere, apiDriverCheck},
		"allocation changed": {"policy-here", `{"status":{"allocation":{"devices":{"results":[{"request":"hca","driver":"` + apis.Group + `","pool":"` + k.NodeName + `","device":"mlx5-2"}]}}}}`,
			allocationImmutable, apiBindingCheck},
		"allocation removed": {"policy-alone", `{"status":{"allocation":null}}`, "the agent may not change a claim's allocation", apiBindingCheck},
		"a NotIn selector": {"policy-notin", devices(deviceStatus("gpu.nvidia.com", "some-other-node", "gpu-0", "True"),
			deviceStatus(apis.Group, "some-other-node", "mlx5-1", "True")), elsewhere, apiDriverCheck},
	}
	t.Run("as installed", func(t *testing.T) {
		for what, c := range cases {
			want := c.refusal
			if e2e.KubeMinor(t) >= 37 {
				want = c.onAPI137
			}
			if err := patch(c.claim, c.body); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want %q", what, err, want)
			}
		}
	})
	t.Run("the API server's checks passed", func(t *testing.T) {
		k.Apply(t, overGrantedClaimStatusRole)
		t.Cleanup(func() { k.MustKubectl(t, "delete", "clusterrole", overGrantedRole, "--ignore-not-found") })
		k.MustKubectl(t, "create", "clusterrolebinding", overGrantedRole, "--clusterrole="+overGrantedRole,
			"--serviceaccount="+e2e.AgentNamespace+":"+e2e.AgentRelease)
		t.Cleanup(func() { k.MustKubectl(t, "delete", "clusterrolebinding", overGrantedRole, "--ignore-not-found") })
		// RBAC's cache takes the binding at once, the dry run's
		// authorization at its next read: wait for a case the API
		// server refused before to reach the policy.
		probe := cases["reservedFor"]
		if err := e2e.WaitFor(context.Background(), 30*time.Second, func() error {
			if err := patch(probe.claim, probe.body); err != nil && strings.Contains(err.Error(), apiBindingCheck) {
				return fmt.Errorf("the API server still decides: %v", err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for what, c := range cases {
			if err := patch(c.claim, c.body); err == nil || !strings.Contains(err.Error(), c.refusal) {
				t.Errorf("%s: %v, want the policy's %q", what, err, c.refusal)
			}
		}
		if err := patch("policy-here", devices(gpu("True"), ours)); err != nil {
			t.Errorf("the agent's own entry, with the wider role: %v", err)
		}
	})
}

// overGrantedRole is a careless operator's role for the agent: the
// status of every driver's entries on any node, and claims' bindings,
// which 1.37's API server checks (and earlier releases do not know).
const overGrantedRole = "rdma-cdi-e2e-over-granted"

var overGrantedClaimStatusRole = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ` + overGrantedRole + `}
rules:
  - apiGroups: [resource.k8s.io]
    resources: [resourceclaims/driver]
    verbs: ["associated-node:update", "associated-node:patch", "arbitrary-node:update", "arbitrary-node:patch"]
  - apiGroups: [resource.k8s.io]
    resources: [resourceclaims/binding]
    verbs: [update, patch]
`

// agentPodImage is the release's live pod, its agent container's image, and
// whether it is Ready.
func agentPodImage(t *testing.T, k *e2e.KubeEnv) (pod, image string, ready bool) {
	t.Helper()
	out := k.MustKubectl(t, "get", "pods", "-n", e2e.AgentNamespace, "-l", "app.kubernetes.io/instance="+e2e.AgentRelease, "-o", "json")
	var list struct {
		Items []struct {
			Metadata struct {
				Name              string  `json:"name"`
				DeletionTimestamp *string `json:"deletionTimestamp"`
			} `json:"metadata"`
			Spec struct {
				Containers []struct {
					Image string `json:"image"`
				} `json:"containers"`
			} `json:"spec"`
			Status struct {
				Conditions []struct{ Type, Status string } `json:"conditions"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.Metadata.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			ready = ready || (c.Type == "Ready" && c.Status == "True")
		}
		return p.Metadata.Name, p.Spec.Containers[0].Image, ready
	}
	return "", "", false
}

// TestKubeHelmUpgradeAndUninstall: `helm upgrade` to a new image while a
// pod holds an HCA rolls the agent; the pod keeps running, and the new
// driver takes its claim over (checkTakenOver: the claim's status follows
// an address change, and is cleared when the pod goes); a pod created
// after the upgrade gets an HCA from the new agent. `helm uninstall` then
// leaves no ResourceSlice, spec or socket behind.
func TestKubeHelmUpgradeAndUninstall(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.DRANode(t, node, 9)
	ns := e2e.UniqueID("helm-up-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+exampleTemplates(t, ns)+"---\n"+e2e.StandaloneClaimPod(ns, "held", "roce.rdma.example.com", "before"))
	k.WaitPod(t, ns, "before", "Ready", 2*time.Minute)
	e2e.WaitCheckpoint(t, k, ns+"/held")

	oldPod, oldImage, _ := agentPodImage(t, k)
	newImage := strings.SplitN(oldImage, ":", 2)[0] + ":upgraded"
	k.TagImage(t, oldImage, newImage)
	k.HelmUpgrade(t, e2e.AgentRelease, e2e.AgentNamespace, e2e.AgentValues(newImage, "dra", nil))
	var pod string
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		p, image, ready := agentPodImage(t, k)
		if p != oldPod && image == newImage && ready {
			pod = p
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent never rolled to %s (pod %s, image %s, ready %v)\n%s", newImage, p, image, ready, k.Diagnose(e2e.AgentNamespace, p))
		}
	}
	if p, err := k.GetPod(ns, "before"); err != nil || p.Status.Phase != "Running" || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("the pod holding an HCA after the upgrade: %+v, %v", p, err)
	}
	e2e.CheckTakenOver(t, k, ns, "held", "before", "10.199.2.7/24")
	k.Apply(t, e2e.ClaimPod(ns, "after", "one-hca"))
	k.WaitPod(t, ns, "after", "Ready", 2*time.Minute)
	if got := k.MustExecInPod(t, ns, "after", "main", "ls", "/dev/infiniband"); !strings.Contains(got, "uverbs") {
		t.Fatalf("the pod started after the upgrade has no HCA: %q\n%s", got, k.Logs(e2e.AgentNamespace, pod, "dra"))
	}

	// Pods first: a claim is unprepared by the driver, which must still run.
	k.MustKubectl(t, "delete", "namespace", ns, "--wait=true", "--timeout=2m")
	k.HelmUninstall(t, e2e.AgentRelease, e2e.AgentNamespace)
	leftovers := func() []string {
		var left []string
		if n := len(e2e.SliceDevices(t, k)); n > 0 {
			left = append(left, fmt.Sprintf("a ResourceSlice with %d devices", n))
		}
		for _, p := range []string{"/var/run/cdi/" + apis.Group + "-hca.yaml", "/var/lib/kubelet/plugins_registry/" + apis.Group + "-reg.sock",
			"/var/lib/kubelet/plugins/" + apis.Group + "/dra.sock"} {
			if _, err := os.Lstat(k.NodePath(p)); err == nil {
				left = append(left, p)
			}
		}
		return left
	}
	// The kubelet removes a gone driver's slices 30 s after it unregisters.
	var left []string
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		if left = leftovers(); len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("helm uninstall left %s behind", strings.Join(left, ", "))
		}
	}
}

// TestKubeHelmUninstallDevicePlugin: the device plugin's sockets and the
// spec go with the release.
func TestKubeHelmUninstallDevicePlugin(t *testing.T) {
	k := devicePluginNode(t, e2e.SharedFixtureNode(t, "seed002"), "1000", "8")
	dir := k.NodePath("/var/lib/kubelet/device-plugins")
	sockets := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "rdma-cdi-*.sock"))
		return m
	}
	if len(sockets()) != 2 {
		t.Fatalf("device plugin sockets before the uninstall: %v", sockets())
	}
	k.HelmUninstall(t, e2e.AgentRelease, e2e.AgentNamespace)
	if s := sockets(); len(s) != 0 {
		t.Errorf("sockets left: %v", s)
	}
	if _, err := os.Stat(k.NodePath("/var/run/cdi/rdma.example.com-hca.yaml")); err == nil {
		t.Error("spec left in /var/run/cdi")
	}
}

// TestKubeDRAFeaturesDetected: on a cluster with each release's default
// feature gates, the driver reports what the API server keeps (1.35: device
// taints, consumable capacity and the extended-resource mapping all off;
// 1.36+: on), which matches what the server did to the chart's DeviceClass,
// and it still serves claims either way.
func TestKubeDRAFeaturesDetected(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{Images: []string{e2e.Glibc.DockerArchive(t)}})
	pod := k.InstallAgent(t, "dra", nil)
	on := e2e.KubeMinor(t) >= 36
	wantFeatures := "API server DRA features: device taints off, consumable capacity off"
	wantExtended := "extended resource rdma/hca is not served: none of this driver's DeviceClasses (hca.rdma.example.com, roce.rdma.example.com, shared-pool.rdma.example.com, shared.rdma.example.com) kept extendedResourceName rdma/hca"
	if on {
		wantFeatures = "API server DRA features: device taints on, consumable capacity on"
		wantExtended = "extended resource rdma/hca is served from DeviceClass hca.rdma.example.com"
	}
	var log string
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		log = k.Logs(e2e.AgentNamespace, pod, "dra")
		if strings.Contains(log, wantFeatures) && strings.Contains(log, wantExtended) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Kubernetes %s: the driver's log lacks %q or %q:\n%s", e2e.KubeVersion(), wantFeatures, wantExtended, log)
		}
	}
	var class resourceapi.DeviceClass
	if err := json.Unmarshal([]byte(k.MustKubectl(t, "get", "deviceclass", "hca.rdma.example.com", "-o", "json")), &class); err != nil {
		t.Fatal(err)
	}
	if kept := class.Spec.ExtendedResourceName != nil; kept != on {
		t.Errorf("Kubernetes %s kept extendedResourceName: %v; the driver said %q", e2e.KubeVersion(), kept, wantExtended)
	}
	e2e.WaitSlice(t, k, func(d []resourceapi.Device) bool { return len(d) == 9 }, "9 devices", func() string { return log })
	ns := e2e.UniqueID("dra-feat-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+exampleTemplates(t, ns)+"---\n"+e2e.ClaimPod(ns, "claim", "one-hca"))
	k.WaitPod(t, ns, "claim", "Ready", 2*time.Minute)
}
