package kube

import (
	"reflect"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// TestKubeDRADeviceMetadata: each container of a claim reads its device
// metadata file (KEP-5304) at the path docs/kubernetes.md gives: for a
// claim its pod names, under the claim's name; for one made from a
// template, under the pod's entry, the claim's generated name inside. The
// file names the claim and the device with exactly the attributes the
// slice publishes for it, and no networkData: these pods are in the
// node's network, given no interface.
func TestKubeDRADeviceMetadata(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.DRANode(t, node, 9)
	ns := e2e.UniqueID("dra-meta-")
	// The template's pod first: it asks mlx5_1, the named claim any HCA.
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+e2e.HCA1Claim(ns, "hca1", "hca", "")+"---\n"+e2e.ClaimPod(ns, "templ", "hca1"))
	k.WaitPod(t, ns, "templ", "Ready", 2*time.Minute)
	k.Apply(t, e2e.StandaloneClaimPod(ns, "named", "hca.rdma.example.com", "direct"))
	k.WaitPod(t, ns, "direct", "Ready", 2*time.Minute)
	slice := e2e.SliceDevices(t, k)

	for _, tc := range []struct {
		pod, path, claim, entry string
	}{
		{"templ", e2e.MetadataOfTemplate("rdma", "hca"), "", "rdma"},
		{"direct", e2e.MetadataOfClaim("named", "hca"), "named", ""},
	} {
		md := e2e.PodDeviceMetadata(t, k, ns, tc.pod, tc.path)
		if md.Namespace != ns || (tc.claim != "" && md.Name != tc.claim) {
			t.Errorf("pod %s: metadata of claim %s/%s, want %s/%s", tc.pod, md.Namespace, md.Name, ns, tc.claim)
		}
		entry := ""
		if md.PodClaimName != nil {
			entry = *md.PodClaimName
		}
		if entry != tc.entry {
			t.Errorf("pod %s: podClaimName %q, want %q", tc.pod, entry, tc.entry)
		}
		dev := e2e.MetadataDevice(t, md, "hca")
		if tc.pod == "templ" && dev.Name != "mlx5-1" {
			t.Errorf("pod templ: metadata names %s, want mlx5-1", dev.Name)
		}
		published, ok := e2e.DeviceByName(slice, dev.Name)
		if !ok || dev.Driver != "rdma.example.com" || dev.Pool != k.NodeName {
			t.Fatalf("pod %s: metadata device %s/%s/%s is not one of the slice's:%s", tc.pod, dev.Driver, dev.Pool, dev.Name, e2e.DescribeDevices(slice))
		}
		if !reflect.DeepEqual(dev.Attributes, published.Attributes) {
			t.Errorf("pod %s: %s's metadata attributes differ from the slice's:%s", tc.pod, dev.Name,
				e2e.DescribeDevices([]resourceapi.Device{{Name: "metadata", Attributes: dev.Attributes}, published}))
		}
		if dev.NetworkData != nil {
			t.Errorf("pod %s: networkData %+v in the node's network", tc.pod, dev.NetworkData)
		}
	}
}
