package kube

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

const gpuDriver = "gpu.nvidia.com"

// standInGPU is a GPU the stand-in GPU driver publishes.
type standInGPU struct {
	Name, PCIeRoot, BusID string
	NUMANode              int
}

// startGPUStandIn runs test/cmd/gpudra, a stand-in for NVIDIA's GPU DRA
// driver, on the node with gpus (index i is gpus[i]) and the DeviceClass
// gpu.nvidia.com, as NVIDIA's chart creates it; both go when the test
// ends, the driver's ResourceSlice with them.
func startGPUStandIn(t *testing.T, k *e2e.KubeEnv, gpus []standInGPU) {
	t.Helper()
	argv := []string{e2e.Binary(t, "gpudra"), "-kubeconfig", k.Kubeconfig, "-node", k.NodeName}
	for _, g := range gpus {
		argv = append(argv, "-gpu", fmt.Sprintf("%s=%s,%d,%s", g.Name, g.PCIeRoot, g.NUMANode, g.BusID))
	}
	k.Apply(t, `apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: `+gpuDriver+`
spec:
  selectors:
    - cel:
        expression: device.driver == "`+gpuDriver+`"
`)
	k.StartDaemon(t, "gpudra", argv...)
	t.Cleanup(func() {
		k.MustKubectl(t, "delete", "deviceclass", gpuDriver, "--ignore-not-found")
		k.MustKubectl(t, "delete", "resourceslices", "--field-selector", "spec.driver="+gpuDriver, "--ignore-not-found")
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		out, _, _ := k.Kubectl("get", "resourceslices", "--field-selector", "spec.driver="+gpuDriver, "-o", "jsonpath={.items[*].spec.devices[*].name}")
		if len(strings.Fields(out)) == len(gpus) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stand-in GPU driver published %q, want %d GPUs; its log:\n%s", out, len(gpus), e2e.TailFile(k.Proc("gpudra").Log, 3000))
		}
		time.Sleep(time.Second)
	}
}

// pinnedGPUTemplate is a claim template for GPU index gpu (by CEL) and an
// HCA of the hca class, the pair constrained to match attribute.
func pinnedGPUTemplate(ns, name string, gpu int, attribute string) string {
	return fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: %s
  namespace: %s
spec:
  spec:
    devices:
      requests:
        - name: gpu
          exactly:
            deviceClassName: %s
            selectors:
              - cel:
                  expression: device.attributes["%s"].index == %d
        - name: hca
          exactly:
            deviceClassName: hca.rdma.example.com
      constraints:
        - requests: ["gpu", "hca"]
          matchAttribute: %s
`, name, ns, gpuDriver, gpuDriver, gpu, attribute)
}

var standInGPUEnv = regexp.MustCompile(`(?m)^STANDIN_GPU_\d+=(\S+) (\S+)$`)

// gpuAndHCA returns the GPU (name and PCIe root, from the stand-in's CDI
// device's environment) and the HCA (from the nccl.conf our hook wrote)
// that pod's container got, checking it got one of each and exactly that
// HCA's device nodes.
func gpuAndHCA(t *testing.T, k *e2e.KubeEnv, node *e2e.FixtureNode, ns, pod string) (gpu, gpuRoot, hca string) {
	t.Helper()
	env := k.MustExecInPod(t, ns, pod, "main", "env")
	gpus := standInGPUEnv.FindAllStringSubmatch(env, -1)
	if len(gpus) != 1 {
		t.Fatalf("pod %s: want one stand-in GPU in its environment, got %v", pod, gpus)
	}
	out := e2e.ProbePod(t, k, ns, pod)
	m := e2e.NCCLHCA.FindStringSubmatch(e2e.Section(out, "nccl.conf"))
	if m == nil || strings.Contains(m[1], ",") {
		t.Fatalf("pod %s: want one HCA in nccl.conf:\n%s", pod, out)
	}
	hca = strings.TrimSuffix(strings.TrimPrefix(m[1], "="), ":1")
	e2e.CheckRDMAPod(t, node, out, []string{hca}, "3")
	return gpus[0][1], gpus[0][2], hca
}

// TestKubeDRAGPUAndHCA: on the two-socket node, beside a stand-in for
// NVIDIA's GPU DRA driver whose GPUs sit on the node's PCIe roots, one
// claim for a GPU and an HCA constrained by matchAttribute
// resource.kubernetes.io/pcieRoot gets the HCA under that GPU's root: with
// the shipped example template, and pinned to each GPU in turn; a GPU with
// no HCA on its root leaves its claim Pending with the scheduler's reason;
// the looser resource.kubernetes.io/numaNode pairs that GPU with the HCA of
// its NUMA node.
func TestKubeDRAGPUAndHCA(t *testing.T) {
	node := e2e.NewFixtureNode(t, "two-socket")
	k := e2e.DRANode(t, node, 5)
	hcaRoot := map[string]string{}
	for _, d := range e2e.SliceDevices(t, k) {
		hcaRoot[e2e.Attr(d, "ibdev").(string)], _ = e2e.Attr(d, "resource.kubernetes.io/pcieRoot").(string)
	}
	// The fixture: mlx5_0 (the management NIC, not in the hca class) and
	// mlx5_1 on NUMA 0, each on its own root; mlx5_2 and mlx5_3 on one root
	// and mlx5_4 on another, NUMA 1. gpu-3's root has no HCA.
	gpus := []standInGPU{
		{"gpu-0", hcaRoot["mlx5_1"], "0000:1b:00.0", 0},
		{"gpu-1", hcaRoot["mlx5_2"], "0000:c3:00.0", 1},
		{"gpu-2", hcaRoot["mlx5_4"], "0000:e2:00.0", 1},
		{"gpu-3", "pci0000:3a", "0000:3b:00.0", 0},
	}
	if gpus[0].PCIeRoot == "" || gpus[1].PCIeRoot != hcaRoot["mlx5_3"] || gpus[1].PCIeRoot == gpus[2].PCIeRoot {
		t.Fatalf("two-socket fixture's pcieRoots changed: %v", hcaRoot)
	}
	startGPUStandIn(t, k, gpus)
	rootOf := map[string]string{}
	for _, g := range gpus {
		rootOf[g.Name] = g.PCIeRoot
	}

	ns := e2e.UniqueID("gpu-hca-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+e2e.InNamespace(t, e2e.ShippedManifest(t, "deploy/examples/gpu-hca-claims.yaml"), ns))
	k.Apply(t, e2e.ClaimPod(ns, "shipped", "gpu-hca-pcie-root"))
	k.WaitPod(t, ns, "shipped", "Ready", 2*time.Minute)
	if gpu, root, hca := gpuAndHCA(t, k, node, ns, "shipped"); root != rootOf[gpu] || hcaRoot[hca] != root {
		t.Errorf("shipped template: %s (%s) with %s (%s); want the HCA under the GPU's root", gpu, root, hca, hcaRoot[hca])
	}
	k.MustKubectl(t, "delete", "pod", "-n", ns, "shipped", "--wait=true")

	for i, g := range gpus[:3] {
		pod := fmt.Sprintf("pair-%d", i)
		k.Apply(t, pinnedGPUTemplate(ns, pod, i, "resource.kubernetes.io/pcieRoot")+"---\n"+e2e.ClaimPod(ns, pod, pod))
		k.WaitPod(t, ns, pod, "Ready", 2*time.Minute)
		gpu, root, hca := gpuAndHCA(t, k, node, ns, pod)
		if gpu != g.Name || root != g.PCIeRoot || hcaRoot[hca] != g.PCIeRoot {
			t.Errorf("%s: got %s (%s) with %s (%s); want %s with an HCA under %s", pod, gpu, root, hca, hcaRoot[hca], g.Name, g.PCIeRoot)
		}
	}
	k.Apply(t, pinnedGPUTemplate(ns, "no-hca-on-root", 3, "resource.kubernetes.io/pcieRoot")+"---\n"+e2e.ClaimPod(ns, "no-hca-on-root", "no-hca-on-root"))
	waitUnschedulable(t, k, ns, "no-hca-on-root", "cannot allocate all claims")

	// NUMA 0's one HCA, mlx5_1, is pair-0's until it goes.
	k.MustKubectl(t, "delete", "pod", "-n", ns, "pair-0", "--wait=true")
	k.Apply(t, pinnedGPUTemplate(ns, "same-numa", 3, "resource.kubernetes.io/numaNode")+"---\n"+e2e.ClaimPod(ns, "same-numa", "same-numa"))
	k.WaitPod(t, ns, "same-numa", "Ready", 2*time.Minute)
	if gpu, _, hca := gpuAndHCA(t, k, node, ns, "same-numa"); gpu != "gpu-3" || hca != "mlx5_1" {
		t.Errorf("same-numa: got %s with %s; want gpu-3 with mlx5_1, NUMA 0's HCA", gpu, hca)
	}
}
