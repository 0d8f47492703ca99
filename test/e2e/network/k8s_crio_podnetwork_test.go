package network

import (
	"testing"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// TestKubeCRIOPodNetwork: TestKubeDRAPodNetwork's pods on a node whose
// runtime is CRI-O (KubeOptions.Runtime "crio"): the DRA driver's NRI
// plugin on CRI-O's socket, the netdev moved in and given back, a
// sub-interface per sharing pod, each pod's GID index from its own
// address's RoCE v2 entry, nothing moved for a bad address.
func TestKubeCRIOPodNetwork(t *testing.T) {
	testDRAPodNetwork(t, e2e.KubeOptions{Runtime: e2e.RuntimeCRIO})
}
