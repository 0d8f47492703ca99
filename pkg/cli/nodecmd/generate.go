package nodecmd

import (
	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
)

// Generate is `rdma-cdi generate`: the node's CDI spec, written when it changes.
func Generate(app *cli.App) *cobra.Command {
	var output, format, hookBinary string
	var removeStale bool
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Write the CDI spec for this node's RDMA devices (one device per HCA, plus all)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("format") {
				app.Config.CDI.Format = format
				if err := app.Config.Validate(); err != nil {
					return err
				}
			}
			gen, err := generator(app, cmd, hookBinary)
			if err != nil {
				return err
			}
			gen.RemoveStale = removeStale
			out, err := gen.Generate(output)
			if err != nil {
				return err
			}
			switch {
			case output == "-":
				_, err = app.Stdout.Write(out.Data)
			case out.Changed:
				app.Log.Infof("wrote %s: %d CDI devices, cdiVersion %s", out.Path, len(out.Spec.Devices), out.Spec.Version)
			case out.Spec != nil:
				app.Log.Infof("%s is up to date", out.Path)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "", "spec file to write, or - for stdout (default: <spec-dir>/<vendor>-<class>.<format>)")
	f.StringVar(&format, "format", "yaml", "spec format: yaml or json (config: cdi.format)")
	f.StringVar(&hookBinary, "hook-binary", "", "the hook binary's path on the host, for the spec's hooks (default: rdma-cdi-hook beside this executable, else this executable)")
	f.BoolVar(&removeStale, "remove-stale", false, "on a node without RDMA devices, remove the spec written earlier")
	return cmd
}

// generator is the spec generator for cmd's command line
// (specgen.CommandLine).
func generator(app *cli.App, cmd *cobra.Command, hookBinary string) (*specgen.Generator, error) {
	return specgen.CommandLine{
		Config: app.Config, Roots: app.Roots, SpecHostRoot: app.SpecHostRoot, Log: app.Log,
		GlobalFlags: cmd.Root().PersistentFlags(),
	}.Generator(hookBinary)
}
