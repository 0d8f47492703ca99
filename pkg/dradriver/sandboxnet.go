package dradriver

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	"github.com/rdma-cdi/rdma-cdi/pkg/nrisandbox"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnet"
	"github.com/rdma-cdi/rdma-cdi/pkg/sandboxnet"
)

// NewPodNetworker gives pods the RoCE interfaces of their prepared claims'
// HCAs (PodAttachments), keeping its records in d's plugin data directory
// once d runs, and writing claim statuses again when they change. serve,
// when set, is the sandbox events' source (the NRI plugin serving the
// networker); the driver starts it once the records are loaded.
func (d *Driver) NewPodNetworker(ranges map[string][]podnet.Range, sysRoot string) *sandboxnet.Networker {
	d.init()
	n := &sandboxnet.Networker{Sysfs: sysRoot, Ranges: ranges, Log: d.Log}
	n.Plan = func(_ context.Context, s nrisandbox.Sandbox, pool podnet.Allocator) ([]podnet.Attachment, error) {
		return d.planPod(types.UID(s.UID), pool)
	}
	n.Changed = func() { d.statuses.refresh() }
	d.networker = n
	return n
}

// planPod is PodAttachments over the driver's current view.
func (d *Driver) planPod(uid types.UID, pool podnet.Allocator) ([]podnet.Attachment, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return PodAttachments(d.prepared, uid, d.Name, d.inv, podnet.NodeFacts{Node: d.node, NodeIPs: d.nodeIPs}, pool)
}

// startPodNetwork loads the networker's records from dataDir, then serves
// its sandbox events.
func (d *Driver) startPodNetwork(ctx context.Context, dataDir string) {
	n := d.networker
	n.CrashPoint = func(point string) { crashPoint(dataDir, point) }
	n.Restore(dataDir)
	d.readNodeIPs(ctx)
	if d.ServePodNetwork != nil {
		go func() {
			if err := d.ServePodNetwork(ctx); err != nil {
				d.Log.Errorf("pod network: %v", err)
			}
		}()
	}
}
