package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/deviceplugin"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nrisandbox"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnet"
	"github.com/rdma-cdi/rdma-cdi/pkg/podresources"
	"github.com/rdma-cdi/rdma-cdi/pkg/sandboxnet"
)

// devicePluginPodNetwork is pod networking for the device plugin: at a
// sandbox's start it asks the kubelet's PodResources API which units the
// pod was allocated and gives it a sub-interface on each of their RoCE
// HCAs (deviceplugin.PodAttachments over the latest node view).
type devicePluginPodNetwork struct {
	resources []config.Resource
	stateDir  string
	devices   *podresources.Client
	view      atomic.Pointer[podNetView]
	networker *sandboxnet.Networker
	plugin    *nrisandbox.Plugin
}

type podNetView struct {
	node model.Node
	cfg  config.Config
}

func newDevicePluginPodNetwork(app *cli.App, resources []config.Resource) (*devicePluginPodNetwork, error) {
	pn := app.Config.PodNetwork
	ranges, err := podnet.ParseRanges(pn.Ranges)
	if err != nil {
		return nil, fmt.Errorf("pod_network.ranges: %w", err)
	}
	p := &devicePluginPodNetwork{resources: resources, stateDir: pn.StateDir, devices: &podresources.Client{Socket: pn.PodResourcesSocket}}
	p.networker = &sandboxnet.Networker{Sysfs: app.Roots.Sysfs, Ranges: ranges, IndexDir: pn.StateDir, Log: app.Log, Plan: p.plan}
	p.plugin = &nrisandbox.Plugin{Socket: pn.NRISocket, Name: "rdma-cdi", Index: "10", Handler: p.networker, Log: app.Log}
	return p, nil
}

// observe takes each new generation of the node.
func (p *devicePluginPodNetwork) observe(node model.Node, cfg config.Config) {
	p.view.Store(&podNetView{node: node, cfg: cfg})
}

// plan asks the kubelet first: a pod holding none of the resources gets
// nothing, whatever the agent knows yet.
func (p *devicePluginPodNetwork) plan(ctx context.Context, s nrisandbox.Sandbox, pool podnet.Allocator) ([]podnet.Attachment, error) {
	held, err := p.devices.Devices(ctx, s.Namespace, s.Name)
	if err != nil || len(held) == 0 {
		return nil, err
	}
	v := p.view.Load()
	if v == nil {
		return nil, errors.New("the agent has no view of the node yet")
	}
	return deviceplugin.PodAttachments(v.node, v.cfg, p.resources, held, pool)
}

// run loads the records a previous process left, then serves the
// runtime's sandbox events until ctx ends.
func (p *devicePluginPodNetwork) run(ctx context.Context) error {
	defer p.devices.Close()
	if err := os.MkdirAll(p.stateDir, 0o700); err != nil {
		return fmt.Errorf("pod_network.state_dir: %w", err)
	}
	p.networker.Restore(p.stateDir)
	return p.plugin.Run(ctx)
}
