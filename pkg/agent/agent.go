// Package agent assembles what the long-running commands (watch,
// device-plugin, dra-driver) share: the watch service, the metrics
// endpoint with the hooks' reports, the stale-mount watch and the grey
// health sampler, from their command line's plain values. The commands
// (pkg/cli/agentcmd, pkg/cli/dracmd) parse flags and call it.
package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/greyhealth"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/hookevents"
	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/sandboxlist"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
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

	cl       CommandLine
	features *featureFile
	// servers serve the metrics endpoint and the probes, as configured.
	servers []func(context.Context) error
	// watchMounts ends the agent when a host path it mounts goes stale.
	watchMounts func(context.Context) error
}

// CommandLine is what an agent takes from the command that starts it.
type CommandLine struct {
	specgen.CommandLine
	ConfigPath string
	Version    string
	// Flags are the command's own flags, applied again over the config
	// file at every reload.
	Flags *pflag.FlagSet
}

// NewAgent builds the watch service for the command line cl and binds the
// metrics address and the hooks' socket, so that one in use fails the
// start.
func (w *WatchFlags) NewAgent(cl CommandLine, mode string) (*Agent, error) {
	a := &Agent{Service: w.service(cl), cl: cl, watchMounts: watchStaleMounts(cl), features: &featureFile{log: cl.Log}}
	if pn := cl.Config.PodNetwork; !pn.Enabled {
		// The hooks check nothing with pod networking off: they read
		// pod_network.enabled from the config file, not the list. A former
		// agent's list goes, so that it misleads no one and a later turn
		// on starts from the agent's own (pkg/podnetwork/sandboxlist).
		if err := sandboxlist.Remove(pn.StateDir); err != nil {
			cl.Log.Warnf("pod network is off: %v", err)
		}
	} else if w := hooksMissPodNetwork(pn, cl.ConfigPath); w != "" {
		cl.Log.Warn(w)
	}
	addr, probeAddr := cl.Config.Metrics.Address, cl.Config.Metrics.ProbeAddress
	if addr == "" && probeAddr == "" {
		return a, nil
	}
	proc := hostProc(cl.Roots.Host)
	exp := metrics.New(metrics.Options{
		Sysfs: cl.Roots.Sysfs, Proc: proc, Mode: mode, Version: cl.Version,
		Rescan: cl.Config.Watch.RescanInterval.Duration,
	})
	if addr != "" {
		serve, err := metricsServer(cl, exp, proc)
		if err != nil {
			return nil, err
		}
		a.servers = append(a.servers, serve)
	}
	if probeAddr != "" {
		l, err := metrics.Listen(probeAddr)
		if err != nil {
			return nil, err
		}
		cl.Log.Infof("probes on http://%s/healthz and /readyz", l.Addr())
		a.servers = append(a.servers, func(ctx context.Context) error { return exp.ServeProbes(ctx, l) })
	}
	a.Metrics = exp
	a.Service.Report = exp.Generation
	return a, nil
}

// metricsServer binds the metrics address and the hooks' socket, and
// returns what serves them.
func metricsServer(cl CommandLine, exp *metrics.Exporter, proc string) (func(context.Context) error, error) {
	guard, err := metricsGuard(cl)
	if err != nil {
		return nil, err
	}
	l, err := metrics.Listen(cl.Config.Metrics.Address)
	if err != nil {
		return nil, err
	}
	var events *hookevents.Listener
	if sock := cl.Config.Metrics.HookSocket; sock != "" {
		if events, err = hookevents.Listen(sock); err != nil {
			l.Close()
			return nil, err
		}
		cl.Log.Infof("container hooks report to %s", sock)
		warnIfLivenessUnknown(cl, proc)
	}
	cl.Log.Infof("metrics on http://%s/metrics (auth %s; probes /healthz, /readyz, open)", l.Addr(), cl.Config.Metrics.Auth)
	return func(ctx context.Context) error {
		if events != nil {
			go func() {
				err := events.Receive(ctx, exp.HookOutcome, func(err error) {
					exp.HookRejected(err)
					cl.Log.Debugf("hook report refused: %v", err)
				})
				if err != nil {
					cl.Log.Errorf("%v; hook reports are no longer received", err)
				}
			}()
		}
		return exp.Serve(ctx, l, guard)
	}, nil
}

// hooksMissPodNetwork says, when it is so, that the container hooks will
// not hold back the pods this agent gives interfaces to: they take
// pod_network.enabled and state_dir from the config file alone (the spec
// repeats no pod_network flag), and the agent's come from its flags too.
func hooksMissPodNetwork(agent config.PodNetwork, configPath string) string {
	file, _, err := config.LoadForContainers(configPath)
	switch {
	case err != nil:
		return ""
	case !file.PodNetwork.Enabled:
		return fmt.Sprintf("pod networking is on by a flag, but not in %s, which the container hooks read: they will not hold back a pod's containers until its sandbox has its interfaces; set [pod_network] enabled = true there", configPath)
	case file.PodNetwork.StateDir != agent.StateDir:
		return fmt.Sprintf("pod_network.state_dir is %s for this agent but %s in %s, which the container hooks read: they will refuse every pod's containers that hold an HCA; set it there", agent.StateDir, file.PodNetwork.StateDir, configPath)
	}
	return ""
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
func warnIfLivenessUnknown(cl CommandLine, proc string) {
	cgroups := filepath.Join(cl.Roots.Sysfs, "fs/cgroup")
	for _, hierarchy := range []string{"", "unified", "pids", "systemd"} {
		if _, err := os.Stat(filepath.Join(cgroups, hierarchy, "cgroup.procs")); err == nil || proc != "" {
			return
		}
	}
	cl.Log.Warnf("no cgroup hierarchy under %s and no host /proc under %s: hooked containers cannot be told alive, and are not listed as holders", cgroups, cl.Roots.Host)
}

// Run runs the service, the metrics endpoint and servers fed by the
// service's generations until SIGTERM or SIGINT, or until one fails. Each
// good generation rewrites the NFD feature file (topology.features_file)
// before the command's own Observe sees it.
func (a *Agent) Run(ctx context.Context, servers ...func(context.Context) error) error {
	observe := a.Service.Observe
	a.Service.Observe = func(out specgen.Outcome, cfg config.Config) {
		if err := a.features.update(out.Node, cfg, time.Now()); err != nil {
			a.cl.Log.Warnf("NFD feature file: %v", err)
		}
		if observe != nil {
			observe(out, cfg)
		}
	}
	servers = append(servers, a.servers...)
	servers = append(servers, a.watchMounts)
	return RunBesideWatch(ctx, a.Service, servers...)
}

// NewGreySampler samples grey health under the agent's sysfs root for
// publish, which gets every change of the conditions, by HCA name; the
// metrics endpoint exports them.
func (a *Agent) NewGreySampler(publish func(map[string][]health.Condition)) *greyhealth.Sampler {
	return greyhealth.NewSampler(a.cl.Roots.Sysfs, a.cl.Log.WithField("health", "grey"), a.Metrics, publish)
}
