package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// KubeMinor is KubeVersion's minor number (37 for v1.37.2).
func KubeMinor(t testing.TB) int {
	t.Helper()
	parts := strings.Split(strings.TrimPrefix(KubeVersion(), "v"), ".")
	minor, err := strconv.Atoi(parts[1])
	if err != nil {
		t.Fatalf("Kubernetes version %s: %v", KubeVersion(), err)
	}
	return minor
}

// NeedsKube skips the rest of t on a Kubernetes release older than
// 1.<minor>, which has no feature: only in a run on an older release
// asked for by name (RDMA_CDI_K8S_VERSION, as make test-k8s-oldest sets
// it). On make test's own release under CI the gate is never a skip: a
// version read wrong, or a default moved back, fails instead of turning
// the test off.
func NeedsKube(t testing.TB, minor int, feature string) {
	t.Helper()
	if KubeMinor(t) >= minor {
		return
	}
	msg := fmt.Sprintf("Kubernetes %s has no %s (1.%d and later)", KubeVersion(), feature, minor)
	if KubeVersion() == DefaultKubeVersion {
		Missing(t, "%s, and it is the release make test runs", msg)
		return
	}
	t.Skip(msg)
}
