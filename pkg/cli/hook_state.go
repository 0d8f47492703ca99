package cli

import (
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	ch "github.com/rdma-cdi/rdma-cdi/pkg/hooks"
)

func init() {
	registerHook(newLDCacheHook)
	registerHook(newNCCLConfHook)
	registerHook(newMemlockHook)
}

// stateHook is a hook that gets the OCI state on stdin: it loads the
// container (refusing a state that points elsewhere), logs to stderr and
// the host log file, and runs fn.
func stateHook(app *App, name, short string, fn func(cmd *cobra.Command, c *ch.Container, log *logrus.Entry) error) *cobra.Command {
	return &cobra.Command{
		Use:   name,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, closer := ch.NewLogger(name, app.Stderr, app.Config.Hooks.LogFile, app.Log.GetLevel())
			defer closer.Close()
			return ch.Run(log, cmd.InOrStdin(), func(c *ch.Container, log *logrus.Entry) error {
				return fn(cmd, c, log)
			})
		},
	}
}

func newLDCacheHook(app *App) *cobra.Command {
	var opts ch.LDCacheOptions
	cmd := stateHook(app, "update-ldcache",
		"createContainer: add the injected library dirs to the container's linker cache (host ldconfig, chrooted)",
		func(cmd *cobra.Command, c *ch.Container, log *logrus.Entry) error {
			return ch.UpdateLDCache(cmd.Context(), c, opts, log)
		})
	cmd.Flags().StringArrayVar(&opts.Folders, "folder", nil, "library dir inside the container to add to its linker cache; repeatable")
	cmd.Flags().StringVar(&opts.Ldconfig, "ldconfig-path", ch.DefaultLdconfig, "the host's ldconfig (never the container's)")
	return cmd
}

func newNCCLConfHook(app *App) *cobra.Command {
	return stateHook(app, "nccl-conf",
		"createContainer: write the container's NCCL defaults to its /etc/nccl.conf (the process env still wins)",
		func(_ *cobra.Command, c *ch.Container, log *logrus.Entry) error {
			return ch.WriteNCCLConf(c, ch.NCCLConfOptions{NCCL: app.Config.NCCL, SysfsRoot: app.SysfsRoot, DevRoot: app.DevRoot}, log)
		})
}

func newMemlockHook(app *App) *cobra.Command {
	return stateHook(app, "memlock",
		"createRuntime: raise RLIMIT_MEMLOCK of the container's init (unless config.json sets it)",
		func(_ *cobra.Command, c *ch.Container, log *logrus.Entry) error {
			// Validated when the config was loaded.
			want, err := config.ParseMemlock(app.Config.Hooks.Memlock)
			if err != nil {
				return err
			}
			return ch.Memlock(c, want, log)
		})
}
