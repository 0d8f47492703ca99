// Package network is the pod networking suite: pods in their own network
// namespaces given their HCAs' RoCE interfaces by the agent's NRI plugin,
// under containerd and CRI-O, in both Kubernetes modes, with faults and
// churn, and seed 002's PyTorchJob on two nodes (test/e2e's framework).
package network

import (
	"testing"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m) }
