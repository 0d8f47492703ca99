package kube

import (
	"fmt"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/dradriver"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// The sriov fixture: PF mlx5_0 (0000:3b:00.0, ens1f0np0) with 16 VFs,
// mlx5_2..mlx5_17, each its own RDMA device and netdev; PF mlx5_1 has none.
const (
	sriovPF       = "mlx5_0"
	sriovPFNetdev = "ens1f0np0"
	sriovPFDown   = "its PF mlx5_0 (0000:3b:00.0) has no ACTIVE port"
)

// waitVFPod waits for pod and returns the one HCA its nccl.conf names,
// which must be a VF.
func waitVFPod(t *testing.T, k *e2e.KubeEnv, ns, pod string) string {
	t.Helper()
	k.WaitPod(t, ns, pod, "Ready", 2*time.Minute)
	m := e2e.NCCLHCA.FindStringSubmatch(e2e.Section(e2e.ProbePod(t, k, ns, pod), "nccl.conf"))
	if m == nil || !isSRIOVVF(strings.TrimSuffix(strings.TrimPrefix(m[1], "="), ":1")) {
		t.Fatalf("pod %s: NCCL_IB_HCA %v, want one VF", pod, m)
	}
	return strings.TrimSuffix(strings.TrimPrefix(m[1], "="), ":1")
}

func isSRIOVVF(name string) bool {
	var n int
	_, err := fmt.Sscanf(name, "mlx5_%d", &n)
	return err == nil && n >= 2 && n <= 17
}

// TestKubeDRASRIOV: on a node with a PF and 16 VFs the slice says which is
// which (isSriovVf, pfIbdev, pfPciAddress, sriovVfs); a claim selecting
// isSriovVf gets a VF; the PF's port going down taints every VF with
// PFNotActive (not the other PF), and a pod holding a VF reads the PF's
// name in its status; all recover with the port.
func TestKubeDRASRIOV(t *testing.T) {
	node := e2e.NewFixtureNode(t, "sriov")
	k := e2e.DRANode(t, node, 18)
	devs := e2e.SliceDevices(t, k)
	pf, _ := e2e.DeviceByName(devs, "mlx5-0")
	vf, _ := e2e.DeviceByName(devs, "mlx5-9")
	other, _ := e2e.DeviceByName(devs, "mlx5-1")
	for _, c := range []struct {
		d    resourceapi.Device
		name string
		want any
	}{
		{pf, "isSriovVf", false}, {pf, "sriovVfs", int64(16)}, {other, "isSriovVf", false}, {other, "sriovVfs", nil},
		{vf, "isSriovVf", true}, {vf, "pfIbdev", "mlx5_0"}, {vf, "pfPciAddress", "0000:3b:00.0"}, {vf, "sriovVfs", nil},
	} {
		if got := e2e.Attr(c.d, c.name); got != c.want {
			t.Errorf("%s %s = %v, want %v", c.d.Name, c.name, got, c.want)
		}
	}

	ns := e2e.UniqueID("dra-sriov-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+
		e2e.ClaimTemplate(ns, "vf", "hca", `device.attributes["rdma.example.com"].isSriovVf`, "")+"---\n"+e2e.ClaimPod(ns, "vf", "vf"))
	held := waitVFPod(t, k, ns, "vf")

	e2e.SetFixturePort(t, k, node, sriovPF, sriovPFNetdev, false)
	t.Cleanup(func() { e2e.SetFixturePort(t, k, node, sriovPF, sriovPFNetdev, true) })
	for _, name := range []string{"mlx5-2", "mlx5-17", dradriver.DeviceName(held)} {
		e2e.WaitUnhealthy(t, k, name, health.CodePFNotActive)
	}
	if e2e.TaintsOn(t) {
		if d, _ := e2e.DeviceByName(e2e.SliceDevices(t, k), "mlx5-1"); e2e.UnhealthyTaint(d) != "" {
			t.Errorf("the other PF mlx5_1 was tainted %s with mlx5_0", e2e.UnhealthyTaint(d))
		}
	}
	if e2e.PodHealthShown(t) {
		e2e.WaitResourceHealth(t, k, ns, "vf", "claim:", apis.Group+"/hca="+held, "Unhealthy", sriovPFDown)
	}
	e2e.SetFixturePort(t, k, node, sriovPF, sriovPFNetdev, true)
	e2e.WaitHealthy(t, k, dradriver.DeviceName(held))
	if e2e.PodHealthShown(t) {
		e2e.WaitResourceHealth(t, k, ns, "vf", "claim:", apis.Group+"/hca="+held, "Healthy", "")
	}
}

// TestKubeDevicePluginSRIOV: on the same node the device plugin serves the
// 16 VFs by default, not the PFs (rdma.example.com/hca: 16, a pod gets a
// VF); the PF's port going down takes every VF out of both resources'
// allocatable count and marks the held VF Unhealthy in its pod's status;
// all come back with the port.
func TestKubeDevicePluginSRIOV(t *testing.T) {
	node := e2e.NewFixtureNode(t, "sriov")
	k := devicePluginNode(t, node, "1000", "16")
	ns := e2e.UniqueID("dp-sriov-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+rdmaPodManifest(ns, "vf", map[string]int{e2e.ExclusiveResource: 1}, false))
	held := waitVFPod(t, k, ns, "vf")

	e2e.SetFixturePort(t, k, node, sriovPF, sriovPFNetdev, false)
	t.Cleanup(func() { e2e.SetFixturePort(t, k, node, sriovPF, sriovPFNetdev, true) })
	k.WaitNodeAllocatable(t, e2e.ExclusiveResource, "0", time.Minute)
	k.WaitNodeAllocatable(t, e2e.SharedResource, "0", time.Minute)
	if e2e.PodHealthShown(t) {
		e2e.WaitResourceHealth(t, k, ns, "vf", e2e.ExclusiveResource, held, "Unhealthy", "")
	}
	e2e.SetFixturePort(t, k, node, sriovPF, sriovPFNetdev, true)
	k.WaitNodeAllocatable(t, e2e.ExclusiveResource, "16", time.Minute)
	k.WaitNodeAllocatable(t, e2e.SharedResource, "1000", time.Minute)
	if e2e.PodHealthShown(t) {
		e2e.WaitResourceHealth(t, k, ns, "vf", e2e.ExclusiveResource, held, "Healthy", "")
	}
}
