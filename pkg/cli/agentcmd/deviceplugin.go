package agentcmd

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rdma-cdi/rdma-cdi/pkg/agent"
	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/deviceplugin"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/netnsworker"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/networker"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
)

// DevicePlugin is `rdma-cdi device-plugin`: watch plus the kubelet device plugin.
func DevicePlugin(app *cli.App) *cobra.Command {
	var flags agent.WatchFlags
	var pluginDir, nodeName, namespace, workerSocket string
	var resources []string
	var maxPods int
	cmd := &cobra.Command{
		Use:   "device-plugin",
		Short: cli.DevicePluginShort,
		Long: `device-plugin is watch plus a kubelet device plugin in one process: it writes and
keeps the CDI spec current exactly as watch does, and serves each configured resource
([[device_plugin.resources]], default: a shared rdma/hca) on a socket in --plugin-dir,
registered with the kubelet once the spec exists. Allocate answers with the CDI device
names of the HCAs (or, with device_plugin.allocation = "annotations", device nodes and
the cdi.k8s.io annotation). A port going down or a missing uverbs node turns an HCA
Unhealthy within a debounce of the event; a kubelet restart is followed by a new
registration. Every health.interval it also reads each port's error counters, rate
and PCIe link: a flapping link or an error burst makes the HCA Unhealthy too; a
link or PCIe slot below what it trains at is logged and exported as Degraded
(rdma_cdi_hca_condition), and still offered. With pod_network.enabled (--pod-network) it also connects to the
runtime's NRI socket and gives a pod in its own network namespace a macvlan
sub-interface, with an address from pod_network.ranges or a block of
pod_network.pools (held as a Lease in --namespace), on each RoCE HCA its units
give (the kubelet's PodResources API names them); with --pod-network-worker-socket,
through rdma-cdi-agent pod-network-worker, and with no capability of its own. SIGHUP reloads the config; SIGTERM/SIGINT stop and remove the sockets.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			served, err := resourcesFromFlags(resources, maxPods)
			if err != nil {
				return err
			}
			if served == nil {
				served = app.Config.DevicePlugin.ServedResources()
			}
			a, err := flags.NewAgent(commandLine(app, cmd), "device-plugin")
			if err != nil {
				return err
			}
			mgr := &deviceplugin.Manager{Dir: pluginDir, DevRoot: app.Roots.Dev, Resources: served, Log: app.Log,
				Sent: a.Metrics.ListAndWatchUpdate}
			grey := a.NewGreySampler(mgr.SetGrey)
			run := mgr.Run
			var renew func(context.Context) error
			var planner *deviceplugin.PodPlanner
			if pn := app.Config.PodNetwork; pn.Enabled {
				var addrs networker.Addresses
				addrs, renew, err = agent.StartPodAddresses(cmd.Context(), pn,
					agent.PodAddressNode{Node: nodeName, Namespace: namespace}, app.Log)
				if err != nil {
					return err
				}
				planner = deviceplugin.NewPodPlanner(served, pn.PodResourcesSocket)
				defer planner.Close()
				// New writes the hook's sandbox list before mgr.Run
				// registers the resources with the kubelet.
				svc, err := networker.New(pn, app.Roots.Sysfs, app.Log, networker.Options{
					RecordsDir: pn.StateDir, Addresses: addrs, GiveBacksPending: a.Metrics.GiveBacksPending,
					Namespaces: netnsworker.ForSocket(workerSocket, app.Log),
					Plan: func(ctx context.Context, s networker.Sandbox, pool podnetwork.Allocator) ([]podnetwork.Attachment, error) {
						return planner.Plan(ctx, s.Namespace, s.Name, pool)
					},
				})
				if err != nil {
					return err
				}
				run = func(ctx context.Context) error {
					go func() {
						if err := svc.Run(ctx); err != nil {
							app.Log.Errorf("pod network: %v", err)
						}
					}()
					return mgr.Run(ctx)
				}
			}
			a.Service.Observe = func(out specgen.Outcome, cfg config.Config) {
				if resources != nil {
					cfg.DevicePlugin.Resources = served
				}
				mgr.Update(out.Node, cfg)
				grey.Observe(out.Node, cfg)
				if planner != nil {
					planner.Observe(out.Node, cfg)
				}
			}
			servers := []func(context.Context) error{run, grey.Run}
			if renew != nil {
				servers = append(servers, renew)
			}
			return a.Run(cmd.Context(), servers...)
		},
	}
	flags.Register(cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&pluginDir, "plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device plugin directory (kubelet.sock and the plugins' sockets)")
	f.StringArrayVar(&resources, "resource", nil, "NAME=shared|exclusive, repeatable: serve these resources, with the HCAs NCCL would use, instead of the config's")
	f.IntVar(&maxPods, "max-pods", config.DefaultMaxPods, "units of each shared --resource: how many pods may hold it at once")
	f.StringVar(&nodeName, "node-name", "", "this node's name in the API server: with pod networking, its sub-interface addresses are registered as Leases it holds (needed for pod_network.pools)")
	f.StringVar(&namespace, "namespace", "", agent.NamespaceFlagHelp)
	f.StringVar(&workerSocket, "pod-network-worker-socket", "", netnsworker.SocketFlagHelp)
	return cmd
}

// resourcesFromFlags turns --resource NAME=MODE flags into resources; nil
// when none was given.
func resourcesFromFlags(flags []string, maxPods int) ([]config.Resource, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	plugin := config.DevicePlugin{Allocation: config.AllocationCDIDevices}
	for _, f := range flags {
		name, mode, _ := strings.Cut(f, "=")
		r := config.Resource{Name: name, Mode: config.ResourceMode(mode)}
		if r.Mode == "" {
			r.Mode = config.ModeShared
		}
		if r.Mode == config.ModeShared {
			r.MaxPods = maxPods
		}
		plugin.Resources = append(plugin.Resources, r)
	}
	if err := (config.Config{DevicePlugin: plugin}).ValidateDevicePlugin(); err != nil {
		return nil, fmt.Errorf("--resource: %w", err)
	}
	return plugin.Resources, nil
}
