package network

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// TestKubeDRAPodNetworkMetadataAndAdmin: on a node with pod networking,
// a pod's device metadata file names the interface the driver gave it
// (written before its containers could start, so the first read sees it),
// and an admin's claim on an HCA a job's pod holds a share of gives the
// admin's pod the HCA's device nodes and nothing of the job's.
func TestKubeDRAPodNetworkMetadataAndAdmin(t *testing.T) {
	node, k := podNetworkDRANode(t, e2e.KubeOptions{})
	ns := e2e.UniqueID("dra-meta-net-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+e2e.InNamespace(t, podNetworkTemplates(t), ns))

	t.Run("a sub-interface's metadata names its address", func(t *testing.T) {
		k.Apply(t, podNetPod(ns, "sub", "hca-with-subinterface"))
		k.WaitPod(t, ns, "sub", "Ready", 2*time.Minute)
		addr, err := netip.ParsePrefix(podAddrs(t, k, ns, "sub")["net1"])
		if err != nil {
			t.Fatalf("pod sub holds no net1 address: %v", err)
		}
		mac := strings.TrimSpace(k.MustExecInPod(t, ns, "sub", "main", "cat", "/sys/class/net/net1/address"))
		checkMetadataNetwork(t, k, ns, "sub", &resourceapi.NetworkDeviceData{InterfaceName: "net1", IPs: []string{addr.String()}, HardwareAddress: mac})
		k.MustKubectl(t, "delete", "pod", "-n", ns, "sub", "--wait=true")
	})

	t.Run("a moved netdev's metadata names it", func(t *testing.T) {
		k.Apply(t, podNetPod(ns, "whole", "hca-with-netdev"))
		k.WaitPod(t, ns, "whole", "Ready", 2*time.Minute)
		netdev, nodeAddr := fixtureNetDev(t, node, claimedHCA(t, k, ns, "whole"))
		addr := movedAddr(t, node, netdev, nodeAddr, podAddrs(t, k, ns, "whole")[netdev])
		mac := strings.TrimSpace(k.MustExecInPod(t, ns, "whole", "main", "cat", "/sys/class/net/"+netdev+"/address"))
		checkMetadataNetwork(t, k, ns, "whole", &resourceapi.NetworkDeviceData{InterfaceName: netdev, IPs: []string{addr.String()}, HardwareAddress: mac})
		k.MustKubectl(t, "delete", "pod", "-n", ns, "whole", "--wait=true")
	})

	// On 1.36 and later every HCA has a bandwidth capacity, and the
	// scheduler checks an admin request's capacity like any other's: an
	// admin's claim fits beside a job's share, not beside a job that holds
	// the whole HCA (docs/kubernetes.md, "Admin access").
	t.Run("admin access beside the holder", func(t *testing.T) {
		e2e.NeedsKube(t, 36, "consumable capacity")
		const hca, netdev = "mlx5_7", "eth7"
		theHCA := fmt.Sprintf(`'device.attributes["rdma.example.com"].ibdev == %q'`, hca)
		share := func(gbps string) string {
			return fmt.Sprintf("\n            capacity:\n              requests:\n                bandwidth: %q", gbps)
		}
		k.Apply(t, e2e.WithClaimConfig(e2e.ClaimTemplate(ns, "job-share", "shared", theHCA, share("40")), "mode: sub-interface, interfaceName: net1")+
			"---\n"+podNetPod(ns, "job", "job-share"))
		k.WaitPod(t, ns, "job", "Ready", 2*time.Minute)
		jobAddr := podAddrs(t, k, ns, "job")["net1"]
		holds := func(when string) {
			t.Helper()
			if got := podAddrs(t, k, ns, "job")["net1"]; got == "" || got != jobAddr {
				t.Fatalf("%s: the job's pod holds net1 %q, want %s", when, got, jobAddr)
			}
		}
		holds("before the admin's pod")
		jobClaim := ns + "/" + claimReservedFor(t, k, ns, "job").Name

		// Admin access is allowed only in a namespace labeled for it.
		admin := ns + "-admin"
		k.Apply(t, fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels:\n    resource.kubernetes.io/admin-access: \"true\"\n", admin)+
			"---\n"+e2e.ClaimTemplate(admin, "look", "shared", theHCA, share("10")+"\n            adminAccess: true")+
			"---\n"+podNetPod(admin, "look", "look"))
		k.WaitPod(t, admin, "look", "Ready", 2*time.Minute)
		uverbs := e2e.HCANodeNames(t, node, hca)[0]
		if ls := k.MustExecInPod(t, admin, "look", "main", "ls", "/dev/infiniband"); !slices.Contains(strings.Fields(ls), uverbs) {
			t.Errorf("the admin's pod lacks %s: /dev/infiniband has %s", uverbs, ls)
		}
		if got := podAddrs(t, k, admin, "look"); len(got) != 2 || got["eth0"] == "" {
			t.Errorf("the admin's pod holds %v, want lo and its eth0 alone: no interface of %s", got, netdev)
		}
		dev := e2e.MetadataDevice(t, e2e.PodDeviceMetadata(t, k, admin, "look", e2e.MetadataOfTemplate("rdma", "hca")), "hca")
		if want := strings.ReplaceAll(hca, "_", "-"); dev.Name != want || dev.NetworkData != nil {
			t.Errorf("the admin's metadata: device %s with networkData %+v, want %s with none", dev.Name, dev.NetworkData, want)
		}
		holds("beside the admin's pod")

		k.MustKubectl(t, "delete", "pod", "-n", admin, "look", "--wait=true")
		e2e.WaitCheckpoint(t, k, jobClaim)
		holds("after the admin's pod went")
		k.MustKubectl(t, "delete", "pod", "-n", ns, "job", "--wait=true")
	})
}

// checkMetadataNetwork: pod's metadata file for its claim (the pod's
// entry rdma, request hca, as podNetPod makes it) names its one device
// with want as networkData.
func checkMetadataNetwork(t *testing.T, k *e2e.KubeEnv, ns, pod string, want *resourceapi.NetworkDeviceData) {
	t.Helper()
	md := e2e.PodDeviceMetadata(t, k, ns, pod, e2e.MetadataOfTemplate("rdma", "hca"))
	dev := e2e.MetadataDevice(t, md, "hca")
	if got := dev.NetworkData; got == nil || got.InterfaceName != want.InterfaceName || !slices.Equal(got.IPs, want.IPs) ||
		!strings.EqualFold(got.HardwareAddress, want.HardwareAddress) {
		t.Errorf("pod %s: metadata of %s names %+v, want %+v", pod, dev.Name, got, want)
	}
	if md.Generation < 2 {
		t.Errorf("pod %s: metadata generation %d: never written after the prepare", pod, md.Generation)
	}
}
