// Package kube is the Kubernetes suite: the device plugin, the DRA driver,
// the Helm chart and pod networking on real kubelets and control planes
// started in private namespaces over fixture nodes (test/e2e's framework).
package kube

import (
	"testing"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m) }
