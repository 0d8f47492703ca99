package hooks

import (
	"os"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/ldsandbox"
)

// TestMain lets update-ldcache re-execute this test binary as its sandbox.
func TestMain(m *testing.M) {
	ldsandbox.RunIfSandbox()
	os.Exit(m.Run())
}
