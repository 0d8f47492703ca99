package agentcmd

import (
	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/agent"
	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
)

// Watch is `rdma-cdi watch`: keeps the spec current as the node changes.
func Watch(app *cli.App) *cobra.Command {
	var flags agent.WatchFlags
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
			a, err := flags.NewAgent(commandLine(app, cmd), "watch")
			if err != nil {
				return err
			}
			app.Log.Infof("watching RDMA devices under %s (rescan every %s, debounce %s)",
				app.Roots.Sysfs, app.Config.Watch.RescanInterval.Duration, app.Config.Watch.Debounce.Duration)
			return a.Run(cmd.Context())
		},
	}
	flags.Register(cmd.Flags())
	return cmd
}

// commandLine is what the agent takes from cmd's command line.
func commandLine(app *cli.App, cmd *cobra.Command) agent.CommandLine {
	return agent.CommandLine{
		CommandLine: specgen.CommandLine{
			Config: app.Config, Roots: app.Roots, SpecHostRoot: app.SpecHostRoot, Log: app.Log,
			GlobalFlags: cmd.Root().PersistentFlags(),
		},
		ConfigPath: app.ConfigPath, Version: app.Version, Flags: cmd.Flags(),
	}
}
