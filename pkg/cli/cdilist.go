package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// newCDICommand is the `cdi` parent: commands about the CDI specs on the
// node as the engines read them.
func newCDICommand(app *App) *cobra.Command {
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

func newCDIListCommand(app *App) *cobra.Command {
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

// cdiListing is what the CDI cache made of some spec dirs.
type cdiListing struct {
	devices []cdiListed
	// specErrors are per spec file, sorted by path.
	specErrors []cdiSpecError
	dirErrors  []string
}

type cdiListed struct {
	name, version, path string
}

type cdiSpecError struct {
	path   string
	vendor string // the kind's vendor, as far as it can be read; "" if unknown
	errs   []error
}

func readCDI(dirs []string) (cdiListing, error) {
	var l cdiListing
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if cache == nil {
		return l, fmt.Errorf("reading CDI spec dirs %s: %w", strings.Join(dirs, ", "), err)
	}
	for _, name := range cache.ListDevices() {
		d := cdiListed{name: name}
		if dev := cache.GetDevice(name); dev != nil && dev.GetSpec() != nil {
			d.version = dev.GetSpec().Version
			d.path = dev.GetSpec().GetPath()
		}
		l.devices = append(l.devices, d)
	}
	for path, errs := range cache.GetErrors() {
		l.specErrors = append(l.specErrors, cdiSpecError{path: path, vendor: specVendor(path), errs: errs})
	}
	slices.SortFunc(l.specErrors, func(a, b cdiSpecError) int { return strings.Compare(a.path, b.path) })
	for dir, err := range cache.GetSpecDirErrors() {
		if !errors.Is(err, os.ErrNotExist) {
			l.dirErrors = append(l.dirErrors, fmt.Sprintf("spec dir %s: %v", dir, err))
		}
	}
	slices.Sort(l.dirErrors)
	return l, nil
}

// specVendor reads the vendor of a spec file the CDI library rejected: the
// part of its kind before "/", read leniently (JSON is YAML); failing that,
// the "<vendor>-<class>.<ext>" file name generate writes. "" when neither
// says.
func specVendor(path string) string {
	if data, err := os.ReadFile(path); err == nil {
		var head struct {
			Kind string `yaml:"kind"`
		}
		if yaml.Unmarshal(data, &head) == nil && head.Kind != "" {
			vendor, _, _ := strings.Cut(head.Kind, "/")
			return vendor
		}
	}
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	if i := strings.LastIndex(base, "-"); i > 0 {
		return base[:i]
	}
	return ""
}

// listCDI prints the devices on stdout and the errors on stderr, and fails
// when a spec of vendor is broken.
func listCDI(stdout, stderr io.Writer, dirs []string, vendor string, long bool) error {
	l, err := readCDI(dirs)
	if err != nil {
		return err
	}
	if long {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "DEVICE\tCDI\tSPEC")
		for _, d := range l.devices {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", d.name, d.version, d.path)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	} else {
		for _, d := range l.devices {
			if _, err := fmt.Fprintln(stdout, d.name); err != nil {
				return err
			}
		}
	}
	for _, e := range l.dirErrors {
		fmt.Fprintln(stderr, "warning:", e)
	}
	var ours []string
	for _, se := range l.specErrors {
		for _, err := range se.errs {
			fmt.Fprintf(stderr, "error: %s: %v\n", se.path, err)
		}
		if vendor != "" && se.vendor == vendor {
			ours = append(ours, se.path)
		}
	}
	if len(ours) > 0 {
		return fmt.Errorf("%d CDI spec(s) of vendor %s have errors, their devices are not visible to container engines: %s",
			len(ours), vendor, strings.Join(ours, ", "))
	}
	n := 0
	for _, d := range l.devices {
		if strings.HasPrefix(d.name, vendor+"/") {
			n++
		}
	}
	if vendor != "" && n == 0 {
		fmt.Fprintf(stderr, "warning: no CDI devices of vendor %s in %s (run `rdma-cdi generate`)\n", vendor, strings.Join(dirs, ", "))
	}
	return nil
}
