package cli

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/hookevents"
	"github.com/rdma-cdi/rdma-cdi/pkg/hookname"
	"github.com/rdma-cdi/rdma-cdi/pkg/hooks"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// hookStep is one job a state hook does for a container.
type hookStep func(cmd *cobra.Command, c *hooks.Container, log *logrus.Entry) error

// stateHook is a hook that gets the OCI state on stdin: it loads the
// container (refusing a state that points elsewhere), logs to stderr and
// the host log file, and runs step.
func stateHook(app *App, name hookname.Name, short string, step hookStep) *cobra.Command {
	return &cobra.Command{
		Use:   string(name),
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Engines show one line of what runc prints: podman the first,
			// others the last, and a successful hook's stderr lands there
			// too, in front of a later runc error. So what the hook logs
			// goes to stderr only when it fails, after the error (which main
			// prints again last); the log file always has it.
			var stderr bytes.Buffer
			log, closer := hooks.NewLogger(string(name), &stderr, app.Config.Hooks.LogFile, app.Log.GetLevel())
			defer closer.Close()
			err := runStateHook(app, cmd, log, name, step)
			if err != nil {
				fmt.Fprintf(app.Stderr, "rdma-cdi hook %s: %v\n", name, err)
				_, _ = app.Stderr.Write(stderr.Bytes())
			}
			return err
		},
	}
}

// runStateHook runs step for the container of the state on stdin, then
// reports the outcome to the agent (hookevents: never waited on).
func runStateHook(app *App, cmd *cobra.Command, log *logrus.Entry, name hookname.Name, step hookStep) error {
	app.ReportConfig(log)
	sock := app.Config.Metrics.HookSocket
	report := hookevents.Outcome{Hook: string(name), ContainerID: "unknown"} // until the container loads
	loaded := false
	// Every container these hooks run for got our CDI devices.
	err := config.BlocksRDMA(app.ConfigErr)
	if err != nil {
		log.Error(err)
	} else {
		err = hooks.Run(log, cmd.InOrStdin(), func(c *hooks.Container, log *logrus.Entry) error {
			loaded = true
			if sock != "" {
				defer func() { report = c.Outcome(string(name), sysfs.Root(app.Roots.Sysfs)) }()
			}
			return step(cmd, c, log)
		})
	}
	if sock == "" {
		return err
	}
	if err != nil {
		report.FailedStep, report.Reason = failedStep(err, name, loaded), hookevents.Reason(err)
	}
	if sendErr := hookevents.Send(sock, report); sendErr != nil {
		log.Debugf("outcome not reported to the agent (%v)", sendErr)
	}
	return err
}

// failedStep names the step err came from: a steps hook's failing step, a
// one-step hook's own name, or, before the container was loaded, the load.
func failedStep(err error, hook hookname.Name, loaded bool) string {
	var se *stepError
	switch {
	case errors.As(err, &se):
		return string(se.step)
	case loaded:
		return string(hook)
	}
	return hookevents.StepLoad
}

// stepError is a steps hook's failure in one step.
type stepError struct {
	step hookname.Name
	err  error
}

func (e *stepError) Error() string { return fmt.Sprintf("%s: %v", e.step, e.err) }
func (e *stepError) Unwrap() error { return e.err }

func ldcacheStep(opts *hooks.LDCacheOptions) hookStep {
	return func(cmd *cobra.Command, c *hooks.Container, log *logrus.Entry) error {
		return hooks.UpdateLDCache(cmd.Context(), c, *opts, log)
	}
}

// userSpaceStep runs the image's own RDMA user space or lends the host's
// (hooks.ProvideUserSpace), by the config's default and the container's
// override.
func userSpaceStep(app *App, opts *hooks.UserSpaceOptions) hookStep {
	return func(cmd *cobra.Command, c *hooks.Container, log *logrus.Entry) error {
		o := *opts
		o.NodeDefault = app.Config.CDI.UserSpace
		if !app.Config.CDI.InjectLibraries {
			o.Lend = nil
		}
		return hooks.ProvideUserSpace(cmd.Context(), c, o, log)
	}
}

func ncclConfStep(app *App) hookStep {
	return func(_ *cobra.Command, c *hooks.Container, log *logrus.Entry) error {
		return hooks.WriteNCCLConf(c, hooks.NCCLConfOptions{NCCL: app.Config.NCCL, Roots: app.Roots}, log)
	}
}

func addLDCacheFlags(cmd *cobra.Command, opts *hooks.LDCacheOptions) {
	cmd.Flags().StringArrayVar(&opts.Folders, "folder", nil, "library dir inside the container to add to its linker cache; repeatable")
	cmd.Flags().StringVar(&opts.Ldconfig, "ldconfig-path", "", "the host's statically linked ldconfig, never the container's (default /sbin/ldconfig.real if present, else /sbin/ldconfig)")
}

// stepOrder is the steps of a steps hook, in the order they run.
var stepOrder = []hookname.Name{hookname.Memlock, hookname.UserSpace, hookname.UpdateLDCache, hookname.NCCLConf}

func stepNames() []string {
	names := make([]string, len(stepOrder))
	for i, n := range stepOrder {
		names[i] = string(n)
	}
	return names
}

// newStepsHook is a hook that runs the steps --steps names in one process,
// which is what generated specs ask for: each hook process costs a
// container start several milliseconds. Specs name it create-runtime and
// give it the createRuntime stage, in the runtime's namespaces, the one
// stage where all three steps work: memlock may raise a hard limit only
// from outside a user-namespaced container, and the hook reaches the
// container's mount and network namespaces through its process
// (hooks.Container). create-container is the same hook under the name
// older specs give their createContainer hook, with update-ldcache and
// nccl-conf as steps.
//
// A failing step stops the rest of the chain, as a failing hook stops the
// later hooks (nccl-conf, which runs beside it, finishes), and its error is
// the hook's last line (engines show only that); a step this binary does
// not know (from a newer spec) is a warning.
func newStepsHook(app *App, name hookname.Name, short string) *cobra.Command {
	var us hooks.UserSpaceOptions
	var steps []string
	cmd := stateHook(app, name, short,
		func(cmd *cobra.Command, c *hooks.Container, log *logrus.Entry) error {
			known := map[hookname.Name]hookStep{
				hookname.Memlock:       memlockStep(app),
				hookname.UserSpace:     userSpaceStep(app, &us),
				hookname.UpdateLDCache: ldcacheStep(&us.LDCache),
				hookname.NCCLConf:      ncclConfStep(app),
			}
			if err := hooks.CheckPodSandbox(c, app.Config.PodNetwork.StateDir, sysfs.Root(app.Roots.Sysfs)); err != nil {
				return err
			}
			return runSteps(steps, known, cmd, c, log)
		})
	addLDCacheFlags(cmd, &us.LDCache)
	cmd.Flags().StringArrayVar(&us.Lend, "lend", nil, "a host file the user-space step lends an image without its own RDMA stack, CONTAINERPATH=HOSTPATH; repeatable")
	cmd.Flags().StringSliceVar(&us.Providers, "provider", nil, "providers the node's HCAs use (mlx5,...), checked in an image that brings its own stack")
	cmd.Flags().StringSliceVar(&steps, "steps", nil, "steps to run, comma-separated: "+strings.Join(stepNames(), ", ")+" (with --lend, --provider and --folder)")
	return cmd
}

func newCreateRuntimeHook(app *App) *cobra.Command {
	return newStepsHook(app, hookname.CreateRuntime, "createRuntime: the steps memlock, user-space, update-ldcache and nccl-conf in one process")
}

func newCreateContainerHook(app *App) *cobra.Command {
	return newStepsHook(app, hookname.CreateContainer, "createContainer (older specs): the steps update-ldcache and nccl-conf in one process")
}

// besideTheOthers are the steps that share nothing with the rest:
// nccl-conf reads sysfs and the container's network namespace and writes a
// file of its own. It runs on a goroutine of its own, so a container start
// waits for the longer of it and the user-space step, not for both.
var besideTheOthers = []hookname.Name{hookname.NCCLConf}

// runSteps runs the requested steps in stepOrder, whatever order the
// request names them in, up to the first that fails; besideTheOthers run
// alongside that chain, whatever it meets. The error is the first failing
// step's in stepOrder, as if they had run one after the other.
func runSteps(requested []string, known map[hookname.Name]hookStep, cmd *cobra.Command, c *hooks.Container, log *logrus.Entry) error {
	for _, name := range requested {
		if known[hookname.Name(name)] == nil {
			log.Warnf("unknown step %q ignored (known: %s)", name, strings.Join(stepNames(), ", "))
		}
	}
	wanted := func(name hookname.Name) bool { return slices.Contains(requested, string(name)) && known[name] != nil }
	run := func(name hookname.Name) error {
		if err := known[name](cmd, c, log.WithField("step", string(name))); err != nil {
			return &stepError{step: name, err: err}
		}
		return nil
	}
	errs := make([]error, len(stepOrder)) // each written by one goroutine
	var wg sync.WaitGroup
	for i, name := range stepOrder {
		if wanted(name) && slices.Contains(besideTheOthers, name) {
			wg.Go(func() { errs[i] = run(name) })
		}
	}
	for i, name := range stepOrder {
		if !wanted(name) || slices.Contains(besideTheOthers, name) {
			continue
		}
		if errs[i] = run(name); errs[i] != nil {
			break
		}
	}
	wg.Wait()
	var first error
	for _, err := range errs {
		switch {
		case err == nil:
		case first == nil:
			first = err
		default: // a step beside the chain failed too: logged, not lost
			log.Errorf("also failed: %v", err)
		}
	}
	return first
}

func newLDCacheHook(app *App) *cobra.Command {
	var opts hooks.LDCacheOptions
	cmd := stateHook(app, hookname.UpdateLDCache,
		"createContainer: add the injected library dirs to the container's linker cache (the host ldconfig, sandboxed in the container root)",
		ldcacheStep(&opts))
	addLDCacheFlags(cmd, &opts)
	return cmd
}

func newNCCLConfHook(app *App) *cobra.Command {
	return stateHook(app, hookname.NCCLConf,
		"createContainer: write the container's NCCL defaults to its /etc/nccl.conf (the process env still wins)",
		ncclConfStep(app))
}

func newMemlockHook(app *App) *cobra.Command {
	return stateHook(app, hookname.Memlock,
		"createRuntime (older specs): raise RLIMIT_MEMLOCK of the container's init (unless config.json sets it)",
		memlockStep(app))
}

func memlockStep(app *App) hookStep {
	return func(_ *cobra.Command, c *hooks.Container, log *logrus.Entry) error {
		// Validated when the config was loaded.
		want, err := config.ParseMemlock(app.Config.Hooks.Memlock)
		if err != nil {
			return err
		}
		return hooks.Memlock(c, want, log)
	}
}
