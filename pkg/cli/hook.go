package cli

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// Hooks is the command "hook", the parent of the container hooks: the
// state hooks a generated spec names, plus extra (podman's precreate,
// which only the full binary carries: its config editor links the CDI
// library). Specs outlive binaries: an unknown hook name or flag from a
// newer spec is a warning and exit 0, so an old binary never blocks a
// container start.
func Hooks(extra ...Command) Command {
	return func(app *App) *cobra.Command { return newHookCommand(app, slices.Concat(stateHookCommands, extra)) }
}

func newHookCommand(app *App, hooks []Command) *cobra.Command {
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
	for _, h := range hooks {
		sub := h(app)
		sub.FParseErrWhitelist = cobra.FParseErrWhitelist{UnknownFlags: true}
		cmd.AddCommand(sub)
	}
	return cmd
}

// stateHookCommands are the hooks that get the OCI state on stdin: those a
// generated spec names, and older specs' names for them.
var stateHookCommands = []Command{
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
