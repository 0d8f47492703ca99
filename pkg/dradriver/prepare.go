package dradriver

import (
	"fmt"
	"maps"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/cdispec"
	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
)

// Claimed is one of the driver's devices in a claim's allocation.
type Claimed struct {
	Request, Pool, Device string
	// ShareID is set when the device is shared by capacity: the scheduler
	// counted this share against the device's bandwidth.
	ShareID *types.UID
	// AdminAccess is set for a device allocated with admin access (a
	// request's adminAccess, in a namespace labeled for it): the claim
	// looks at the device, whoever holds it (isAdmin).
	AdminAccess bool
}

// claimedDevices lists the allocation results of claim that are driver's.
func claimedDevices(claim *resourceapi.ResourceClaim, driver string) ([]Claimed, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	var out []Claimed
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == driver {
			out = append(out, Claimed{Request: r.Request, Pool: r.Pool, Device: r.Device, ShareID: r.ShareID, AdminAccess: isTrue(r.AdminAccess)})
		}
	}
	return out, nil
}

// PrepareClaim answers the kubelet for one claim: each of the driver's
// allocated devices with the CDI name of its HCA in our spec (kind is
// "vendor/class"). A device of another pool than this node's (pool: its
// name) is another node's HCA of the same name, and a device the inventory
// does not know (an HCA gone since the scheduler chose it): either fails
// the whole claim, so a pod never starts with part of what it asked for, or
// with what another node's allocation named; the kubelet retries.
//
// A request whose config says ncclPlugins: none gets, with its first
// device, the claim class's CDI device that says so to the hook in the
// containers that use the request (cdispec.RenderClaimSpec; the driver
// name is its vendor): the claim's settings reach those containers the
// way its HCAs do.
func PrepareClaim(claim *resourceapi.ResourceClaim, driver, pool, kind string, inv Inventory) kubeletplugin.PrepareResult {
	claimed, err := claimedDevices(claim, driver)
	var configs map[string]v1alpha1.PodNetworkConfig
	if err == nil {
		configs, err = requestConfigs(claim, driver, claimed)
	}
	if err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	carried := map[string]bool{} // requests whose settings a device carries
	devices := make([]kubeletplugin.Device, 0, len(claimed))
	for _, c := range claimed {
		if c.Pool != pool {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s is allocated from pool %s, not this node's (%s)", claim.Namespace, claim.Name, c.Device, c.Pool, pool)}
		}
		ibdev, ok := inv.IBDevs[c.Device]
		if !ok {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s of pool %s is not on this node now", claim.Namespace, claim.Name, c.Device, c.Pool)}
		}
		ids := []string{kind + "=" + ibdev}
		if configs[c.Request].NCCLPlugins == v1alpha1.NCCLPluginsNone && !carried[c.Request] {
			ids = append(ids, cdispec.ClaimDevice(driver, apis.ClaimNCCLPluginsNone))
			carried[c.Request] = true
		}
		devices = append(devices, kubeletplugin.Device{
			Requests:     []string{c.Request},
			PoolName:     c.Pool,
			DeviceName:   c.Device,
			CDIDeviceIDs: ids,
			ShareID:      c.ShareID,
		})
	}
	return kubeletplugin.PrepareResult{Devices: devices}
}

// ClaimHolders are the pods a prepared claim is reserved for, once per
// HCA, for the agent's rdma_cdi_hca_holder_info.
func ClaimHolders(claim *resourceapi.ResourceClaim, prepared []kubeletplugin.Device, inv Inventory) []metrics.Holder {
	var out []metrics.Holder
	for _, dev := range prepared {
		ibdev, ok := inv.IBDevs[dev.DeviceName]
		if !ok {
			continue
		}
		for _, r := range claim.Status.ReservedFor {
			if r.Resource == "pods" && r.APIGroup == "" {
				out = append(out, metrics.Holder{Device: ibdev, Namespace: claim.Namespace, Pod: r.Name, Source: metrics.SourceDRA})
			}
		}
	}
	return out
}

// allocationResult is the result of claim's allocation that dev, one of
// its prepared devices, came from.
func allocationResult(claim *resourceapi.ResourceClaim, driver string, dev kubeletplugin.Device) (resourceapi.DeviceRequestAllocationResult, bool) {
	if claim.Status.Allocation != nil {
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver == driver && r.Pool == dev.PoolName && r.Device == dev.DeviceName && sameShare(r.ShareID, dev.ShareID) {
				return r, true
			}
		}
	}
	return resourceapi.DeviceRequestAllocationResult{}, false
}

// isAdmin tells whether dev, one of claim's prepared devices, was
// allocated with admin access.
func isAdmin(claim *resourceapi.ResourceClaim, driver string, dev kubeletplugin.Device) bool {
	r, ok := allocationResult(claim, driver, dev)
	return ok && isTrue(r.AdminAccess)
}

// heldBy are the devices of claim's prepared ones that the claim holds
// (holders): all but those allocated with admin access. An admin's claim
// (a monitoring pod, a debug shell) gets the device's nodes whoever holds
// it, so it neither waits for the device nor keeps a job from it.
func heldBy(claim *resourceapi.ResourceClaim, driver string, devices []kubeletplugin.Device) []kubeletplugin.Device {
	return slices.DeleteFunc(slices.Clone(devices), func(dev kubeletplugin.Device) bool { return isAdmin(claim, driver, dev) })
}

// holders records which claim holds each device, so that a device is never
// prepared for two claims at once (the last line of defense the DRA
// helper asks drivers for, should the scheduler's view be wrong). A share
// of a device (ShareID set) is the scheduler's sum to keep, not a hold.
type holders map[string]types.UID

// conflict names a device of claimed that another claim holds, or whose
// SR-IOV PF or VF (pfs, by VF: Inventory.PFs) another claim holds: as the
// device plugin never gives a PF and one of its VFs to two pods, since
// the VFs' traffic goes through the PF's port. VFs of one PF are not
// related to each other.
func (h holders) conflict(uid types.UID, claimed []kubeletplugin.Device, pfs map[string]string) error {
	other := func(name string) (types.UID, bool) {
		owner, held := h[name]
		return owner, held && owner != uid
	}
	for _, d := range claimed {
		if d.ShareID != nil {
			continue
		}
		if owner, held := other(d.DeviceName); held {
			return fmt.Errorf("device %s is prepared for claim %s", d.DeviceName, owner)
		}
		if pf, ok := pfs[d.DeviceName]; ok {
			if owner, held := other(pf); held {
				return fmt.Errorf("device %s is an SR-IOV VF of %s, which is prepared for claim %s: a PF and its VFs go to one claim at a time", d.DeviceName, pf, owner)
			}
		}
		for _, vf := range slices.Sorted(maps.Keys(pfs)) {
			if owner, held := other(vf); held && pfs[vf] == d.DeviceName {
				return fmt.Errorf("device %s is the SR-IOV PF of %s, which is prepared for claim %s: a PF and its VFs go to one claim at a time", d.DeviceName, vf, owner)
			}
		}
	}
	return nil
}

func (h holders) hold(uid types.UID, claimed []kubeletplugin.Device) {
	for _, d := range claimed {
		if d.ShareID == nil {
			h[d.DeviceName] = uid
		}
	}
}

// release frees every device uid holds; releasing an unknown claim is not
// an error (unprepare is idempotent).
func (h holders) release(uid types.UID) {
	for name, owner := range h {
		if owner == uid {
			delete(h, name)
		}
	}
}
