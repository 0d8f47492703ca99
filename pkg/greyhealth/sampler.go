package greyhealth

import (
	"context"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/portstats"
)

// Sampler is the device-plugin's and dra-driver's grey health sampler:
// every health.interval it reads each port's counters and rate and each
// HCA's PCIe link (pkg/portstats, under the agent's sysfs root, as the
// metrics do), feeds pkg/health's Tracker and, when the conditions change,
// hands them to its consumer (the device plugin's Manager, the DRA driver),
// logs the change and exports them. The node's HCAs come from the watch's
// generations (Observe).
type Sampler struct {
	publish func(map[string][]health.Condition)
	metrics Exporter
	log     logrus.FieldLogger
	reader  *portstats.Reader

	mu    sync.Mutex
	node  model.Node
	cfg   config.Health
	ready chan struct{} // closed by the first Observe
	once  sync.Once
}

// Exporter exports the conditions (the agent's metrics.Exporter); the
// sampler does not name it so that list and doctor, which read grey health
// too, link no metrics endpoint.
type Exporter interface {
	SetConditions([]health.Condition)
}

// NewSampler samples under sysfsRoot for publish, which gets every change
// of the conditions, by HCA name, as exp (nil: none) does.
func NewSampler(sysfsRoot string, log logrus.FieldLogger, exp Exporter, publish func(map[string][]health.Condition)) *Sampler {
	return &Sampler{
		publish: publish, metrics: exp, log: log,
		reader: NewReader(sysfsRoot),
		ready:  make(chan struct{}),
	}
}

// Observe takes a generation's node and configuration (a reload changes
// the thresholds; the history stays).
func (g *Sampler) Observe(node model.Node, cfg config.Config) {
	g.mu.Lock()
	g.node, g.cfg = node, cfg.Health
	g.mu.Unlock()
	g.once.Do(func() { close(g.ready) })
}

func (g *Sampler) current() (model.Node, config.Health) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.node, g.cfg
}

// Run samples until ctx ends. With health.enabled off it samples nothing
// and clears what it had raised.
func (g *Sampler) Run(ctx context.Context) error {
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
			tracker = health.NewTracker(Policy(cfg))
			g.log.Infof("grey health: sampling every %s (flaps: %d in %s; errors: %d, symbol errors %d, in %s; quiet period %s)",
				cfg.Interval.Duration, cfg.FlapThreshold, cfg.FlapWindow.Duration, cfg.ErrorThreshold, cfg.SymbolErrorThreshold, cfg.ErrorWindow.Duration, cfg.QuietPeriod.Duration)
		default:
			tracker.SetPolicy(Policy(cfg))
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
			if g.metrics != nil {
				g.metrics.SetConditions(conds)
			}
			last = conds
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(cfg.Interval.Duration):
		}
	}
}

// sample reads every port of node and each HCA's PCIe link; what cannot
// be read is logged and left out.
func (g *Sampler) sample(node model.Node, now time.Time) health.Sample {
	s, errs := Sample(g.reader, node, now)
	for _, err := range errs {
		g.log.Debug(err)
	}
	return s
}
