package deviceplugin

import (
	"fmt"
	"slices"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnet"
)

// PodAttachments plans what a pod in its own network namespace gets for
// the units the kubelet allocated it (podDevices: device IDs by resource
// name, from the PodResources API): a macvlan sub-interface, with an
// address from pool, on the netdev of each RoCE HCA those units give its
// containers, each HCA once. Always a sub-interface: a device plugin
// resource carries no per-pod config, and a shared unit's HCAs serve other
// pods too. The HCAs are those Allocate hands out (Pool.HCAsFor), so a
// unit that no longer maps to a healthy HCA fails the pod's start as its
// Allocate would.
func PodAttachments(node model.Node, cfg config.Config, resources []config.Resource, podDevices map[string][]string, pool podnet.Allocator) ([]podnet.Attachment, error) {
	facts := podnet.NodeFacts{Node: node}
	sub := podnet.Config{Mode: podnet.ModeSubInterface}
	var out []podnet.Attachment
	var seen []string
	for _, r := range resources {
		ids := podDevices[r.Name]
		if len(ids) == 0 {
			continue
		}
		hcas, err := Select(node, cfg.NCCL, r).HCAsFor(ids)
		if err != nil {
			return nil, err
		}
		for _, h := range hcas {
			if slices.Contains(seen, h.Name) {
				continue
			}
			seen = append(seen, h.Name)
			a, ok, err := podnet.Plan(facts.Device(h.Name, true), sub, pool)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.Name, err)
			}
			if ok {
				out = append(out, a)
			}
		}
	}
	return out, nil
}
