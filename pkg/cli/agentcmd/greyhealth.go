package agentcmd

import (
	"context"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/cli/nodecmd"
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
		reader: nodecmd.GreyReader(sysfsRoot),
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
			tracker = health.NewTracker(nodecmd.GreyPolicy(cfg))
			g.log.Infof("grey health: sampling every %s (flaps: %d in %s; errors: %d, symbol errors %d, in %s; quiet period %s)",
				cfg.Interval.Duration, cfg.FlapThreshold, cfg.FlapWindow.Duration, cfg.ErrorThreshold, cfg.SymbolErrorThreshold, cfg.ErrorWindow.Duration, cfg.QuietPeriod.Duration)
		default:
			tracker.SetPolicy(nodecmd.GreyPolicy(cfg))
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

// sample reads every port of node and each HCA's PCIe link; what cannot
// be read is logged and left out.
func (g *GreyHealth) sample(node model.Node, now time.Time) health.Sample {
	s, errs := nodecmd.GreySample(g.reader, node, now)
	for _, err := range errs {
		g.log.Debug(err)
	}
	return s
}
