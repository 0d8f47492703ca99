// Command rdma-cdi discovers a node's RDMA hardware, writes CDI specs for it
// and runs the container hooks that CDI cannot express.
package main

import (
	"fmt"
	"os"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/ldsandbox"
)

// Set by the linker (see Makefile).
var (
	version = "0.0.0-dev"
	commit  = "unknown"
)

func main() {
	// Re-executed by the update-ldcache step: the ldconfig sandbox.
	ldsandbox.RunIfSandbox()
	runWrapperIfNamedSo()
	if err := cli.NewRootCommand(version, commit).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "rdma-cdi:", err)
		os.Exit(1)
	}
}
