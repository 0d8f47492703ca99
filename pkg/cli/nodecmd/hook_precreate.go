package nodecmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/ociapply"
)

// Precreate is podman's precreate stage: the proposed config.json
// comes on stdin and what we print replaces it. A container that asked
// for nothing gets its input bytes back unchanged.
func Precreate(app *cli.App) *cobra.Command {
	return &cobra.Command{
		Use:   string(apis.HookPrecreate),
		Short: "podman precreate hook: apply the container's RDMA request to the config.json on stdin, print it on stdout",
		Long: `Reads the OCI config.json that podman proposes on stdin and prints the config to use
on stdout. A container asks for RDMA with ` + apis.EnvDevices + `=all|NAME,... in its env, the
annotation <vendor>/devices (same syntax) or cdi.k8s.io/* annotations naming <vendor>/<class>=NAME;
devices podman already injected (--device <vendor>/<class>=NAME) count as asked for. For those
the CDI edits are applied, CAP_IPC_LOCK added, RLIMIT_MEMLOCK set and the NCCL env added where
the user did not set it. Anything else is printed back byte for byte.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ociapply.LogToFile(app.Log, app.Config.Hooks.LogFile)
			app.ReportConfig(app.Log)
			in, err := io.ReadAll(cmd.InOrStdin())
			if err != nil {
				return fmt.Errorf("precreate: reading config.json from stdin: %w", err)
			}
			applier := applier(app)
			out, _, err := applier.Apply(in, "config.json on stdin")
			if err != nil {
				// podman shows only the exit status: the log file has the reason.
				app.Log.Errorf("precreate: %v", err)
				return fmt.Errorf("precreate: %w", err)
			}
			_, err = app.Stdout.Write(out)
			return err
		},
	}
}

// applier applies RDMA requests with the command line's config and roots.
func applier(a *cli.App) ociapply.Applier {
	return ociapply.Applier{
		Config: a.Config, ConfigErr: a.ConfigErr,
		Roots: a.Roots, Log: a.Log,
	}
}
