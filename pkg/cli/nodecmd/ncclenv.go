package nodecmd

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
)

// NCCLEnv is `rdma-cdi nccl-env`: the NCCL settings for this node.
func NCCLEnv(app *cli.App) *cobra.Command {
	var format string
	var devices []string
	cmd := &cobra.Command{
		Use:   "nccl-env",
		Short: "Print the NCCL settings computed for this node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := app.Discover()
			if err != nil {
				return err
			}
			if len(res.Node.Devices) == 0 {
				app.Log.Info("no RDMA devices found: NCCL will use sockets")
			}
			for _, name := range devices {
				if _, ok := res.Node.DeviceByName(name); !ok {
					return fmt.Errorf("unknown RDMA device %q (known: %s)", name, strings.Join(res.Node.DeviceNames(), ", "))
				}
			}
			settings := nccl.Compute(res.Node, app.Config.NCCL, nccl.Scope{Devices: devices})
			for _, w := range settings.Warnings {
				app.Log.Warn(w)
			}
			out, err := nccl.Format(settings.Vars, format)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(app.Stdout, out)
			return err
		},
	}
	cmd.Flags().StringVar(&format, "format", "shell", "output format: "+strings.Join(nccl.Formats, ", "))
	cmd.Flags().StringSliceVar(&devices, "devices", nil, "compute for these RDMA devices only (as a container given them would see)")
	return cmd
}
