package agentcmd

import (
	"context"
	"errors"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
	"github.com/rdma-cdi/rdma-cdi/pkg/watch"
)

// Watch is `rdma-cdi watch`: keeps the spec current as the node changes.
func Watch(app *cli.App) *cobra.Command {
	var flags WatchFlags
	cmd := &cobra.Command{
		Use:   "watch",
		Short: cli.WatchShort,
		Long: `watch writes the spec at start, then regenerates it on netlink link/address/route
events (in --netns if given), kernel uevents of the infiniband, infiniband_verbs and
infiniband_mad subsystems, and every watch.rescan_interval. Bursts are debounced
(watch.debounce). The file is rewritten, atomically, only when its bytes change, and
each rewrite is logged with what changed. A failed write keeps the last good spec and
is retried with backoff. SIGHUP reloads the config file; SIGTERM/SIGINT stop.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agent, err := flags.NewAgent(app, cmd, "watch")
			if err != nil {
				return err
			}
			app.Log.Infof("watching RDMA devices under %s (rescan every %s, debounce %s)",
				app.Roots.Sysfs, app.Config.Watch.RescanInterval.Duration, app.Config.Watch.Debounce.Duration)
			return agent.Run(cmd.Context())
		},
	}
	flags.Register(cmd.Flags())
	return cmd
}

// WatchFlags are the flags of every command that keeps the spec current
// (watch, device-plugin).
type WatchFlags struct {
	output, hookBinary, readyFile string
	removeStale, removeOnExit     bool
	noNetlink, noUevents          bool
}

func (w *WatchFlags) Register(f *pflag.FlagSet) {
	f.StringVarP(&w.output, "output", "o", "", "spec file to keep current (default: <spec-dir>/<vendor>-<class>.<format>)")
	f.StringVar(&w.hookBinary, "hook-binary", "", "the hook binary's path on the host, for the spec's hooks (default: rdma-cdi-hook beside this executable, else this executable)")
	f.StringVar(&w.readyFile, "ready-file", "", "file created after the first good write and removed on exit (readiness probe)")
	f.BoolVar(&w.removeStale, "remove-stale", true, "remove the spec when the node has no RDMA device left")
	f.BoolVar(&w.removeOnExit, "remove-on-exit", false, "remove the spec on SIGTERM/SIGINT (an uninstalled agent leaves none behind; new containers get no devices until an agent runs again)")
	f.BoolVar(&w.noNetlink, "no-netlink", false, "do not listen to netlink link/address/route events")
	f.BoolVar(&w.noUevents, "no-uevents", false, "do not listen to kernel uevents")
}

// Service builds the watch service for cmd's command line; a reload reads
// the config file again under the same flags.
func (w *WatchFlags) Service(app *cli.App, cmd *cobra.Command) *watch.Service {
	return &watch.Service{
		Config: app.Config,
		LoadConfig: func() (config.Config, error) {
			cfg, err := config.Load(app.ConfigPath)
			if err != nil {
				return cfg, err
			}
			return cfg, config.ApplyFlags(cmd.Flags(), &cfg)
		},
		NewGenerator: func(cfg config.Config) (*specgen.Generator, error) {
			gen, err := specgen.CommandLine{
				Config: app.Config, Roots: app.Roots, SpecHostRoot: app.SpecHostRoot, Log: app.Log,
				GlobalFlags: cmd.Root().PersistentFlags(),
			}.Generator(w.hookBinary)
			if err != nil {
				return nil, err
			}
			gen.Config, gen.RemoveStale = cfg, w.removeStale
			return gen, nil
		},
		Output: w.output, NetNS: app.Roots.NetNS, NoNetlink: w.noNetlink, NoUevents: w.noUevents,
		ReadyFile: w.readyFile, RemoveOnExit: w.removeOnExit, Log: app.Log,
	}
}

// RunBesideWatch runs the watch service and servers fed by its
// generations (svc.Observe) until SIGTERM or SIGINT, or until one fails,
// which stops the others.
func RunBesideWatch(ctx context.Context, svc *watch.Service, servers ...func(context.Context) error) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var wg sync.WaitGroup
	serveErrs := make([]error, len(servers))
	for i, serve := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if serveErrs[i] = serve(ctx); serveErrs[i] != nil {
				stop()
			}
		}()
	}
	err := svc.Run(ctx)
	stop()
	wg.Wait()
	if err == nil {
		err = errors.Join(serveErrs...)
	}
	return err
}
