// Command rdma-cdi-hook is what a container start execs: the state hooks a
// generated CDI spec names (rdma-cdi-hook hook create-runtime --steps ...)
// and nothing else. It links no CDI library, YAML, gRPC or Kubernetes
// package (test/arch), so none of their init or page faults lands on every
// container start: it starts in about half the time of rdma-cdi
// (BENCHMARKS.md).
package main

import (
	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/ldsandbox"
)

func main() {
	// Re-executed by the update-ldcache step: the ldconfig sandbox.
	ldsandbox.RunIfSandbox()
	cli.Main("rdma-cdi-hook", "The container hooks of rdma-cdi's CDI specs (OCI state on stdin)",
		cli.Hooks(),
	)
}
