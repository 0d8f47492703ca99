package nodecmd

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/rdma-cdi/rdma-cdi/pkg/cdilist"
	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
)

// CDI is the `cdi` parent: commands about the CDI specs on the
// node as the engines read them.
func CDI(app *cli.App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cdi",
		Short: "Inspect the CDI specs the container engines read",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(newCDIListCommand(app))
	return cmd
}

func newCDIListCommand(app *cli.App) *cobra.Command {
	var dirs specDirList
	var long bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the CDI device names the engines see, and the errors of broken specs",
		Long: `List the fully qualified CDI device names (VENDOR/CLASS=NAME) found in the spec
directories, read through the CDI library's cache as engines read them: a spec
the library rejects, or a device defined at the same priority in two files, is
not visible to any engine. Older engines are stricter about versions (podman 4.3
reads only cdiVersion <= 0.5.0): --long shows each device's cdiVersion.

Errors of every spec are printed on stderr. The exit status is non-zero when a
spec of this node's vendor (cdi.vendor) has an error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			read := dirs.dirs
			if len(read) == 0 {
				read = slices.Clone(cdi.DefaultSpecDirs)
				if own := app.Config.CDI.SpecDir; own != "" && !slices.Contains(read, filepath.Clean(own)) {
					fmt.Fprintf(app.Stderr, "warning: cdi.spec_dir %s is not a default CDI spec dir (%s): engines read it only when configured to; pass --spec-dir to list it\n",
						own, strings.Join(read, ", "))
				}
			}
			return listCDI(app.Stdout, app.Stderr, read, app.Config.CDI.Vendor, long)
		},
	}
	f := cmd.Flags()
	f.Var(&dirs, "spec-dir", "spec directory to read, repeatable, lowest priority first (default "+strings.Join(cdi.DefaultSpecDirs, ", ")+")")
	f.BoolVarP(&long, "long", "l", false, "also print each device's cdiVersion and spec file")
	return cmd
}

// specDirList is the repeatable --spec-dir of `cdi list`. It shadows the
// global --spec-dir (config cdi.spec_dir, one dir), so it presents itself as
// a string flag holding the last dir given: the config code reads it as
// such, and generate-side settings stay consistent.
type specDirList struct{ dirs []string }

func (l *specDirList) Set(v string) error {
	if v == "" {
		return errors.New("empty spec dir")
	}
	l.dirs = append(l.dirs, v)
	return nil
}

func (l *specDirList) String() string {
	if len(l.dirs) == 0 {
		return ""
	}
	return l.dirs[len(l.dirs)-1]
}

func (l *specDirList) Type() string { return "string" }

// listCDI prints the devices on stdout and the errors on stderr, and fails
// when a spec of vendor is broken.
func listCDI(stdout, stderr io.Writer, dirs []string, vendor string, long bool) error {
	l, err := cdilist.Read(dirs)
	if err != nil {
		return err
	}
	if err := writeDevices(stdout, l.Devices, long); err != nil {
		return err
	}
	for _, e := range l.DirErrors {
		fmt.Fprintln(stderr, "warning:", e)
	}
	for _, se := range l.SpecErrors {
		for _, err := range se.Errs {
			fmt.Fprintf(stderr, "error: %s: %v\n", se.Path, err)
		}
	}
	if ours := l.Broken(vendor); len(ours) > 0 {
		return fmt.Errorf("%d CDI spec(s) of vendor %s have errors, their devices are not visible to container engines: %s",
			len(ours), vendor, strings.Join(ours, ", "))
	}
	if vendor != "" && l.Count(vendor) == 0 {
		fmt.Fprintf(stderr, "warning: no CDI devices of vendor %s in %s (run `rdma-cdi generate`)\n", vendor, strings.Join(dirs, ", "))
	}
	return nil
}

// writeDevices prints one device name a line, or with long a table with
// each device's cdiVersion and spec file.
func writeDevices(w io.Writer, devices []cdilist.Device, long bool) error {
	if !long {
		for _, d := range devices {
			if _, err := fmt.Fprintln(w, d.Name); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tCDI\tSPEC")
	for _, d := range devices {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", d.Name, d.Version, d.Path)
	}
	return tw.Flush()
}
