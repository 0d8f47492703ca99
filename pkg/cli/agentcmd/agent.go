package agentcmd

import (
	"context"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/hookevents"
	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
	"github.com/rdma-cdi/rdma-cdi/pkg/watch"
)

// Agent is what the long-running commands (watch, device-plugin,
// dra-driver) share: the watch service and, when metrics.address is set,
// the metrics endpoint with the hooks' reports.
type Agent struct {
	Service *watch.Service
	// Metrics is nil when metrics.address is empty; its methods are then
	// no-ops.
	Metrics *metrics.Exporter

	serveMetrics func(context.Context) error
}

// NewAgent builds the watch service for cmd and binds the metrics address
// and the hooks' socket, so that one in use fails the start.
func (w *WatchFlags) NewAgent(app *cli.App, cmd *cobra.Command, mode string) (*Agent, error) {
	a := &Agent{Service: w.Service(app, cmd)}
	addr := app.Config.Metrics.Address
	if addr == "" {
		return a, nil
	}
	exp := metrics.New(metrics.Options{
		Sysfs: app.Roots.Sysfs, Proc: filepath.Join(app.Roots.Host, "proc"), Mode: mode, Version: app.Version,
		Rescan: app.Config.Watch.RescanInterval.Duration,
	})
	l, err := metrics.Listen(addr)
	if err != nil {
		return nil, err
	}
	var events *hookevents.Listener
	if sock := app.Config.Metrics.HookSocket; sock != "" {
		if events, err = hookevents.Listen(sock); err != nil {
			l.Close()
			return nil, err
		}
		app.Log.Infof("container hooks report to %s", sock)
	}
	app.Log.Infof("metrics on http://%s/metrics (probes /healthz, /readyz)", l.Addr())
	a.Metrics = exp
	a.Service.Report = exp.Generation
	a.serveMetrics = func(ctx context.Context) error {
		if events != nil {
			go func() {
				err := events.Receive(ctx, exp.HookOutcome, func(err error) {
					exp.HookRejected(err)
					app.Log.Debugf("hook report refused: %v", err)
				})
				if err != nil {
					app.Log.Errorf("%v; hook reports are no longer received", err)
				}
			}()
		}
		return exp.Serve(ctx, l)
	}
	return a, nil
}

// Run runs the service, the metrics endpoint and servers fed by the
// service's generations until SIGTERM or SIGINT, or until one fails.
func (a *Agent) Run(ctx context.Context, servers ...func(context.Context) error) error {
	if a.serveMetrics != nil {
		servers = append(servers, a.serveMetrics)
	}
	return RunBesideWatch(ctx, a.Service, servers...)
}
