package doctor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/health"
)

// GreyFacts are the node's ports and PCIe links read once, or twice
// Interval apart, and the [health] thresholds the agents judge them by.
type GreyFacts struct {
	Interval time.Duration
	Policy   health.Policy
	// Samples are the readings, in order.
	Samples []health.Sample
	// ReadErrs are the ports and links that could not be read.
	ReadErrs []string
}

// counterMove is one counter of one port that rose between two readings.
type counterMove struct {
	device         string
	port           int
	name           string
	delta, current uint64
}

// counterMoves are the grey counters that rose from the first reading to
// the last, in the order of the last one's ports. A counter that went
// back (a reset) did not move.
func counterMoves(first, last health.Sample) []counterMove {
	before := map[string]health.PortSample{}
	for _, p := range first.Ports {
		before[fmt.Sprintf("%s/%d", p.Device, p.Port)] = p
	}
	var out []counterMove
	for _, p := range last.Ports {
		b, ok := before[fmt.Sprintf("%s/%d", p.Device, p.Port)]
		if !ok {
			continue
		}
		for _, name := range health.GreyCounters() {
			old, okOld := b.Counters[name]
			cur, okCur := p.Counters[name]
			if okOld && okCur && cur > old {
				out = append(out, counterMove{device: p.Device, port: p.Port, name: name, delta: cur - old, current: cur})
			}
		}
	}
	return out
}

// checkGreyHealth judges the readings with the agents' Tracker and
// thresholds: with no history it sees a PCIe link below its maximum and a
// port below its expected rate or its peers at once, and an error counter
// or link_downed that moved between the two readings. One interval cannot
// prove a burst, so a counter that moved is a WARN unless it passed the
// agents' threshold within it.
func checkGreyHealth(f Facts) []Result {
	g := f.Grey
	if g == nil || len(g.Samples) == 0 {
		return nil
	}
	tracker := health.NewTracker(g.Policy)
	var conds []health.Condition
	for _, s := range g.Samples {
		conds, _ = tracker.Observe(s)
	}
	addr := func(device string) string {
		for _, d := range f.Node.Devices {
			if d.Name == device && d.PCIAddress != "" {
				return device + " (" + d.PCIAddress + ")"
			}
		}
		return device
	}
	var unhealthy, pcie, rate []string
	for _, c := range conds {
		switch {
		case c.Level == health.LevelUnhealthy:
			unhealthy = append(unhealthy, addr(c.Device)+" "+c.Reason)
		case c.Code == health.CodePCIeDegraded:
			pcie = append(pcie, addr(c.Device)+": "+c.Reason)
		case c.Code == health.CodeLinkDegraded:
			rate = append(rate, addr(c.Device)+" "+c.Reason)
		}
	}
	var moved []string
	if len(g.Samples) > 1 {
		for _, m := range counterMoves(g.Samples[0], g.Samples[len(g.Samples)-1]) {
			if slices.ContainsFunc(conds, func(c health.Condition) bool {
				return c.Device == m.device && c.Port == m.port && c.Level == health.LevelUnhealthy && c.Counter() == m.name
			}) {
				continue
			}
			moved = append(moved, fmt.Sprintf("%s port %d: %s rose by %d in %s (now %d)", addr(m.device), m.port, m.name, m.delta, g.Interval, m.current))
		}
	}
	var out []Result
	add := func(status Status, items []string, tail, fix string) {
		if len(items) > 0 {
			out = append(out, Result{Status: status, Name: "grey-health", Detail: strings.Join(items, "; ") + tail, Fix: fix})
		}
	}
	const cable = "check the cable and transceiver at both ends (reseat them, or swap in a known good one) and the switch port; "
	add(Fail, unhealthy, fmt.Sprintf(", within the %s between two readings: the agents mark the HCA Unhealthy", g.Interval),
		cable+"mlxlink -d PCI -c shows the link's error counters and BER; rdma_cdi_hca_condition on an agent's metrics has its verdict over the whole window")
	add(Warn, moved, ": one interval cannot tell a burst from a stray error",
		"see rdma_cdi_hca_condition on an agent's metrics for the verdict over health.error_window and health.flap_window, or run doctor again with a longer --sample-interval; if it keeps rising, "+cable+"mlxlink -d PCI -c")
	add(Warn, rate, "",
		cable+"mlxlink -d PCI shows the speed and lanes the link trained at; a job on this HCA runs at its pace")
	add(Warn, pcie, "",
		"reseat the HCA in a slot wired for its width and generation, and check the riser and the BIOS's PCIe speed setting; lspci -vv -s PCI compares LnkSta with LnkCap")
	add(Warn, g.ReadErrs, "", "check --sysfs-root; a device that went away is rdma-devices' finding")
	if len(out) > 0 {
		return out
	}
	last := g.Samples[len(g.Samples)-1]
	how := fmt.Sprintf("read twice, %s apart: no error counter or link_downed moved", g.Interval)
	if len(g.Samples) < 2 {
		how = "read once (--sample-interval 0: counters not compared)"
	}
	return []Result{{Status: Pass, Name: "grey-health", Detail: fmt.Sprintf(
		"%d port(s) and %d PCIe link(s) %s, no ACTIVE port below its expected rate or its peers of the same type, no PCIe link below its maximum "+
			"(an agent's rdma_cdi_hca_condition has the verdict over its windows)", len(last.Ports), len(last.PCI), how)}}
}
