package nodecmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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
			gen, err := Generator(app, cmd.Root().PersistentFlags(), hookBinary)
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

// Generator returns a spec generator for this command line. The hooks get
// the same roots, config file and config flags, so a fixture node stays a
// fixture node inside the hooks.
func Generator(a *cli.App, flags *pflag.FlagSet, hookBinary string) (*specgen.Generator, error) {
	if hookBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding this executable for the spec's hooks: %w", err)
		}
		hookBinary = defaultHookBinary(exe)
	}
	return &specgen.Generator{
		Config: a.Config, Roots: a.Roots, SpecHostRoot: a.SpecHostRoot,
		HookBinary: filepath.Clean(hookBinary), HookArgs: hookArgs(a, flags), Log: a.Log,
	}, nil
}

// hookBinaryName is the lean binary that answers the hook commands alone
// (cmd/rdma-cdi-hook), installed beside rdma-cdi.
const hookBinaryName = "rdma-cdi-hook"

// defaultHookBinary is rdma-cdi-hook beside exe when it is an executable
// file there, else exe itself, which answers the same hook commands: the
// lean one starts faster on every container start.
func defaultHookBinary(exe string) string {
	lean := filepath.Join(filepath.Dir(exe), hookBinaryName)
	if st, err := os.Stat(lean); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
		return lean
	}
	return exe
}

// hookArgs repeats, for the hooks, the global flags the user set that the
// hooks read: the roots, the config file, the NCCL keys and the hook keys,
// with paths made absolute. Flags that only steer generate or watch stay
// out, so the same node gives the same spec whichever command wrote it.
func hookArgs(a *cli.App, global *pflag.FlagSet) []string {
	paths := map[string]bool{"sysfs-root": true, "dev-root": true, "config": true}
	forHooks := func(name string) bool {
		return paths[name] || strings.HasPrefix(name, "nccl-") || name == "hook-log-file" || name == "memlock"
	}
	var args []string
	global.VisitAll(func(f *pflag.Flag) {
		if !f.Changed || !forHooks(f.Name) {
			return
		}
		values := []string{f.Value.String()}
		if f.Value.Type() == "stringArray" {
			values = f.Value.(pflag.SliceValue).GetSlice()
		} else if sv, ok := f.Value.(pflag.SliceValue); ok {
			values = []string{strings.Join(sv.GetSlice(), ",")}
		}
		for _, v := range values {
			if paths[f.Name] {
				v = absPath(v)
			}
			args = append(args, "--"+f.Name+"="+v)
		}
	})
	return args
}

func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}
