// Command rdma-cdi-agent is the node's long-running agents: watch (keeps
// the CDI spec current, with the metrics endpoint and the hooks' reports)
// and device-plugin (watch plus the kubelet device plugin), top, which
// reads their metrics, and pod-network-worker, pod networking's netlink
// work for an agent without capabilities. They need gRPC, Prometheus' client and net/http;
// keeping them out of rdma-cdi keeps its build and every start of list,
// generate and the runtime wrapper small. `rdma-cdi watch`, `device-plugin`
// and `top` run this binary.
package main

import (
	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/cli/agentcmd"
)

func main() {
	cli.Main("rdma-cdi-agent", "Keep the RDMA CDI spec current, serve the kubelet device plugin and metrics",
		agentcmd.Watch,
		agentcmd.DevicePlugin,
		agentcmd.Top,
		agentcmd.PodNetworkWorker,
	)
}
