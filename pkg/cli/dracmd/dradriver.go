// Package dracmd is rdma-cdi-dra's command, dra-driver. The DRA driver
// links client-go (40 MB, ~2.5x the process start): only cmd/rdma-cdi-dra
// imports this package, so no other binary pays for it.
package dracmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-cdi/rdma-cdi/pkg/agent"
	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/dradriver"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/netnsworker"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/networker"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
)

// DRADriver is `rdma-cdi-dra dra-driver`: watch plus the DRA kubelet plugin.
func DRADriver(app *cli.App) *cobra.Command {
	var flags agent.WatchFlags
	var nodeName, namespace, kubeconfig, pluginDir, registrarDir, extendedResource, workerSocket string
	cmd := &cobra.Command{
		Use:   "dra-driver",
		Short: "Serve RDMA HCAs as Kubernetes DRA devices, and keep the CDI spec current",
		Long: `dra-driver is watch plus a DRA kubelet plugin (resource.k8s.io/v1) in one process:
it keeps the CDI spec current exactly as watch does, publishes this node's
ResourceSlice (one device per HCA, named as an RFC 1123 label: mlx5_1 is mlx5-1, with
the attributes listed below) after every change the watch sources see, and
prepares claims with the CDI names of their HCAs. The driver name is the CDI
vendor (cdi.vendor). At start it asks the API server which newer DRA fields it
keeps (device taints, consumable capacity) and, with --extended-resource, whether
one of the driver's DeviceClasses serves that resource, and logs what is left out.
Every health.interval it reads each port's error counters, rate and PCIe link: a
flapping link or an error burst taints the device <driver>/unhealthy, a link or
PCIe slot below what it trains at <driver>/degraded (NoSchedule), which a claim
may tolerate; both reach the claims' status and the pods' allocatedResourcesStatus.
With pod_network.enabled (--pod-network) it also connects to the runtime's NRI
socket and, when a pod in its own network namespace starts, gives it the RoCE
interface of each HCA its claims hold: the netdev moved in (an exclusive claim)
or a macvlan sub-interface with an address from pod_network.ranges or a block of
pod_network.pools, held as a Lease in --namespace (a shared or kept HCA); they
come back when the sandbox stops. With --pod-network-worker-socket the netlink work
in the node's and the pods' namespaces is done by rdma-cdi-agent pod-network-worker
at that socket, and this process needs no capability.
With dra.device_metadata (on by default) each container of a claim finds a
file under /var/run/kubernetes.io/dra-device-attributes that names its HCAs
with the slice's attributes and, with pod networking, the pod's interface.
SIGHUP reloads the config; SIGTERM/SIGINT stop it.

Attributes, in the driver's domain unless qualified (a CEL selector reads
device.attributes["rdma.example.com"].rate):
` + apis.AttributeHelp(),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodeName == "" {
				return fmt.Errorf("--node-name is required (the DaemonSet passes spec.nodeName)")
			}
			restConfig, client, err := kubeClient(kubeconfig)
			if err != nil {
				return err
			}
			a, err := flags.NewAgent(commandLine(app, cmd), "dra-driver")
			if err != nil {
				return err
			}
			drv, err := dradriver.New(dradriver.Options{
				Name: app.Config.CDI.Vendor, NodeName: nodeName, Client: client,
				PluginDir: pluginDir, RegistrarDir: registrarDir, ExtendedResource: extendedResource, Log: app.Log,
				Metrics: a.Metrics, DeviceMetadata: app.Config.DRA.DeviceMetadata, CDIDir: app.Config.CDI.SpecDir,
				RemoveSpecOnExit: a.Service.RemoveOnExit,
			})
			if err != nil {
				return err
			}
			// The slice's gpuDirect attribute needs the GPUDirect facts in
			// every generation's node.
			newGenerator := a.Service.NewGenerator
			a.Service.NewGenerator = func(cfg config.Config) (*specgen.Generator, error) {
				gen, err := newGenerator(cfg)
				if gen != nil {
					gen.GPUDirect = true
				}
				return gen, err
			}
			grey := a.NewGreySampler(drv.SetGrey)
			a.Service.Observe = func(out specgen.Outcome, cfg config.Config) {
				drv.Update(out.Node, cfg)
				grey.Observe(out.Node, cfg)
			}
			servers := []func(context.Context) error{drv.Run, grey.Run}
			if pn := app.Config.PodNetwork; pn.Enabled {
				addrs, renew, err := agent.StartPodAddresses(cmd.Context(), pn,
					agent.PodAddressNode{Node: nodeName, Namespace: namespace, Config: restConfig}, app.Log)
				if err != nil {
					return err
				}
				if renew != nil {
					servers = append(servers, renew)
				}
				// New writes the hook's sandbox list before drv.Run
				// registers the driver with the kubelet.
				svc, err := networker.New(pn, app.Roots.Sysfs, app.Log, networker.Options{
					RecordsDir: drv.DataDir(), Changed: drv.PodNetworkChanged, CrashPoint: drv.CrashPoint, Addresses: addrs,
					GiveBacksPending: a.Metrics.GiveBacksPending, Namespaces: netnsworker.ForSocket(workerSocket, app.Log),
					Plan: func(_ context.Context, s networker.Sandbox, pool podnetwork.Allocator) ([]podnetwork.Attachment, error) {
						return drv.PlanPod(types.UID(s.UID), pool)
					},
				})
				if err != nil {
					return err
				}
				drv.PodNetwork = svc
			}
			return a.Run(cmd.Context(), servers...)
		},
	}
	flags.Register(cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&nodeName, "node-name", "", "this node's name in the API server (required)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: the in-cluster config)")
	f.StringVar(&namespace, "namespace", "", agent.NamespaceFlagHelp)
	f.StringVar(&pluginDir, "plugin-dir", "/var/lib/kubelet/plugins", "the kubelet's plugins directory; the socket goes in <dir>/<driver name>")
	f.StringVar(&registrarDir, "registrar-dir", kubeletplugin.KubeletRegistryDir, "the kubelet's plugin registration directory")
	f.StringVar(&workerSocket, "pod-network-worker-socket", "", netnsworker.SocketFlagHelp)
	f.StringVar(&extendedResource, "extended-resource", "", "the extended resource (e.g. rdma/hca) a DeviceClass of this driver should serve; the driver logs whether the API server kept it")
	return cmd
}

// kubeClient connects with kubeconfig, or in-cluster when it is "".
func kubeClient(kubeconfig string) (*rest.Config, kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cfg, client, nil
}

// commandLine is what the agent takes from cmd's command line.
func commandLine(app *cli.App, cmd *cobra.Command) agent.CommandLine {
	return agent.CommandLine{
		CommandLine: specgen.CommandLine{
			Config: app.Config, Roots: app.Roots, SpecHostRoot: app.SpecHostRoot, Log: app.Log,
			GlobalFlags: cmd.Root().PersistentFlags(),
		},
		ConfigPath: app.ConfigPath, Version: app.Version, Flags: cmd.Flags(),
	}
}
