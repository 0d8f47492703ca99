package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/rest"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/netinfo"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/blocklease"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/networker"
)

// NamespaceFlagHelp is --namespace's help, in both modes.
const NamespaceFlagHelp = "the agent's namespace (the chart passes its pod's): with pod networking, the Leases of the node's sub-interface addresses are kept there"

// PodAddressNode is who the agent is in the cluster, for its pod
// addresses' Leases: the DaemonSet passes the node's name and the pod's
// namespace (the downward API).
type PodAddressNode struct {
	Node, Namespace string
	// Config reaches the API server; nil: the pod's in-cluster config.
	Config *rest.Config
}

// StartPodAddresses registers the node's static ranges and adopts the
// blocks it holds of the cluster's pools (pkg/podnetwork/blocklease)
// before the agent serves a pod, and returns them as the networker's
// addresses with the loop that renews their Leases. Without a node name
// or namespace it returns nil for both (the networker then takes
// pod_network.ranges as they are), unless pools are set: those need the
// cluster.
func StartPodAddresses(ctx context.Context, pn config.PodNetwork, k PodAddressNode, log logrus.FieldLogger) (networker.Addresses, func(context.Context) error, error) {
	if k.Node == "" || k.Namespace == "" {
		if len(pn.Pools) > 0 {
			return nil, nil, errors.New("pod_network.pools: the node's blocks are Leases in the cluster: give the node's name (--node-name) and the agent's namespace (--namespace)")
		}
		if len(pn.Ranges) > 0 {
			log.Warn("pod_network.ranges are not registered in the cluster (no --node-name and --namespace): nothing stops another node from handing out the same addresses")
		}
		return nil, nil, nil
	}
	cfg := k.Config
	if cfg == nil {
		var err error
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, nil, fmt.Errorf("pod addresses: no in-cluster config (a pod's KUBERNETES_SERVICE_HOST and service account token): %w", err)
		}
	}
	api, err := blocklease.ForConfig(cfg, k.Namespace)
	if err != nil {
		return nil, nil, err
	}
	holder := blocklease.New(blocklease.Options{
		API: api, Node: k.Node, Pools: pn.Pools, BlockSize: pn.BlockSize, ReclaimAfter: pn.ReclaimAfter.Duration,
		Static: pn.Ranges.ByNetDev(), Log: log.WithField("pod-network", "addresses"),
	})
	if err := holder.Start(ctx, staticNetDevs(pn, log)); err != nil {
		return nil, nil, err
	}
	return holder, holder.Run, nil
}

// staticNetDevs are the host netdevs pod_network.ranges names, as the
// node has them now (their subnets say which static ranges are this
// node's). One not there yet gets its range registered at its first pod.
func staticNetDevs(pn config.PodNetwork, log logrus.FieldLogger) []model.NetDev {
	if len(pn.Ranges) == 0 {
		return nil
	}
	h, err := netinfo.Open("")
	if err != nil {
		log.Warnf("pod addresses: %v; static ranges are registered at their first pod", err)
		return nil
	}
	defer h.Close()
	var out []model.NetDev
	for _, name := range slices.Sorted(maps.Keys(pn.Ranges)) {
		nd, found, err := h.NetDev(name)
		switch {
		case err != nil:
			log.Warnf("pod addresses: %v; its static ranges are registered at its first pod", err)
		case found:
			out = append(out, nd)
		}
	}
	return out
}
