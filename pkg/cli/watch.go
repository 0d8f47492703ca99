package cli

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
	"github.com/rdma-cdi/rdma-cdi/pkg/specio"
	"github.com/rdma-cdi/rdma-cdi/pkg/watch"
)

func newWatchCommand(app *App) *cobra.Command {
	var output, hookBinary, readyFile string
	var removeStale, noNetlink, noUevents bool
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Keep the CDI spec current: rewrite it when devices, GIDs, addresses or libraries change",
		Long: `watch writes the spec at start, then regenerates it on netlink link/address/route
events (in --netns if given), kernel uevents of the infiniband, infiniband_verbs and
infiniband_mad subsystems, and every watch.rescan_interval. Bursts are debounced
(watch.debounce). The file is rewritten, atomically, only when its bytes change, and
each rewrite is logged with what changed. A failed write keeps the last good spec and
is retried with backoff. SIGHUP reloads the config file; SIGTERM/SIGINT stop.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()

			var mu sync.Mutex
			gen, err := app.Generator(cmd.Root().PersistentFlags(), hookBinary)
			if err != nil {
				return err
			}
			gen.RemoveStale = removeStale
			var lastPath string // where the last good generation put the spec
			generate := func(context.Context) (watch.State, error) {
				// reload swaps in a new generator and never changes this one.
				mu.Lock()
				g := gen
				mu.Unlock()
				out, err := g.Generate(output)
				if err == nil {
					retireMovedSpec(lastPath, out.Path, app.Log)
					lastPath = out.Path
				}
				return stateOf(out), err
			}
			reload := func() error {
				cfg, err := config.Load(app.ConfigPath)
				if err != nil {
					return err
				}
				if err := config.ApplyFlags(cmd.Flags(), &cfg); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				app.Config = cfg
				next, err := app.Generator(cmd.Root().PersistentFlags(), hookBinary)
				if err != nil {
					return err
				}
				next.RemoveStale = removeStale
				gen = next
				return nil
			}

			events := make(chan watch.Event, 1024)
			if !noNetlink {
				if err := watch.Netlink(ctx, app.NetNS, events, app.Log); err != nil {
					app.Log.Warnf("no netlink events (%v); relying on the periodic rescan", err)
				}
			}
			if !noUevents {
				if err := watch.Uevents(ctx, nil, events, app.Log); err != nil {
					app.Log.Warnf("no kernel uevents (%v); relying on the periodic rescan", err)
				}
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			go func() {
				for {
					select {
					case <-ctx.Done():
						return
					case <-hup:
						select {
						case events <- watch.Event{Source: "signal", Detail: "SIGHUP", Reload: true}:
						case <-ctx.Done():
							return
						}
					}
				}
			}()

			mu.Lock()
			w := app.Config.Watch
			mu.Unlock()
			app.Log.Infof("watching RDMA devices under %s (rescan every %s, debounce %s)", app.SysfsRoot, w.RescanInterval.Duration, w.Debounce.Duration)
			loop := &watch.Loop{
				Generate: generate, Reload: reload, Events: events,
				Debounce: w.Debounce.Duration, Rescan: w.RescanInterval.Duration,
				ReadyFile: readyFile, Log: app.Log,
			}
			return loop.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "", "spec file to keep current (default: <spec-dir>/<vendor>-<class>.<format>)")
	f.StringVar(&hookBinary, "hook-binary", "", "rdma-cdi's path on the host, for the spec's hooks (default: this executable)")
	f.StringVar(&readyFile, "ready-file", "", "file created after the first good write and removed on exit (readiness probe)")
	f.BoolVar(&removeStale, "remove-stale", true, "remove the spec when the node has no RDMA device left")
	f.BoolVar(&noNetlink, "no-netlink", false, "do not listen to netlink link/address/route events")
	f.BoolVar(&noUevents, "no-uevents", false, "do not listen to kernel uevents")
	return cmd
}

// stateOf keeps what the watch loop compares between generations.
func stateOf(o specgen.Outcome) watch.State {
	return watch.State{Path: o.Path, Changed: o.Changed, Removed: o.Removed, Node: o.Node, Stack: o.Stack, NCCL: o.NCCL}
}

// retireMovedSpec removes the spec this watch wrote at oldPath once a
// reload (spec_dir, vendor, class or format) has it write newPath: two
// specs of one kind would make every CDI lookup of it fail, and one of
// another kind would keep offering stale devices. The new spec is already
// in place, so engines are never left without one.
func retireMovedSpec(oldPath, newPath string, log *logrus.Logger) {
	if oldPath == "" || oldPath == newPath || oldPath == "-" {
		return
	}
	if err := specio.Remove(oldPath); err != nil {
		log.Warnf("spec moved to %s; the previous spec %s could not be removed: %v", newPath, oldPath, err)
		return
	}
	log.Infof("spec moved to %s; the previous spec %s removed", newPath, oldPath)
}
