// Package nodefeatures renders the node's RDMA facts for schedulers as a
// Node Feature Discovery feature file: NFD's worker reads each file of its
// features.d directory and its master puts the file's name=value lines on
// the Node as labels, so the agent labels its node without any right on
// Node objects. Topology-aware schedulers (Kueue, Volcano, KAI) place gangs
// by such labels.
package nodefeatures

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
)

// The labels' names, after the vendor's domain (rdma.example.com/hca-count).
const (
	LabelHCACount  = "hca-count"
	LabelRailCount = "rail-count"
	// LabelTransport is a prefix: transport.roce, transport.infiniband, ...
	LabelTransport = "transport."
	LabelBlock     = "block"
	LabelRack      = "rack"
)

// Labels are node's facts as NFD labels in cfg.CDI.Vendor's domain, over the
// HCAs NCCL's rules let in (nccl.include_hcas, exclude_hcas and the
// default-route rule: not the management NIC), whatever their ports' state,
// so that a flapping link does not relabel the node:
//   - hca-count: how many;
//   - transport.<infiniband|roce|efa|unspecified>=true for each they use;
//   - rail-count: how many rails they are on (rails, by HCA: topology.Rails),
//     where any is;
//   - block and rack: the operator's, where set.
func Labels(node model.Node, cfg config.Config, rails map[string]string) map[string]string {
	key := func(name string) string { return cfg.CDI.Vendor + "/" + name }
	labels := map[string]string{}
	count := 0
	onRails := map[string]bool{}
	for _, d := range node.Devices {
		if !eligible(node, cfg.NCCL, d) {
			continue
		}
		count++
		labels[key(LabelTransport+string(d.Transport()))] = "true"
		if r := rails[d.Name]; r != "" {
			onRails[r] = true
		}
	}
	labels[key(LabelHCACount)] = strconv.Itoa(count)
	if len(onRails) > 0 {
		labels[key(LabelRailCount)] = strconv.Itoa(len(onRails))
	}
	if b := cfg.Topology.Block; b != "" {
		labels[key(LabelBlock)] = b
	}
	if r := cfg.Topology.Rack; r != "" {
		labels[key(LabelRack)] = r
	}
	return labels
}

// eligible reports whether NCCL's HCA rules let any port of d in.
func eligible(node model.Node, cfg config.NCCL, d model.Device) bool {
	return slices.ContainsFunc(d.Ports, func(p model.Port) bool {
		ok, _ := nccl.Eligible(node, cfg, nccl.PortRef{Device: d.Name, Port: p})
		return ok
	})
}

// File is labels as a features.d file, sorted by name, whose content NFD
// ignores from expires on (never, when expires is zero): labels an agent
// that stopped for good no longer refreshes go, where a file left behind
// would keep them forever. NFD >= 0.14 reads the comment and the directive;
// every line is one label, name=value.
func File(labels map[string]string, expires time.Time) []byte {
	var b strings.Builder
	b.WriteString("# This node's RDMA facts, written by rdma-cdi's agent for Node Feature Discovery.\n")
	if !expires.IsZero() {
		fmt.Fprintf(&b, "# +expiry-time=%s\n", expires.UTC().Format(time.RFC3339))
	}
	for _, name := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString(name + "=" + labels[name] + "\n")
	}
	return []byte(b.String())
}

// Lifetime is how long a file written now stays valid: four rescans, and
// at least an hour, so a running agent, which looks at the node every
// rescan, rewrites it long before NFD drops it (Due), while an agent gone
// for good takes its labels with it within the hour or so. Without
// rescans (0) nothing would refresh the file: it never expires.
func Lifetime(rescan time.Duration) time.Duration {
	if rescan <= 0 {
		return 0
	}
	return max(time.Hour, 4*rescan)
}

// Due reports whether a file that expires at expires (zero: never) must be
// written again at now to keep lifetime's promise: half its life gone, or
// its expiry not what lifetime asks for (rescans turned on or off).
func Due(expires time.Time, lifetime time.Duration, now time.Time) bool {
	if lifetime == 0 || expires.IsZero() {
		return (lifetime == 0) != expires.IsZero()
	}
	return expires.Sub(now) < lifetime/2
}
