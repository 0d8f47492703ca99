// Command rdma-cdi is the node's CLI: it discovers the node's RDMA
// hardware, writes its CDI spec, checks the node (doctor), edits OCI
// configs for engines without CDI (the runtime wrapper
// rdma-container-runtime, a link to this binary, and podman's precreate
// hook), and answers the container hooks too, for specs that name it.
// Containers start with rdma-cdi-hook; the long-running agents (watch,
// device-plugin) and top are rdma-cdi-agent, which `rdma-cdi watch` runs;
// the DRA driver is rdma-cdi-dra.
package main

import (
	"os"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/cli/nodecmd"
	"github.com/rdma-cdi/rdma-cdi/pkg/ldsandbox"
	"github.com/rdma-cdi/rdma-cdi/pkg/runtimewrap"
)

func main() {
	// Re-executed by the update-ldcache step: the ldconfig sandbox.
	ldsandbox.RunIfSandbox()
	// Invoked as rdma-container-runtime (a link): the OCI runtime wrapper.
	if runtimewrap.IsWrapper(os.Args[0]) {
		os.Exit(runtimewrap.Main(os.Args[1:]))
	}
	commands := []cli.Command{
		nodecmd.List,
		nodecmd.NCCLEnv,
		nodecmd.Generate,
		nodecmd.CDI,
		nodecmd.Doctor,
		cli.Hooks(nodecmd.Precreate),
		nodecmd.Runtime,
		nodecmd.Man,
	}
	cli.Main("rdma-cdi", "Give containers RDMA: discover HCAs, write CDI specs, inject what CDI cannot",
		append(commands, nodecmd.AgentCommands()...)...)
}
