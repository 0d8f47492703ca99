// Command rdma-cdi-dra is the Kubernetes DRA driver: it publishes the
// node's HCAs as a ResourceSlice, prepares claims as CDI devices, and
// keeps the CDI spec current as rdma-cdi watch does. It is the one binary
// that links client-go and the DRA kubelet-plugin library (54 MB, and a
// start about 2.5 times rdma-cdi's), which is why it is a binary of its
// own: nothing else pays for them.
package main

import (
	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/cli/dracmd"
)

func main() {
	cli.Main("rdma-cdi-dra", "Serve RDMA HCAs as Kubernetes DRA devices, and keep the CDI spec current",
		dracmd.DRADriver,
	)
}
