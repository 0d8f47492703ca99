package runtimewrap

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/ociapply"
)

// Name is the argv[0] basename under which the binary acts as the OCI
// runtime wrapper (a symlink or copy named so).
const Name = "rdma-container-runtime"

// Environment the wrapper reads when started as rdma-container-runtime,
// where the engine owns the command line. Engines pass their env through
// to the runtime (dockerd -> containerd -> shim -> runtime).
const (
	EnvConfig    = "RDMA_CDI_CONFIG"     // config file (default /etc/rdma-cdi/config.toml)
	EnvSysfsRoot = "RDMA_CDI_SYSFS_ROOT" // like --sysfs-root
	EnvDevRoot   = "RDMA_CDI_DEV_ROOT"   // like --dev-root
)

// IsWrapper reports whether argv0 asks for the runtime wrapper.
func IsWrapper(argv0 string) bool { return filepath.Base(argv0) == Name }

// Main is main() for argv[0] = rdma-container-runtime; args are runc's
// (argv without argv[0]). It returns only when it did not exec the real
// runtime.
func Main(args []string) int {
	w := Wrapper{
		Applier: ociapply.Applier{Log: logrus.New(), Roots: model.DefaultRoots()},
		Stderr:  os.Stderr,
	}
	configPath := config.DefaultPath
	if p := os.Getenv(EnvConfig); p != "" {
		configPath = p
	}
	if v := os.Getenv(EnvSysfsRoot); v != "" {
		w.Applier.Roots.Sysfs = v
	}
	if v := os.Getenv(EnvDevRoot); v != "" {
		w.Applier.Roots.Dev = v
	}
	// A broken config must not stop delete, kill or state of running
	// containers, nor containers that asked for nothing: the defaults are
	// used, and only an RDMA request is refused with the error.
	w.Applier.Config, w.ConfigWarnings, w.Applier.ConfigErr = config.LoadForContainers(configPath)
	return w.Run(args)
}

// Wrapper is one run of the runtime wrapper.
type Wrapper struct {
	// Applier edits the bundle's config.json; its Log is set up by Run.
	Applier ociapply.Applier
	// ConfigWarnings are the config's unknown keys, logged once the log
	// file is open.
	ConfigWarnings []string
	Stderr         io.Writer
}

// Run edits the bundle on create/run and execs the runtime; it returns
// the exit code when it did not exec it.
func (w *Wrapper) Run(args []string) int {
	parsed := Parse(args)
	log := w.Applier.Log
	log.SetOutput(io.Discard)
	log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, DisableColors: true})
	ociapply.LogToFile(log, w.Applier.Config.Runtime.LogFile)
	for _, warning := range w.ConfigWarnings {
		log.Warn(warning)
	}

	fail := func(err error) int {
		msg := fmt.Sprintf("%s: %v", Name, err)
		log.Error(msg)
		if lerr := LogLine(parsed.Log, parsed.LogFormat, "error", msg); lerr != nil {
			log.Warnf("runtime log %s: %v", parsed.Log, lerr)
		}
		fmt.Fprintln(w.Stderr, msg)
		return 1
	}

	if parsed.EditsBundle() {
		cwd, err := os.Getwd()
		if err != nil {
			return fail(err)
		}
		bundle := parsed.BundleDir(cwd)
		err = EditConfig(bundle, func(data []byte) ([]byte, bool, error) {
			return w.Applier.Apply(data, ConfigPath(bundle))
		})
		if err != nil {
			return fail(err)
		}
	}

	self, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	path, err := FindRuntime(w.Applier.Config.Runtime.Path, self, SearchPath(os.Getenv("PATH")))
	if err != nil {
		return fail(err)
	}
	log.Debugf("exec %s %q", path, args)
	return fail(Exec(path, args, os.Environ()))
}
