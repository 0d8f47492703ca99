package dradriver

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/attach"
	"github.com/rdma-cdi/rdma-cdi/pkg/statefile"
)

// ClaimNetworkConfig is the PodNetworkConfig that applies to one request of
// a claim: the driver's opaque configs of its allocation that name the
// request or no request, the class's first and the claim's over them
// (v1alpha1.MergeClassAndClaim: the claim's own addresses and routes only
// inside the class's allowedPrefixes). A config that does not decode is an
// error naming its place.
func ClaimNetworkConfig(claim *resourceapi.ResourceClaim, driver, request string) (v1alpha1.PodNetworkConfig, error) {
	if claim.Status.Allocation == nil {
		return v1alpha1.PodNetworkConfig{}, nil
	}
	var class, own []v1alpha1.PodNetworkConfig
	for i, c := range claim.Status.Allocation.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != driver {
			continue
		}
		if len(c.Requests) > 0 && !slices.Contains(c.Requests, request) {
			continue
		}
		cfg, err := v1alpha1.Decode(c.Opaque.Parameters.Raw)
		if err != nil {
			return v1alpha1.PodNetworkConfig{}, fmt.Errorf("claim %s/%s: config[%d] (from %s): %w", claim.Namespace, claim.Name, i, c.Source, err)
		}
		if c.Source == resourceapi.AllocationConfigSourceClass {
			class = append(class, cfg)
		} else {
			own = append(own, cfg)
		}
	}
	cfg, err := v1alpha1.MergeClassAndClaim(class, own)
	if err != nil {
		return v1alpha1.PodNetworkConfig{}, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return cfg, nil
}

// requestConfigs decodes every request's config of a claim, by request,
// so that a bad one fails the prepare, before any pod sandbox exists.
func requestConfigs(claim *resourceapi.ResourceClaim, driver string, claimed []Claimed) (map[string]v1alpha1.PodNetworkConfig, error) {
	out := map[string]v1alpha1.PodNetworkConfig{}
	for _, c := range claimed {
		if _, done := out[c.Request]; done {
			continue
		}
		cfg, err := ClaimNetworkConfig(claim, driver, c.Request)
		if err != nil {
			return nil, err
		}
		out[c.Request] = cfg
	}
	return out, nil
}

// PodAttachments plans what a pod's prepared claims give it, pure: each
// RoCE HCA of a claim reserved for pod uid (but one allocated with admin
// access), under its request's config,
// with addresses from pool. A claim whose plan fails fails the whole pod
// (its start), with nothing attached. An interface no config names keeps
// its host netdev's name unless the pod cannot take it (eth0, or another
// interface's name): then it is the first free net<N>.
func PodAttachments(prepared map[types.UID]PreparedClaim, uid types.UID, driver string, inv Inventory, facts podnetwork.NodeFacts, pool podnetwork.Allocator) ([]podnetwork.Attachment, error) {
	var out []podnetwork.Attachment
	for _, claimUID := range slices.Sorted(maps.Keys(prepared)) {
		p := prepared[claimUID]
		if !reservedFor(p.Claim, uid) {
			continue
		}
		for _, dev := range p.Devices {
			ibdev, ok := inv.IBDevs[dev.DeviceName]
			if !ok || isAdmin(p.Claim, driver, dev) { // an admin's claim looks at the HCA, its holder's pod has the netdev
				continue
			}
			request := ""
			if len(dev.Requests) > 0 {
				request = dev.Requests[0]
			}
			cfg, err := ClaimNetworkConfig(p.Claim, driver, request)
			if err != nil {
				return nil, err
			}
			// A claim several pods share (reservedFor) moves its netdev into none.
			shared := len(p.Claim.Status.ReservedFor) > 1 || sharedUse(p.Claim, driver, dev, inv)
			a, ok, err := podnetwork.Plan(facts.Device(ibdev, shared), cfg, pool)
			if err != nil {
				return nil, fmt.Errorf("claim %s/%s: %w", p.Claim.Namespace, p.Claim.Name, err)
			}
			if ok {
				out = append(out, a)
			}
		}
	}
	podnetwork.NameInterfaces(out, true, nil)
	return out, nil
}

// sharedUse tells whether the claim holds a share of dev that leaves room
// for others. A shareable HCA gets a share ID in every allocation, the
// whole-HCA claims' too (they take all its bandwidth, the default): only a
// share of less than its rate is shared.
func sharedUse(claim *resourceapi.ResourceClaim, driver string, dev kubeletplugin.Device, inv Inventory) bool {
	if dev.ShareID == nil || claim.Status.Allocation == nil {
		return false
	}
	i := slices.IndexFunc(inv.Devices, func(d resourceapi.Device) bool { return d.Name == dev.DeviceName })
	if i < 0 {
		return true
	}
	rate := inv.Devices[i].Attributes[apis.AttrRate].IntValue
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != driver || r.Device != dev.DeviceName || r.ShareID == nil || *r.ShareID != *dev.ShareID {
			continue
		}
		used, ok := r.ConsumedCapacity[apis.CapacityBandwidth]
		return !ok || rate == nil || used.Value() < *rate
	}
	return true
}

func reservedFor(claim *resourceapi.ResourceClaim, uid types.UID) bool {
	for _, r := range claim.Status.ReservedFor {
		if r.Resource == "pods" && r.APIGroup == "" && r.UID == uid {
			return true
		}
	}
	return false
}

// PodNetwork is what the driver needs of pod networking (networker.Service):
// to serve it, and the interfaces a pod holds, for claim statuses.
type PodNetwork interface {
	Run(ctx context.Context) error
	Interfaces(pod types.UID) map[string]attach.Observed
}

// DataDir is the driver's plugin data directory: the checkpoint's home,
// and the pod network's records'.
func (d *Driver) DataDir() string { return filepath.Join(d.PluginDir, d.Name) }

// PlanPod is PodAttachments over the driver's current view: the pod
// network's Planner in this mode. The addresses the CNI IPAM plugins gave
// the pod's claims go first.
func (d *Driver) PlanPod(uid types.UID, pool podnetwork.Allocator) ([]podnetwork.Attachment, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if held := delegatedFor(d.prepared, uid); len(held) > 0 {
		pool = withDelegated{Allocator: pool, byNetDev: held}
	}
	return PodAttachments(d.prepared, uid, d.Name, d.inv, podnetwork.NodeFacts{Node: d.node, NodeIPs: d.nodeIPs, NodeIPsKnown: d.nodeIPsKnown,
		Movable: d.podNet.Movable, MoveKeepsAddresses: d.podNet.MoveKeepsAddresses}, pool)
}

// PodNetworkChanged takes what pods hold now: the claims' metadata files
// name their pods' interfaces, written before it returns (the networker
// calls it before it lists a sandbox for the container hook), and the
// claim statuses are written again.
func (d *Driver) PodNetworkChanged() {
	d.mu.Lock()
	d.refreshMetadata()
	d.mu.Unlock()
	d.statuses.refresh()
}

// CrashPoint ends the process at a named fault point (fault tests only).
func (d *Driver) CrashPoint(point statefile.FaultPoint) { crashPoint(d.DataDir(), point) }

// startPodNetwork follows the Node's addresses (a netdev holding one is
// never moved into a pod) and serves the sandbox events.
func (d *Driver) startPodNetwork(ctx context.Context) {
	d.readNodeIPsOrWarn(ctx) // before the first sandbox, as far as the API server answers
	go d.followNodeIPs(ctx)
	go func() {
		if err := d.PodNetwork.Run(ctx); err != nil {
			d.Log.Errorf("pod network: %v", err)
		}
	}()
}
