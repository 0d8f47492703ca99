package cli

import (
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	ch "github.com/rdma-cdi/rdma-cdi/pkg/hooks"
)

func init() { registerHook(newLDCacheHook) }

func newLDCacheHook(app *App) *cobra.Command {
	var opts ch.LDCacheOptions
	cmd := &cobra.Command{
		Use:   "update-ldcache",
		Short: "createContainer: add the injected library dirs to the container's linker cache (host ldconfig, chrooted)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, closer := ch.NewLogger("update-ldcache", app.Stderr, app.Config.Hooks.LogFile, app.Log.GetLevel())
			defer closer.Close()
			return ch.Run(log, cmd.InOrStdin(), func(c *ch.Container, log *logrus.Entry) error {
				return ch.UpdateLDCache(cmd.Context(), c, opts, log)
			})
		},
	}
	cmd.Flags().StringArrayVar(&opts.Folders, "folder", nil, "library dir inside the container to add to its linker cache; repeatable")
	cmd.Flags().StringVar(&opts.Ldconfig, "ldconfig-path", ch.DefaultLdconfig, "the host's ldconfig (never the container's)")
	return cmd
}
