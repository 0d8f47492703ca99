package e2e

import (
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
