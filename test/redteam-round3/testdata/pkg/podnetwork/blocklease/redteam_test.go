package blocklease

// Round 3's red-team reproduction of H5 (../shared/redteam/round3/pkg/podnet,
// TestRedTeamRangeCoveringTheSubnetAndSharedByNodes) through what the agent
// does now with its static ranges at start: each node registers them as
// Leases (this package's Holder) before it hands any out. Two nodes of one
// release, one subnet, the same pod_network.ranges. Logs only.

import (
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
)

func TestRedTeamRangeSharedByNodesAtTheAgentsStart(t *testing.T) {
	for _, spec := range []string{"10.0.61.0/24", "10.0.61.200-10.0.61.220"} {
		c, clk := newCluster(t, "a", "b"), newClock()
		r, err := podnetwork.ParseRange(spec)
		if err != nil {
			t.Fatal(err)
		}
		opts := nodeOpts{static: map[string][]podnetwork.Range{"eth1": {r}}}
		a, errA := startNode(t, c, clk, "a", eth1(5), opts)
		var first any = "-"
		if errA == nil {
			addr, err := a.allocate()
			first = []any{addr, err}
		}
		_, errB := startNode(t, c, clk, "b", eth1(7), opts)
		t.Logf("range %q (parsed %s): node a starts: err=%v, its first pod gets %v; node b starts: err=%v", spec, r, errA, first, errB)
	}
}
