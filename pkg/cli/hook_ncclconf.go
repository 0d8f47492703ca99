package cli

import (
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	ch "github.com/rdma-cdi/rdma-cdi/pkg/hooks"
)

func init() { registerHook(newNCCLConfHook) }

func newNCCLConfHook(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "nccl-conf",
		Short: "createContainer: write the container's NCCL defaults to its /etc/nccl.conf (the process env still wins)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, closer := ch.NewLogger("nccl-conf", app.Stderr, app.Config.Hooks.LogFile, app.Log.GetLevel())
			defer closer.Close()
			return ch.Run(log, cmd.InOrStdin(), func(c *ch.Container, log *logrus.Entry) error {
				return ch.WriteNCCLConf(c, ch.NCCLConfOptions{
					NCCL: app.Config.NCCL, SysfsRoot: app.SysfsRoot, DevRoot: app.DevRoot,
				}, log)
			})
		},
	}
}
