package nodecmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/runtimewrap"
)

// Runtime is `rdma-cdi runtime`: the OCI runtime wrapper as a command.
func Runtime(app *cli.App) *cobra.Command {
	return &cobra.Command{
		Use:   "runtime -- [RUNC FLAGS] COMMAND [ARGS]",
		Short: "OCI runtime wrapper: on create, apply the container's RDMA request to BUNDLE/config.json, then exec the real runtime",
		Long: `Acts as an OCI runtime (runc's command line). On "create" (and "run") it edits
the bundle's config.json (--bundle/-b, default the working directory) for a
container that asked for RDMA, atomically, then execs the real runtime
(runtime.path, default runc from PATH, never this binary) with every argument
untouched. Other commands are exec'd at once. The same binary behaves so when
invoked as ` + runtimewrap.Name + ` (a symlink), with the config taken from $` + runtimewrap.EnvConfig + `.`,
		Args:                  cobra.ArbitraryArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			w := runtimewrap.Wrapper{Applier: applier(app), ConfigWarnings: app.ConfigWarnings(), Stderr: app.Stderr}
			if code := w.Run(args); code != 0 {
				return errSilentExit{code}
			}
			return nil
		},
	}
}

// errSilentExit carries an exit code for a failure already reported.
type errSilentExit struct{ code int }

func (e errSilentExit) Error() string { return fmt.Sprintf("exit status %d", e.code) }
