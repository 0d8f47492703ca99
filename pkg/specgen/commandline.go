package specgen

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// CommandLine is what a command that writes the spec (generate, doctor,
// the agents) was started with.
type CommandLine struct {
	Config       config.Config
	Roots        model.Roots
	SpecHostRoot string
	Log          *logrus.Logger
	// GlobalFlags are the root command's flags, which the spec's hooks
	// repeat (hookArgs).
	GlobalFlags *pflag.FlagSet
}

// Generator returns a spec generator for this command line. The hooks get
// the same roots, config file and config flags, so a fixture node stays a
// fixture node inside the hooks. hookBinary "" is defaultHookBinary's.
func (cl CommandLine) Generator(hookBinary string) (*Generator, error) {
	if hookBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding this executable for the spec's hooks: %w", err)
		}
		hookBinary = defaultHookBinary(exe)
	}
	return &Generator{
		Config: cl.Config, Roots: cl.Roots, SpecHostRoot: cl.SpecHostRoot,
		HookBinary: filepath.Clean(hookBinary), HookArgs: hookArgs(cl.GlobalFlags), Log: cl.Log,
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
func hookArgs(global *pflag.FlagSet) []string {
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
