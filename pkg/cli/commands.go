//go:build !hookonly

package cli

import "github.com/spf13/cobra"

// commands are rdma-cdi's commands, in one list: a new command is a line
// here and a file of its own.
var commands = []func(*App) *cobra.Command{
	newListCommand,
	newNCCLEnvCommand,
	newGenerateCommand,
	newCDICommand,
	newWatchCommand,
	newDevicePluginCommand,
	newDRADriverCommand,
	newDoctorCommand,
	newHookCommand,
	newRuntimeCommand,
}

// hookCommands are the `rdma-cdi hook NAME` subcommands: the state hooks a
// generated spec names (and hooks.d files may), and podman's precreate.
var hookCommands = append(stateHookCommands, newPrecreateHook)
