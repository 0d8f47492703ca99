// Package cli is what every rdma-cdi binary shares: the App (config,
// roots, logging, output), the root command with the global flags, and
// the container hooks. Each binary's main (cmd/<binary>) names the
// commands it carries: rdma-cdi's are in nodecmd, rdma-cdi-agent's in
// agentcmd, the DRA driver's in dracmd. The work itself lives in the
// pkg/ packages each command calls.
package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// App is the state shared by every command.
type App struct {
	Config     config.Config
	ConfigPath string
	Roots      model.Roots
	// SpecHostRoot is the host root as the engines reading the spec see it
	// ("" means Roots.Host): "/" for a DaemonSet reading the host at /host.
	SpecHostRoot string
	Log          *logrus.Logger
	Stdout       io.Writer
	Stderr       io.Writer
	Version      string
	Commit       string
	// ConfigErr is why the config file could not be used, at a container
	// start (hooks, the runtime wrapper): Config then holds the defaults,
	// and only a container that asked for RDMA is refused with it.
	ConfigErr error
	// configWarnings are unknown keys of a newer config, logged by the
	// hook or wrapper once its log is set up (ReportConfig).
	configWarnings []string

	logLevel  string
	logFormat string
}

// The build's version, set by the linker (Makefile's LDFLAGS) in every
// binary alike.
var (
	version = "0.0.0-dev"
	commit  = "unknown"
)

// Main runs a binary: its root command, named name, with commands, and the
// build's version.
func Main(name, short string, commands ...Command) {
	Execute(NewRoot(NewApp(version, commit), name, short, commands...))
}

// Execute runs a binary's root command and exits 1, after "NAME: error"
// on stderr, when the command fails.
func Execute(root *cobra.Command) {
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, root.Name()+":", err)
		os.Exit(1)
	}
}

// Command builds one top-level command of a binary.
type Command func(*App) *cobra.Command

// NewApp is the App of a binary's run: the process's output and a logger.
func NewApp(version, commit string) *App {
	return &App{Log: logrus.New(), Stdout: os.Stdout, Stderr: os.Stderr, Version: version, Commit: commit}
}

// NewRoot builds a binary's command tree: the root named name, with the
// global flags and commands.
func NewRoot(app *App, name, short string, commands ...Command) *cobra.Command {
	root := &cobra.Command{
		Version:       fmt.Sprintf("%s (commit %s)", app.Version, app.Commit),
		Use:           name,
		Short:         short,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return app.setup(cmd)
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&app.ConfigPath, "config", config.DefaultPath, "config file (TOML)")
	roots := model.DefaultRoots()
	pf.StringVar(&app.Roots.Sysfs, "sysfs-root", roots.Sysfs, "sysfs tree to read (a fixture, or host /sys mounted elsewhere)")
	pf.StringVar(&app.Roots.Dev, "dev-root", roots.Dev, "dev tree holding infiniband/ char devices; specs point there")
	pf.StringVar(&app.Roots.Host, "host-root", roots.Host, "host root holding the RDMA user-space libraries")
	pf.StringVar(&app.Roots.Proc, "proc-root", roots.Proc, "procfs tree to read (the GPU driver's version, the kernel's release and config: doctor, the DRA driver)")
	pf.StringVar(&app.SpecHostRoot, "spec-host-root", "", "the host root as container engines see it, for the spec's library hostPaths (default: --host-root; a DaemonSet with the host's / at /host sets /)")
	pf.StringVar(&app.Roots.NetNS, "netns", roots.NetNS, "network namespace file to read netdevs and routes in (default: the current one)")
	pf.StringVar(&app.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	pf.StringVar(&app.logFormat, "log-format", "text", "log format: text or json")
	config.RegisterFlags(pf)

	for _, add := range commands {
		root.AddCommand(add(app))
	}
	return root
}

func (a *App) setup(cmd *cobra.Command) error {
	a.Log.SetOutput(a.Stderr)
	level, err := logrus.ParseLevel(a.logLevel)
	if err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	a.Log.SetLevel(level)
	switch a.logFormat {
	case "json":
		a.Log.SetFormatter(&logrus.JSONFormatter{})
	case "text":
		a.Log.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
	default:
		return fmt.Errorf("--log-format %q: want text or json", a.logFormat)
	}
	// Roots end up in specs and hook arguments, which need absolute paths.
	for _, root := range []*string{&a.Roots.Sysfs, &a.Roots.Dev, &a.Roots.Host, &a.Roots.Proc, &a.SpecHostRoot} {
		if *root == "" {
			continue
		}
		if *root, err = filepath.Abs(*root); err != nil {
			return err
		}
	}
	var cfg config.Config
	if readsConfigLeniently(cmd) {
		cfg, a.configWarnings, a.ConfigErr = config.LoadForContainers(a.ConfigPath)
	} else if cfg, err = config.Load(a.ConfigPath); err != nil {
		return err
	}
	if err := config.ApplyFlags(cmd.Flags(), &cfg); err != nil {
		return err
	}
	a.Config = cfg
	return nil
}

// readsConfigLeniently reports whether cmd reads the config as container
// starts need it (a hook, the runtime wrapper), or reports on it (doctor).
func readsConfigLeniently(cmd *cobra.Command) bool {
	for c := cmd; c != nil; c = c.Parent() {
		switch c.Name() {
		case "hook", "runtime", "doctor":
			return true
		}
	}
	return false
}

// ReportConfig logs the config's warnings to log, once the command's log
// (stderr and its log file) is set up.
func (a *App) ReportConfig(log logrus.FieldLogger) {
	for _, w := range a.configWarnings {
		log.Warn(w)
	}
}

// ConfigWarnings are the config's keys this binary does not know.
func (a *App) ConfigWarnings() []string { return a.configWarnings }

// Discover runs discovery with the command line's roots and logs warnings.
func (a *App) Discover() (discover.Result, error) {
	res, err := discover.Discover(discover.Options{
		Roots: a.Roots,
	})
	if err != nil {
		return res, err
	}
	for _, w := range res.Warnings {
		a.Log.Warn(w)
	}
	return res, nil
}
