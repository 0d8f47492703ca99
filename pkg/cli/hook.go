package cli

import (
	"strings"

	"github.com/spf13/cobra"
)

// newHookCommand is the parent of the container hooks. Specs outlive
// binaries: an unknown hook name or flag from a newer spec is a warning and
// exit 0, so an old binary never blocks a container start.
func newHookCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:                "hook NAME",
		Short:              "Container hooks run by the engine (OCI state or config on stdin)",
		Args:               cobra.ArbitraryArgs,
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			app.Log.Warnf("unknown hook %q (known: %s); ignored so the container can start", args[0], strings.Join(hookNames(cmd), ", "))
			return nil
		},
	}
	for _, h := range hookCommands {
		sub := h(app)
		sub.FParseErrWhitelist = cobra.FParseErrWhitelist{UnknownFlags: true}
		cmd.AddCommand(sub)
	}
	return cmd
}

// stateHookCommands are the hooks that get the OCI state on stdin: those a
// generated spec names, and older specs' names for them.
var stateHookCommands = []func(*App) *cobra.Command{
	newCreateRuntimeHook,
	newCreateContainerHook,
	newLDCacheHook,
	newNCCLConfHook,
	newMemlockHook,
}

func hookNames(cmd *cobra.Command) []string {
	var names []string
	for _, c := range cmd.Commands() {
		names = append(names, c.Name())
	}
	return names
}
