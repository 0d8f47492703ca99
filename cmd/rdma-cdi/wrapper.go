//go:build !hookonly

package main

import (
	"os"

	"github.com/rdma-cdi/rdma-cdi/pkg/runtimewrap"
)

// runWrapperIfNamedSo becomes the OCI runtime wrapper when invoked as
// rdma-container-runtime (a symlink), and returns otherwise.
func runWrapperIfNamedSo() {
	if runtimewrap.IsWrapper(os.Args[0]) {
		os.Exit(runtimewrap.Main(os.Args[1:]))
	}
}
