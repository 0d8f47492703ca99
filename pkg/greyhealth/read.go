// Package greyhealth reads a node's ports and PCIe links for grey health
// and samples them for the agents: the agents' sampler (every
// health.interval), doctor (twice, --sample-interval apart) and list (once)
// read them the same way. NewReader and Sample read the ports and PCIe
// links, Policy is the [health] section as pkg/health's Tracker takes it,
// and Sampler feeds the Tracker for the device plugin and the DRA driver.
package greyhealth

import (
	"fmt"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/portstats"
)

// NewReader reads, under the sysfs root, the counters the Tracker judges.
func NewReader(sysfsRoot string) *portstats.Reader {
	return portstats.NewReader(sysfsRoot, health.GreyCounters(), nil)
}

// Policy is the Tracker's policy of the [health] section.
func Policy(h config.Health) health.Policy {
	return health.Policy{
		FlapWindow: h.FlapWindow.Duration, FlapThreshold: h.FlapThreshold,
		ErrorWindow: h.ErrorWindow.Duration, ErrorThreshold: h.ErrorThreshold, SymbolErrorThreshold: h.SymbolErrorThreshold,
		QuietPeriod: h.QuietPeriod.Duration, ExpectedRates: h.ExpectedRatesGbps(),
	}
}

// Sample reads every port of node and each HCA's PCIe link through r.
// A port or link that cannot be read is left out (the tracker forgets it;
// the binary rule judges a port that is gone), and its error returned.
func Sample(r *portstats.Reader, node model.Node, at time.Time) (health.Sample, []error) {
	s := health.Sample{At: at}
	var errs []error
	for _, d := range node.Devices {
		hcaType := d.HCAType
		if hcaType == "" {
			hcaType = d.PCIVendor + ":" + d.PCIDevice
		}
		for _, p := range d.Ports {
			ps, err := r.Read(d.Name, p.Number)
			if err != nil {
				errs = append(errs, fmt.Errorf("reading %s port %d: %w", d.Name, p.Number, err))
				continue
			}
			s.Ports = append(s.Ports, health.PortSample{
				Device: d.Name, Model: hcaType, Port: p.Number, LinkLayer: string(p.LinkLayer),
				State: ps.State, Rate: ps.Rate, RateGbps: ps.RateGbps, Width: ps.Width, Counters: ps.Counters,
			})
		}
		if d.PCIAddress == "" {
			continue
		}
		l, err := r.ReadPCILink(d.PCIAddress)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading the PCIe link of %s: %w", d.Name, err))
			continue
		}
		s.PCI = append(s.PCI, health.PCILink{Device: d.Name, Speed: l.Speed, MaxSpeed: l.MaxSpeed, Width: l.Width, MaxWidth: l.MaxWidth})
	}
	return s, errs
}
