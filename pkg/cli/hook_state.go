package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/hooks"
)

// stateHook is a hook that gets the OCI state on stdin (hooks.StateHook):
// step builds, once the flags are parsed, the work it does for the
// container.
func stateHook(app *App, name apis.HookName, short string, step func(hooks.Settings) hooks.Step) *cobra.Command {
	return &cobra.Command{
		Use:   string(name),
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			settings := hooks.Settings{Config: app.Config, ConfigErr: app.ConfigErr, Roots: app.Roots}
			h := hooks.StateHook{
				Name: name, Settings: settings, ConfigWarnings: app.ConfigWarnings(),
				LogLevel: app.Log.GetLevel(), Stdin: cmd.InOrStdin(), Stderr: app.Stderr,
			}
			return h.Run(cmd.Context(), step(settings))
		},
	}
}

func addLDCacheFlags(cmd *cobra.Command, opts *hooks.LDCacheOptions) {
	cmd.Flags().StringArrayVar(&opts.Folders, "folder", nil, "library dir inside the container to add to its linker cache; repeatable")
	cmd.Flags().StringVar(&opts.Ldconfig, "ldconfig-path", "", "the host's statically linked ldconfig, never the container's (default /sbin/ldconfig.real if present, else /sbin/ldconfig)")
}

// newStepsHook is the hook that runs the steps --steps names in one
// process (hooks.Settings.StepsHook).
func newStepsHook(app *App, name apis.HookName, short string) *cobra.Command {
	var us hooks.UserSpaceOptions
	var steps []string
	cmd := stateHook(app, name, short, func(s hooks.Settings) hooks.Step { return s.StepsHook(us, steps) })
	addLDCacheFlags(cmd, &us.LDCache)
	cmd.Flags().StringArrayVar(&us.Lend, "lend", nil, "a host file the user-space step lends an image without its own RDMA stack, CONTAINERPATH=HOSTPATH; repeatable")
	cmd.Flags().StringSliceVar(&us.Providers, "provider", nil, "providers the node's HCAs use (mlx5,...), checked in an image that brings its own stack")
	cmd.Flags().StringSliceVar(&steps, "steps", nil, "steps to run, comma-separated: "+strings.Join(hooks.StepNames(), ", ")+" (with --lend, --provider and --folder)")
	return cmd
}

func newCreateRuntimeHook(app *App) *cobra.Command {
	return newStepsHook(app, apis.HookCreateRuntime, "createRuntime: the steps memlock, user-space, update-ldcache and nccl-conf in one process")
}

func newCreateContainerHook(app *App) *cobra.Command {
	return newStepsHook(app, apis.HookCreateContainer, "createContainer (older specs): the steps update-ldcache and nccl-conf in one process")
}

func newLDCacheHook(app *App) *cobra.Command {
	var opts hooks.LDCacheOptions
	cmd := stateHook(app, apis.HookUpdateLDCache,
		"createContainer: add the injected library dirs to the container's linker cache (the host ldconfig, sandboxed in the container root)",
		func(hooks.Settings) hooks.Step { return hooks.LDCacheStep(opts) })
	addLDCacheFlags(cmd, &opts)
	return cmd
}

func newNCCLConfHook(app *App) *cobra.Command {
	return stateHook(app, apis.HookNCCLConf,
		"createContainer: write the container's NCCL defaults to its /etc/nccl.conf (the process env still wins)",
		hooks.Settings.NCCLConfStep)
}

func newMemlockHook(app *App) *cobra.Command {
	return stateHook(app, apis.HookMemlock,
		"createRuntime (older specs): raise RLIMIT_MEMLOCK of the container's init (unless config.json sets it)",
		hooks.Settings.MemlockStep)
}
