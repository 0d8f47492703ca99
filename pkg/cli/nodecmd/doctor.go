package nodecmd

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/doctor"
	"github.com/rdma-cdi/rdma-cdi/pkg/greyhealth"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/hooks"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/specio"
)

// Doctor is `rdma-cdi doctor`: the checks an operator runs before a job.
func Doctor(app *cli.App) *cobra.Command {
	var asJSON bool
	var output, hookBinary string
	var sampleInterval time.Duration
	var target containerFlags
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this node before an RDMA job: devices, nodes, netns mode, rdma-core, memlock, links, engines' CDI, the spec",
		Long: `doctor prints one line per check: "PASS|WARN|FAIL name: detail (fix: hint)".
It exits non-zero only when a check FAILs. --json prints one document instead.
The spec is checked at --output (default: the config's spec path), loaded with the
CDI library as engines do, and compared with what generate would write now (use the
same --hook-binary and flags as the generator).

With --rootfs DIR (an image's root: podman image mount, ctr snapshot mounts) or --pid PID
(a running container's process), doctor also says which RDMA user space that image or
container gets from the hook, the image's own or the host's, and why, as the hook decides
it: --env and --annotation give the container's (a running container's env is read from
its process when no --env is given).

The grey-health check reads every port's counters and rate and each HCA's PCIe
link twice, --sample-interval apart, and judges them by the [health] section as
the agents do: a PCIe link below its maximum, a port below its expected rate or
its peers of the same type, and an error counter or link_downed that moved.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			gen, err := generator(app, cmd, hookBinary)
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
			container, closeRoot, err := target.open()
			if err != nil {
				return err
			}
			defer closeRoot()
			reader := greyhealth.NewReader(app.Roots.Sysfs)
			facts := doctor.Gather(cmd.Context(), doctor.Options{
				Container: container,
				Roots:     app.Roots,
				Config:    app.Config, ConfigPath: app.ConfigPath, ConfigErr: app.ConfigErr, ConfigWarnings: app.ConfigWarnings(),
				SpecPath: specPath,
				Grey: &doctor.GreyOptions{
					Interval: sampleInterval, Policy: greyhealth.Policy(app.Config.Health),
					Read: func(node model.Node, at time.Time) (health.Sample, []error) {
						return greyhealth.Sample(reader, node, at)
					},
				},
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
	f.DurationVar(&sampleInterval, "sample-interval", 2*time.Second, "read the ports' counters twice this far apart for the grey-health check (0: once, counters not compared)")
	target.register(f)
	return cmd
}

// containerFlags name an image or container for doctor's user-space check.
type containerFlags struct {
	rootfs      string
	pid         int
	env         []string
	annotations map[string]string
}

func (c *containerFlags) register(f *pflag.FlagSet) {
	f.StringVar(&c.rootfs, "rootfs", "", "an image's root directory: tell which RDMA user space it gets")
	f.IntVar(&c.pid, "pid", 0, "a running container's process (host pid): tell which RDMA user space it gets")
	f.StringArrayVar(&c.env, "env", nil, "the container's env, NAME=VALUE (LD_LIBRARY_PATH, "+apis.EnvUserSpace+"); repeatable")
	f.StringToStringVar(&c.annotations, "annotation", nil, "the container's annotations, KEY=VALUE ("+apis.AnnotationUserSpace+")")
}

// open returns the container to check (nil when none was named) and what
// closes its root. The root is read in-root, as the hook reads it.
func (c *containerFlags) open() (*doctor.Container, func(), error) {
	dir, target := c.rootfs, "image root "+c.rootfs
	switch {
	case c.rootfs != "" && c.pid != 0:
		return nil, nil, fmt.Errorf("doctor: --rootfs and --pid name two containers; give one")
	case c.pid != 0:
		dir, target = fmt.Sprintf("/proc/%d/root", c.pid), fmt.Sprintf("container process %d", c.pid)
		if c.env == nil {
			environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", c.pid))
			if err != nil {
				return nil, nil, fmt.Errorf("doctor: the env of container process %d: %w", c.pid, err)
			}
			c.env = strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00")
		}
	case c.rootfs == "":
		return nil, func() {}, nil
	}
	root, err := hooks.OpenRoot(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("doctor: %s: %w", target, err)
	}
	return &doctor.Container{Target: target, PID: c.pid, Root: root.ImageView(), Env: c.env, Annotations: c.annotations},
		func() { root.Close() }, nil
}
