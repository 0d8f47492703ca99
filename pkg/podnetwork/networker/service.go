package networker

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/statefile"
)

// Service is pod networking on one node: a Networker serving the
// runtime's sandbox events through the agents' NRI plugin. The DRA driver
// and the device plugin each build it here, with their own Planner.
type Service struct {
	*Networker
	plugin           *Plugin
	giveBacksPending func(int)
}

// Options are what differ between the two Kubernetes modes.
type Options struct {
	// RecordsDir holds the attachment records (CheckpointFile): the DRA
	// driver's plugin data directory, or pod_network.state_dir.
	RecordsDir string
	// Plan is the mode's policy: what a sandbox's pod gets.
	Plan Planner
	// GiveBacksPending, when set, gets how many ended sandboxes still
	// hold what they were given after each retry (a metric).
	GiveBacksPending func(int)
	// Changed and CrashPoint: as the Networker's fields.
	Changed    func()
	CrashPoint func(point statefile.FaultPoint)
	// Addresses, when set, are the node's static ranges and cluster
	// blocks as registered in the cluster; nil: pod_network.ranges alone.
	Addresses Addresses
	// Namespaces, when set, does the netlink work in the node's and the
	// pods' namespaces (the pod-network worker's client); nil: this
	// process does it, and needs CAP_NET_ADMIN, CAP_NET_RAW, CAP_SYS_ADMIN.
	Namespaces NamespaceOps
}

// New builds the service from the node's pod_network settings (the ranges
// parsed and checked when the config was loaded): the sandbox list's
// directory made, the records a previous process left loaded, so that
// nothing is served before they are, and the sandbox list written from
// them (ListRestored). The agents call New before they register with the
// kubelet: the hook, which refuses a pod's container while pod networking
// is on and the list is missing, finds the list from then on, with the
// sandboxes the records name on it.
func New(cfg config.PodNetwork, sysfs string, log logrus.FieldLogger, opts Options) (*Service, error) {
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("pod_network.state_dir: %w", err)
	}
	addrs := opts.Addresses
	if addrs == nil {
		addrs = StaticRanges(cfg.Ranges.ByNetDev())
	}
	n := &Networker{
		Plan: opts.Plan, Changed: opts.Changed, CrashPoint: opts.CrashPoint,
		Sysfs: sysfs, Addresses: addrs, IndexDir: cfg.StateDir, Log: log, Namespaces: opts.Namespaces,
	}
	n.Restore(opts.RecordsDir)
	if err := n.ListRestored(); err != nil {
		return nil, fmt.Errorf("pod network: writing the sandbox list: %w", err)
	}
	plugin := &Plugin{Socket: cfg.NRISocket, Name: apis.NRIPluginName, Index: apis.NRIPluginIndex, Handler: n, Log: log}
	return &Service{Networker: n, plugin: plugin, giveBacksPending: opts.GiveBacksPending}, nil
}

// Run serves the runtime's sandbox events until ctx ends, reconnecting
// when the runtime restarts, and retries failed give-backs meanwhile. It
// first waits for the namespace work to be possible (the pod-network
// worker's container starts beside the agent's, later after a reboot):
// the runtime's first synchronization gives back what ended sandboxes
// hold and attaches those started meanwhile, and a worker not there yet
// would fail both until the next reconnect. The hook keeps the pods'
// containers waiting until then.
func (s *Service) Run(ctx context.Context) error {
	if err := s.ops().Ready(ctx); err != nil {
		return fmt.Errorf("pod network: %w", err)
	}
	go func() {
		tick := time.NewTicker(GiveBackRetry)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if n := s.RetryGiveBacks(); s.giveBacksPending != nil {
					s.giveBacksPending(n)
				}
			}
		}
	}()
	return s.plugin.Run(ctx)
}
