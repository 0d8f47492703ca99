package deviceplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/deviceplugin/podresources"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
)

// PodAttachments plans what a pod in its own network namespace gets for
// the units the kubelet allocated it (podDevices: device IDs by resource
// name, from the PodResources API): a macvlan sub-interface, with an
// address from pool, on the netdev of each RoCE HCA those units give its
// containers, each HCA once. Always a sub-interface: a device plugin
// resource carries no per-pod config, and a shared unit's HCAs serve other
// pods too. The HCAs are those Allocate hands out (Pool.HCAsFor), so a
// unit that no longer maps to a healthy HCA fails the pod's start as its
// Allocate would. Nothing names the interfaces either, and a host netdev's
// name may be the pod's own (a RoCE eth0): they are net1, net2, ... in the
// node's order of the HCAs, whatever order the kubelet lists units in.
func PodAttachments(node model.Node, cfg config.Config, resources []config.Resource, podDevices map[string][]string, pool podnetwork.Allocator) ([]podnetwork.Attachment, error) {
	facts := podnetwork.NodeFacts{Node: node, Movable: cfg.PodNetwork.Movable, MoveKeepsAddresses: cfg.PodNetwork.MoveKeepsAddresses}
	sub := v1alpha1.PodNetworkConfig{Mode: v1alpha1.ModeSubInterface}
	var out []podnetwork.Attachment
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
			a, ok, err := podnetwork.Plan(facts.Device(h.Name, true), sub, pool)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.Name, err)
			}
			if ok {
				out = append(out, a)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b podnetwork.Attachment) int {
		return cmp.Compare(deviceIndex(node, a.Device), deviceIndex(node, b.Device))
	})
	podnetwork.NameInterfaces(out, false, nil)
	return out, nil
}

// deviceIndex is ibdev's place among the node's HCAs.
func deviceIndex(node model.Node, ibdev string) int {
	return slices.IndexFunc(node.Devices, func(d model.Device) bool { return d.Name == ibdev })
}

// PodPlanner is the pod network's Planner in this mode: at a sandbox's
// start it asks the kubelet's PodResources API which units the pod was
// allocated and plans PodAttachments over the latest node view.
type PodPlanner struct {
	resources []config.Resource
	devices   *podresources.Client
	view      atomic.Pointer[podPlannerView]
}

type podPlannerView struct {
	node model.Node
	cfg  config.Config
}

// NewPodPlanner plans for the resources served, asking the PodResources
// API at socket.
func NewPodPlanner(resources []config.Resource, socket string) *PodPlanner {
	return &PodPlanner{resources: resources, devices: &podresources.Client{Socket: socket}}
}

// Observe takes each new generation of the node.
func (p *PodPlanner) Observe(node model.Node, cfg config.Config) {
	p.view.Store(&podPlannerView{node: node, cfg: cfg})
}

// Plan asks the kubelet first: a pod holding none of the resources gets
// nothing, whatever the agent knows yet.
func (p *PodPlanner) Plan(ctx context.Context, namespace, name string, pool podnetwork.Allocator) ([]podnetwork.Attachment, error) {
	held, err := p.devices.Devices(ctx, namespace, name)
	if err != nil || len(held) == 0 {
		return nil, err
	}
	v := p.view.Load()
	if v == nil {
		return nil, errors.New("the agent has no view of the node yet")
	}
	return PodAttachments(v.node, v.cfg, p.resources, held, pool)
}

// Close closes the PodResources connection.
func (p *PodPlanner) Close() error { return p.devices.Close() }
