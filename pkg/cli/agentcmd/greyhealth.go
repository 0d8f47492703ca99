package agentcmd

import (
	"context"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/portstats"
)

// GreyHealth is the device-plugin's and dra-driver's grey health sampler:
// every health.interval it reads each port's counters and rate and each
// HCA's PCIe link (pkg/portstats, under the agent's sysfs root, as the
// metrics do), feeds pkg/health's Tracker and, when the conditions change,
// hands them to its consumer (the device plugin's Manager, the DRA driver),
// logs the change and exports them. The node's HCAs come from the watch's
// generations (Observe).
type GreyHealth struct {
	publish func(map[string][]health.Condition)
	metrics *metrics.Exporter
	log     logrus.FieldLogger
	reader  *portstats.Reader

	mu    sync.Mutex
	node  model.Node
	cfg   config.Health
	ready chan struct{} // closed by the first Observe
	once  sync.Once
}

// NewGreyHealth samples under app's sysfs root for publish, which gets
// every change of the conditions, by HCA name.
func (a *Agent) NewGreyHealth(app *cli.App, publish func(map[string][]health.Condition)) *GreyHealth {
	return newGreyHealth(app.Roots.Sysfs, app.Log.WithField("health", "grey"), a.Metrics, publish)
}

func newGreyHealth(sysfsRoot string, log logrus.FieldLogger, exp *metrics.Exporter, publish func(map[string][]health.Condition)) *GreyHealth {
	return &GreyHealth{
		publish: publish, metrics: exp, log: log,
		reader: portstats.NewReader(sysfsRoot, health.GreyCounters(), nil),
		ready:  make(chan struct{}),
	}
}

// Observe takes a generation's node and configuration (a reload changes
// the thresholds; the history stays).
func (g *GreyHealth) Observe(node model.Node, cfg config.Config) {
	g.mu.Lock()
	g.node, g.cfg = node, cfg.Health
	g.mu.Unlock()
	g.once.Do(func() { close(g.ready) })
}

func (g *GreyHealth) current() (model.Node, config.Health) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.node, g.cfg
}

// greyPolicy is the Tracker's policy of the [health] section.
func greyPolicy(h config.Health) health.Policy {
	return health.Policy{
		FlapWindow: h.FlapWindow.Duration, FlapThreshold: h.FlapThreshold,
		ErrorWindow: h.ErrorWindow.Duration, ErrorThreshold: h.ErrorThreshold, SymbolErrorThreshold: h.SymbolErrorThreshold,
		QuietPeriod: h.QuietPeriod.Duration, ExpectedRates: h.ExpectedRatesGbps(),
	}
}

// Run samples until ctx ends. With health.enabled off it samples nothing
// and clears what it had raised.
func (g *GreyHealth) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-g.ready:
	}
	var tracker *health.Tracker
	var last []health.Condition
	for {
		node, cfg := g.current()
		switch {
		case !cfg.Enabled:
			tracker = nil
		case tracker == nil:
			tracker = health.NewTracker(greyPolicy(cfg))
			g.log.Infof("grey health: sampling every %s (flaps: %d in %s; errors: %d, symbol errors %d, in %s; quiet period %s)",
				cfg.Interval.Duration, cfg.FlapThreshold, cfg.FlapWindow.Duration, cfg.ErrorThreshold, cfg.SymbolErrorThreshold, cfg.ErrorWindow.Duration, cfg.QuietPeriod.Duration)
		default:
			tracker.SetPolicy(greyPolicy(cfg))
		}
		var conds []health.Condition
		changed := len(last) > 0
		if tracker != nil {
			conds, changed = tracker.Observe(g.sample(node, time.Now()))
		}
		if changed {
			for _, line := range health.Changes(last, conds) {
				g.log.Warn(line)
			}
			g.publish(health.ByDevice(conds))
			g.metrics.SetConditions(conds)
			last = conds
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(cfg.Interval.Duration):
		}
	}
}

// sample reads every port of node and each HCA's PCIe link. A port that
// cannot be read is left out (the tracker forgets it; the binary rule
// judges a port that is gone).
func (g *GreyHealth) sample(node model.Node, now time.Time) health.Sample {
	s := health.Sample{At: now}
	for _, d := range node.Devices {
		hcaType := d.HCAType
		if hcaType == "" {
			hcaType = d.PCIVendor + ":" + d.PCIDevice
		}
		for _, p := range d.Ports {
			ps, err := g.reader.Read(d.Name, p.Number)
			if err != nil {
				g.log.Debugf("reading %s port %d: %v", d.Name, p.Number, err)
				continue
			}
			s.Ports = append(s.Ports, health.PortSample{
				Device: d.Name, Model: hcaType, Port: p.Number, LinkLayer: string(p.LinkLayer),
				State: ps.State, Rate: ps.Rate, RateGbps: ps.RateGbps, Counters: ps.Counters,
			})
		}
		if d.PCIAddress == "" {
			continue
		}
		if l, err := g.reader.ReadPCILink(d.PCIAddress); err == nil {
			s.PCI = append(s.PCI, health.PCILink{Device: d.Name, Speed: l.Speed, MaxSpeed: l.MaxSpeed, Width: l.Width, MaxWidth: l.MaxWidth})
		}
	}
	return s
}
