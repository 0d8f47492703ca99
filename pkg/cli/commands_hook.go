//go:build hookonly

package cli

import "github.com/spf13/cobra"

// The hook binary (bin/rdma-cdi-hook, built with -tags hookonly) is the
// one a container start execs: it carries only the state hooks, so that
// no package it does not use (the CDI library's validation and YAML, gRPC
// and the kubelet APIs of the device plugin, the runtime wrapper's config
// editor) adds its init and page faults to every start. rdma-cdi itself
// answers the same hook commands, for specs that name it.
var commands = []func(*App) *cobra.Command{
	newHookCommand,
}

// hookCommands are the state hooks a generated spec names.
var hookCommands = stateHookCommands
