//go:build !hookonly

package cli

import (
	"fmt"
	"io"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/doctor"
	"github.com/rdma-cdi/rdma-cdi/pkg/specio"
)

func newDoctorCommand(app *App) *cobra.Command {
	var asJSON bool
	var output, hookBinary string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this node before an RDMA job: devices, nodes, netns mode, rdma-core, memlock, engines' CDI, the spec",
		Long: `doctor prints one line per check: "PASS|WARN|FAIL name: detail (fix: hint)".
It exits non-zero only when a check FAILs. --json prints one document instead.
The spec is checked at --output (default: the config's spec path), loaded with the
CDI library as engines do, and compared with what generate would write now (use the
same --hook-binary and flags as the generator).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			gen, err := app.Generator(cmd.Root().PersistentFlags(), hookBinary)
			if err != nil {
				return err
			}
			quiet := *gen
			// Render warnings are doctor's findings, not log lines.
			quiet.Log = logrus.New()
			quiet.Log.SetOutput(io.Discard)
			specPath := output
			if specPath == "" {
				c := app.Config.CDI
				specPath = specio.DefaultPath(c.SpecDir, c.Vendor, c.Class, c.Format)
			}
			facts := doctor.Gather(cmd.Context(), doctor.Options{
				Roots:  app.Roots,
				Config: app.Config, ConfigPath: app.ConfigPath, ConfigErr: app.ConfigErr, ConfigWarnings: app.configWarnings,
				SpecPath: specPath,
				Render: func() ([]byte, error) {
					out, err := quiet.Generate("-")
					return out.Data, err
				},
			})
			results := doctor.Check(facts)
			if asJSON {
				err = doctor.WriteJSON(app.Stdout, results)
			} else {
				err = doctor.WriteText(app.Stdout, results)
			}
			if err != nil {
				return err
			}
			if s := doctor.Summarize(results); s.Fail > 0 {
				return fmt.Errorf("doctor: %d check(s) failed, %d warning(s)", s.Fail, s.Warn)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the checks as JSON")
	f.StringVarP(&output, "output", "o", "", "spec file to check (default: <spec-dir>/<vendor>-<class>.<format>)")
	f.StringVar(&hookBinary, "hook-binary", "", "the hook binary's path in the spec's hooks, for the currency check (default: as generate)")
	return cmd
}
