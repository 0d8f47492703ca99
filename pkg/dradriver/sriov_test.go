package dradriver

import (
	"io"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// sriovDriver is a started driver on the SR-IOV fixture node: PFs mlx5_0
// (VFs mlx5_2..mlx5_17) and mlx5_1 (no VF).
func sriovDriver(t *testing.T) *Driver {
	t.Helper()
	tr := fixture.BuildBundledTrees(t, "sriov", false)
	res, err := discover.Discover(discover.Options{Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev}, SkipNet: true})
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	d := newDriver(t, Options{Name: testDriver, NodeName: "node-a", Log: log})
	d.Update(res.Node, config.Default())
	d.mu.Lock()
	d.restore(t.TempDir())
	d.mu.Unlock()
	return d
}

// A PF and one of its VFs are never prepared for two claims at once, as
// the device plugin never gives them to two pods: exclusive use of a PF
// is its port's, which its VFs' traffic goes through. VFs of one PF go to
// different claims, a PF without VFs beside them, and an admin's claim
// looks at either.
func TestPFAndItsVFsGoToOneClaim(t *testing.T) {
	d := sriovDriver(t)
	prepared := func(c *resourceapi.ResourceClaim) {
		t.Helper()
		if r := prepareOne(t, d, c); r.Err != nil {
			t.Fatalf("claim %s: %v", c.UID, r.Err)
		}
	}
	refused := func(c *resourceapi.ResourceClaim, want ...string) {
		t.Helper()
		r := prepareOne(t, d, c)
		if r.Err == nil {
			t.Fatalf("claim %s prepared (%v); want it refused", c.UID, cdiIDs(r))
		}
		for _, w := range want {
			if !strings.Contains(r.Err.Error(), w) {
				t.Errorf("claim %s refused with %q; want it to say %q", c.UID, r.Err, w)
			}
		}
	}
	prepared(claim("pf", result("r", testDriver, "mlx5-0")))
	refused(claim("vf", result("r", testDriver, "mlx5-2")), "mlx5-2", "VF of mlx5-0", "claim pf")
	prepared(claim("other-pf", result("r", testDriver, "mlx5-1")))
	prepared(claim("admin", adminResult("r", "mlx5-3")))

	unprepare(t, d, "pf")
	prepared(claim("vf", result("r", testDriver, "mlx5-2")))
	prepared(claim("vf-too", result("r", testDriver, "mlx5-3")))
	refused(claim("pf-again", result("r", testDriver, "mlx5-0")), "mlx5-0", "PF of mlx5-2", "claim vf")
	// One claim may hold a PF with its VFs.
	unprepare(t, d, "vf", "vf-too")
	prepared(claim("family", result("r", testDriver, "mlx5-0"), result("r", testDriver, "mlx5-4")))
}
