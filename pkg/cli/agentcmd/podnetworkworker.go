package agentcmd

import (
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/netnsworker"
)

// PodNetworkWorker is `rdma-cdi-agent pod-network-worker`: pod
// networking's netlink work for an agent that holds no capability.
func PodNetworkWorker(app *cli.App) *cobra.Command {
	var socket, netnsDir string
	var ping time.Duration
	cmd := &cobra.Command{
		Use:   "pod-network-worker",
		Short: "Do pod networking's netlink work in pods' network namespaces for the agent (--pod-network-worker-socket)",
		Long: `pod-network-worker is the privileged half of pod networking, for a dra-driver or
device-plugin started with --pod-network-worker-socket, which then holds no capability:
it moves host netdevs into pods' network namespaces and back, makes macvlan
sub-interfaces there, sets their addresses, MTU and routes, and probes each IPv4
address before use, as that agent asks over the unix socket --socket (made 0600;
only a root peer is served). It needs CAP_NET_ADMIN, CAP_NET_RAW and CAP_SYS_ADMIN,
and nothing else: no listener on the network, no Kubernetes client, no NRI, no
config file. It checks every request itself: a pod's namespace must be a file
directly under --netns-dir (not a symbolic link, not the node's own namespace),
and a netdev to move is checked again as it is now. It holds each pod's namespace
from its attach until what it got is given back. SIGTERM/SIGINT stop it.

With --ping it serves nothing: it asks the worker at --socket to answer and
exits 0 when it did within that time (the chart's liveness probe).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ping > 0 {
				c := &netnsworker.Client{Socket: socket, Timeout: ping}
				defer c.Close()
				return c.Ping()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			s := &netnsworker.Server{NetNSDir: netnsDir, NodeNetNS: app.Roots.NetNS, Log: app.Log}
			return s.Run(ctx, socket)
		},
	}
	f := cmd.Flags()
	f.StringVar(&socket, "socket", "/run/rdma-cdi-netns/worker.sock", "the unix socket the agent asks on (its directory is made 0700)")
	f.StringVar(&netnsDir, "netns-dir", "/var/run/netns", "where the runtime pins pods' network namespaces: the only place a request may name one")
	f.DurationVar(&ping, "ping", 0, "do not serve: ask the worker at --socket to answer within this time, and exit 0 when it did")
	return cmd
}
