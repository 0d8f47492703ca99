package agentcmd

import (
	"context"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/greyhealth"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/hookevents"
	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
	"github.com/rdma-cdi/rdma-cdi/pkg/sandboxindex"
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
	// watchMounts ends the agent when a host path it mounts goes stale.
	watchMounts func(context.Context) error
}

// NewAgent builds the watch service for cmd and binds the metrics address
// and the hooks' socket, so that one in use fails the start.
func (w *WatchFlags) NewAgent(app *cli.App, cmd *cobra.Command, mode string) (*Agent, error) {
	a := &Agent{Service: w.Service(app, cmd), watchMounts: watchStaleMounts(app)}
	if pn := app.Config.PodNetwork; !pn.Enabled {
		// A killed pod-network agent's list would hold every new pod's
		// containers back (pkg/sandboxindex); nothing keeps it now.
		if err := sandboxindex.Remove(pn.StateDir); err != nil {
			app.Log.Warnf("pod network is off: %v", err)
		}
	}
	addr := app.Config.Metrics.Address
	if addr == "" {
		return a, nil
	}
	guard, err := metricsGuard(app)
	if err != nil {
		return nil, err
	}
	proc := hostProc(app.Roots.Host)
	exp := metrics.New(metrics.Options{
		Sysfs: app.Roots.Sysfs, Proc: proc, Mode: mode, Version: app.Version,
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
		warnIfLivenessUnknown(app, proc)
	}
	app.Log.Infof("metrics on http://%s/metrics (auth %s; probes /healthz, /readyz, open)", l.Addr(), app.Config.Metrics.Auth)
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
		return exp.Serve(ctx, l, guard)
	}
	return a, nil
}

// hostProc is the host's procfs under hostRoot, where the agent looks for
// the init of a container whose hook reported no usable cgroup: "" where
// there is none, as in the DaemonSet, which mounts neither the host's / nor
// its /proc (the agent on the host, host root "/", keeps /proc).
func hostProc(hostRoot string) string {
	proc := filepath.Join(hostRoot, "proc")
	if fi, err := os.Stat(proc); err != nil || !fi.IsDir() {
		return ""
	}
	return proc
}

// warnIfLivenessUnknown says when the agent can tell no hooked container
// alive, which leaves rdma_cdi_hca_holder_info without the hooks' holders:
// no cgroup hierarchy a hook reports under (v2's root, v1's pids or
// systemd, hybrid's unified) and no host /proc.
func warnIfLivenessUnknown(app *cli.App, proc string) {
	cgroups := filepath.Join(app.Roots.Sysfs, "fs/cgroup")
	for _, hierarchy := range []string{"", "unified", "pids", "systemd"} {
		if _, err := os.Stat(filepath.Join(cgroups, hierarchy, "cgroup.procs")); err == nil || proc != "" {
			return
		}
	}
	app.Log.Warnf("no cgroup hierarchy under %s and no host /proc under %s: hooked containers cannot be told alive, and are not listed as holders", cgroups, app.Roots.Host)
}

// Run runs the service, the metrics endpoint and servers fed by the
// service's generations until SIGTERM or SIGINT, or until one fails.
func (a *Agent) Run(ctx context.Context, servers ...func(context.Context) error) error {
	if a.serveMetrics != nil {
		servers = append(servers, a.serveMetrics)
	}
	servers = append(servers, a.watchMounts)
	return RunBesideWatch(ctx, a.Service, servers...)
}

// NewGreyHealth samples grey health under app's sysfs root for publish,
// which gets every change of the conditions, by HCA name; the metrics
// endpoint exports them.
func (a *Agent) NewGreyHealth(app *cli.App, publish func(map[string][]health.Condition)) *greyhealth.Sampler {
	return greyhealth.NewSampler(app.Roots.Sysfs, app.Log.WithField("health", "grey"), a.Metrics, publish)
}
