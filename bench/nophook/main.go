// Command nophook is the cheapest hook a Go program can be: it reads the
// OCI state from stdin and exits. bench/podman.sh runs it in place of
// rdma-cdi's hook to show what the process alone costs a container start.
package main

import (
	"io"
	"os"
)

func main() {
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
		os.Exit(1)
	}
}
