package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/runtimewrap"
)

// RuntimeWrapperName is the argv[0] basename under which the binary acts as
// the OCI runtime wrapper (a symlink or copy named so).
const RuntimeWrapperName = "rdma-container-runtime"

// Environment the wrapper reads when started as rdma-container-runtime,
// where the engine owns the command line. Engines pass their env through
// to the runtime (dockerd -> containerd -> shim -> runtime).
const (
	EnvConfig    = "RDMA_CDI_CONFIG"     // config file (default /etc/rdma-cdi/config.toml)
	EnvSysfsRoot = "RDMA_CDI_SYSFS_ROOT" // like --sysfs-root
	EnvDevRoot   = "RDMA_CDI_DEV_ROOT"   // like --dev-root
)

// IsRuntimeWrapper reports whether argv0 asks for the runtime wrapper.
func IsRuntimeWrapper(argv0 string) bool { return filepath.Base(argv0) == RuntimeWrapperName }

func newRuntimeCommand(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "runtime -- [RUNC FLAGS] COMMAND [ARGS]",
		Short: "OCI runtime wrapper: on create, apply the container's RDMA request to BUNDLE/config.json, then exec the real runtime",
		Long: `Acts as an OCI runtime (runc's command line). On "create" (and "run") it edits
the bundle's config.json (--bundle/-b, default the working directory) for a
container that asked for RDMA, atomically, then execs the real runtime
(runtime.path, default runc from PATH, never this binary) with every argument
untouched. Other commands are exec'd at once. The same binary behaves so when
invoked as ` + RuntimeWrapperName + ` (a symlink), with the config taken from $` + EnvConfig + `.`,
		Args:                  cobra.ArbitraryArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := app.runRuntimeWrapper(args); code != 0 {
				return errSilentExit{code}
			}
			return nil
		},
	}
}

// errSilentExit carries an exit code for a failure already reported.
type errSilentExit struct{ code int }

func (e errSilentExit) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// RuntimeWrapperMain is main() for argv[0] = rdma-container-runtime; args
// are runc's (argv without argv[0]). It returns only when it did not exec
// the real runtime.
func RuntimeWrapperMain(args []string, version, commit string) int {
	app := &App{
		Log: logrus.New(), Stdout: os.Stdout, Stderr: os.Stderr, Version: version, Commit: commit,
		ConfigPath: config.DefaultPath, SysfsRoot: "/sys", DevRoot: "/dev", HostRoot: "/",
	}
	if p := os.Getenv(EnvConfig); p != "" {
		app.ConfigPath = p
	}
	if v := os.Getenv(EnvSysfsRoot); v != "" {
		app.SysfsRoot = v
	}
	if v := os.Getenv(EnvDevRoot); v != "" {
		app.DevRoot = v
	}
	// A broken config must not stop delete, kill or state of running
	// containers, nor containers that asked for nothing: the defaults are
	// used, and only an RDMA request is refused with the error.
	app.Config, app.configWarnings, app.ConfigErr = config.LoadForContainers(app.ConfigPath)
	return app.runRuntimeWrapper(args)
}

// runRuntimeWrapper edits the bundle on create/run and execs the runtime.
func (a *App) runRuntimeWrapper(args []string) int {
	parsed := runtimewrap.Parse(args)
	a.Log.SetOutput(io.Discard)
	a.Log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, DisableColors: true})
	a.logToFile(a.Config.Runtime.LogFile)
	a.reportConfig(a.Log)

	fail := func(err error) int {
		msg := fmt.Sprintf("%s: %v", RuntimeWrapperName, err)
		a.Log.Error(msg)
		if lerr := runtimewrap.LogLine(parsed.Log, parsed.LogFormat, "error", msg); lerr != nil {
			a.Log.Warnf("runtime log %s: %v", parsed.Log, lerr)
		}
		fmt.Fprintln(a.Stderr, msg)
		return 1
	}

	if parsed.EditsBundle() {
		cwd, err := os.Getwd()
		if err != nil {
			return fail(err)
		}
		bundle := parsed.BundleDir(cwd)
		err = runtimewrap.EditConfig(bundle, func(data []byte) ([]byte, bool, error) {
			return a.editOCIConfig(data, runtimewrap.ConfigPath(bundle))
		})
		if err != nil {
			return fail(err)
		}
	}

	self, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	path, err := runtimewrap.FindRuntime(a.Config.Runtime.Path, self, runtimewrap.SearchPath(os.Getenv("PATH")))
	if err != nil {
		return fail(err)
	}
	a.Log.Debugf("exec %s %q", path, args)
	return fail(runtimewrap.Exec(path, args, os.Environ()))
}
