package cli

import (
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	ch "github.com/rdma-cdi/rdma-cdi/pkg/hooks"
)

func init() { registerHook(newMemlockHook) }

func newMemlockHook(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "memlock",
		Short: "createRuntime: raise RLIMIT_MEMLOCK of the container's init (unless config.json sets it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, closer := ch.NewLogger("memlock", app.Stderr, app.Config.Hooks.LogFile, app.Log.GetLevel())
			defer closer.Close()
			want, err := config.ParseMemlock(app.Config.Hooks.Memlock)
			if err != nil {
				log.Errorf("ch.memlock: %v", err)
				return err
			}
			return ch.Run(log, cmd.InOrStdin(), func(c *ch.Container, log *logrus.Entry) error {
				return ch.Memlock(c, want, log)
			})
		},
	}
}
