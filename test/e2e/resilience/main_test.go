// Package resilience is the Kubernetes faults suite: the DRA driver killed
// at its checkpoint's edges, replaced and upgraded while claims are held,
// the API server down, the kubelet and the runtime restarted, the node
// rebooted, an HCA gone while held (test/e2e's framework).
package resilience

import (
	"testing"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m) }
