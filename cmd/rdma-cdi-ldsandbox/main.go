// Command rdma-cdi-ldsandbox is the ldconfig sandbox alone: the process
// the update-ldcache step of rdma-cdi-hook starts to run the host's
// ldconfig confined to a container root (pkg/ldsandbox). It is installed
// beside the hook, which finds it there, and links pkg/ldsandbox and little
// else, so the second Go start of every such container start costs about
// half what a re-execution of the hook did (BENCHMARKS.md). Started any
// other way, it refuses.
package main

import (
	"fmt"
	"os"

	"github.com/rdma-cdi/rdma-cdi/pkg/ldsandbox"
)

func main() {
	ldsandbox.RunIfSandbox()
	fmt.Fprintf(os.Stderr, "%s is started by rdma-cdi-hook's update-ldcache step only (argv[0] %s)\n", ldsandbox.ExecutableName, ldsandbox.Argv0)
	os.Exit(2)
}
