package dradriver

import (
	"encoding/json"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-cdi/rdma-cdi/pkg/statefile"
)

// CheckpointFile is the name of the driver's checkpoint in its plugin data
// directory (/var/lib/kubelet/plugins/<driver>/), which outlives the
// driver's process, a helm upgrade and, with /var/lib/kubelet, a reboot.
const CheckpointFile = "prepared-claims.json"

// checkpointVersion is the version this driver writes. Version 1 held the
// kubelet's whole ResourceClaim and the DRA helper's Device as they
// encoded: a new field there (Device gained Metadata) changed the file
// under the driver. Version 2 holds the driver's own types; both are read.
const checkpointVersion = 2

// PreparedClaim is one prepared claim as the driver holds it: the claim
// (as the kubelet gave it, or rebuilt from the checkpoint with the fields
// the driver reads), the devices prepared, and when.
type PreparedClaim struct {
	Claim   *resourceapi.ResourceClaim
	Devices []kubeletplugin.Device
	Since   metav1.Time
	// Addresses are what the node's CNI IPAM plugins gave its devices,
	// freed at unprepare.
	Addresses []DelegatedAddress
}

// Checkpoint is what the driver must remember of the claims it prepared
// when its process is replaced (CheckpointFile, version 2, beside its
// version). The kubelet remembers which claims it prepared with which
// driver and calls unprepare for each of them, after its own restarts
// too; it keeps none of the driver's state. Without this file a new
// process would not know which devices are held (and could prepare one
// for a second claim), would stop keeping a claim's status current and
// never clear it, and would drop the claim's pods from the holder
// metrics. Preparing writes nothing else on the node (the spec has a
// device for every HCA), so this file is all there is to undo.
type Checkpoint struct {
	Claims map[types.UID]CheckpointedClaim `json:"claims"`
}

// CheckpointedClaim is what the driver reads back of one prepared claim:
// its identity (status writes), the pods it is reserved for (holder
// metrics, pod networking), its devices and the driver's opaque configs
// (pod networking, claim statuses), and when it was prepared.
type CheckpointedClaim struct {
	UID         types.UID              `json:"uid"`
	Namespace   string                 `json:"namespace"`
	Name        string                 `json:"name"`
	ReservedFor []CheckpointedConsumer `json:"reservedFor,omitempty"`
	Devices     []CheckpointedDevice   `json:"devices"`
	Configs     []CheckpointedConfig   `json:"configs,omitempty"`
	Since       time.Time              `json:"since"`
	// Addresses are the CNI IPAM plugins' (pod_network.ipam), for their
	// DEL at unprepare. Optional, so no new version: an older driver
	// ignores them, and the plugin keeps them until its own cleanup.
	Addresses []DelegatedAddress `json:"addresses,omitempty"`
}

// CheckpointedConsumer is one entry of the claim's reservedFor.
type CheckpointedConsumer struct {
	APIGroup string    `json:"apiGroup,omitempty"`
	Resource string    `json:"resource"`
	Name     string    `json:"name"`
	UID      types.UID `json:"uid"`
}

// CheckpointedDevice is one of the driver's devices in the claim's
// allocation, as prepared.
type CheckpointedDevice struct {
	Requests     []string   `json:"requests,omitempty"`
	Pool         string     `json:"pool"`
	Device       string     `json:"device"`
	CDIDeviceIDs []string   `json:"cdiDeviceIDs"`
	ShareID      *types.UID `json:"shareID,omitempty"`
	// ConsumedCapacity is the share's capacity (bandwidth) as quantities:
	// a share below the HCA's rate leaves it shared.
	ConsumedCapacity map[string]string `json:"consumedCapacity,omitempty"`
	// AdminAccess is set for a device allocated with admin access, which
	// the claim does not hold (heldBy): a new process must not take it for
	// a holder. Optional, so no new version: an older driver ignores it.
	AdminAccess bool `json:"adminAccess,omitempty"`
}

// CheckpointedConfig is one of the driver's opaque configs in the claim's
// allocation (a PodNetworkConfig).
type CheckpointedConfig struct {
	Source     string          `json:"source"`
	Requests   []string        `json:"requests,omitempty"`
	Parameters json.RawMessage `json:"parameters"`
}

// checkpointOf is what prepared comes to in the file: of each claim only
// what the driver reads back.
func checkpointOf(prepared map[types.UID]PreparedClaim, driver string) Checkpoint {
	out := Checkpoint{Claims: make(map[types.UID]CheckpointedClaim, len(prepared))}
	for uid, p := range prepared {
		c := CheckpointedClaim{UID: uid, Namespace: p.Claim.Namespace, Name: p.Claim.Name, Since: p.Since.UTC(), Addresses: p.Addresses}
		for _, r := range p.Claim.Status.ReservedFor {
			c.ReservedFor = append(c.ReservedFor, CheckpointedConsumer{APIGroup: r.APIGroup, Resource: r.Resource, Name: r.Name, UID: r.UID})
		}
		var alloc resourceapi.DeviceAllocationResult
		if p.Claim.Status.Allocation != nil {
			alloc = p.Claim.Status.Allocation.Devices
		}
		for _, dev := range p.Devices {
			cd := CheckpointedDevice{Requests: dev.Requests, Pool: dev.PoolName, Device: dev.DeviceName, CDIDeviceIDs: dev.CDIDeviceIDs, ShareID: dev.ShareID}
			if r, ok := allocationResult(p.Claim, driver, dev); ok {
				for name, q := range r.ConsumedCapacity {
					if cd.ConsumedCapacity == nil {
						cd.ConsumedCapacity = map[string]string{}
					}
					cd.ConsumedCapacity[string(name)] = q.String()
				}
				cd.AdminAccess = isTrue(r.AdminAccess)
			}
			c.Devices = append(c.Devices, cd)
		}
		for _, cfg := range alloc.Config {
			if cfg.Opaque == nil || cfg.Opaque.Driver != driver {
				continue
			}
			c.Configs = append(c.Configs, CheckpointedConfig{Source: string(cfg.Source), Requests: cfg.Requests, Parameters: cfg.Opaque.Parameters.Raw})
		}
		out.Claims[uid] = c
	}
	return out
}

func sameShare(a, b *types.UID) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// preparedOf rebuilds the driver's view of the checkpointed claims: each
// claim with the fields the driver reads, its allocation the driver's
// devices and configs alone.
func preparedOf(c Checkpoint, driver string) map[types.UID]PreparedClaim {
	out := make(map[types.UID]PreparedClaim, len(c.Claims))
	for uid, cc := range c.Claims {
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{UID: uid, Namespace: cc.Namespace, Name: cc.Name}}
		for _, r := range cc.ReservedFor {
			claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{APIGroup: r.APIGroup, Resource: r.Resource, Name: r.Name, UID: r.UID})
		}
		alloc := &resourceapi.AllocationResult{}
		devices := make([]kubeletplugin.Device, 0, len(cc.Devices))
		for _, d := range cc.Devices {
			result := resourceapi.DeviceRequestAllocationResult{Driver: driver, Pool: d.Pool, Device: d.Device, ShareID: d.ShareID}
			if d.AdminAccess {
				result.AdminAccess = ptr(true)
			}
			if len(d.Requests) > 0 {
				result.Request = d.Requests[0]
			}
			for name, value := range d.ConsumedCapacity {
				q, err := resource.ParseQuantity(value)
				if err != nil {
					continue // check refused the file
				}
				if result.ConsumedCapacity == nil {
					result.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{}
				}
				result.ConsumedCapacity[resourceapi.QualifiedName(name)] = q
			}
			alloc.Devices.Results = append(alloc.Devices.Results, result)
			devices = append(devices, kubeletplugin.Device{Requests: d.Requests, PoolName: d.Pool, DeviceName: d.Device, CDIDeviceIDs: d.CDIDeviceIDs, ShareID: d.ShareID})
		}
		for _, cfg := range cc.Configs {
			alloc.Devices.Config = append(alloc.Devices.Config, resourceapi.DeviceAllocationConfiguration{
				Source: resourceapi.AllocationConfigSource(cfg.Source), Requests: cfg.Requests,
				DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
					Driver: driver, Parameters: runtime.RawExtension{Raw: cfg.Parameters},
				}},
			})
		}
		claim.Status.Allocation = alloc
		out[uid] = PreparedClaim{Claim: claim, Devices: devices, Since: metav1.NewTime(cc.Since.Local()), Addresses: cc.Addresses}
	}
	return out
}

// check refuses a checkpoint the driver could misread: an entry under
// another claim's UID, a quantity that does not parse.
func (c Checkpoint) check() error {
	for uid, cc := range c.Claims {
		if cc.UID != uid {
			return fmt.Errorf("claim entry %s holds claim %s", uid, cc.UID)
		}
		for _, d := range cc.Devices {
			for name, value := range d.ConsumedCapacity {
				if _, err := resource.ParseQuantity(value); err != nil {
					return fmt.Errorf("claim %s/%s: device %s: consumed %s: %w", cc.Namespace, cc.Name, d.Device, name, err)
				}
			}
		}
	}
	return nil
}

// saveCheckpoint replaces path with prepared atomically: a crash leaves
// the old file or the new one, never a part.
func saveCheckpoint(path, driver string, prepared map[types.UID]PreparedClaim) error {
	return statefile.Save(path, 0o600, checkpointVersion, checkpointOf(prepared, driver))
}

// checkpointDecoders read every version of the file into c.
func checkpointDecoders(c *Checkpoint) statefile.Decoders {
	return statefile.Decoders{
		1: func(b []byte) error {
			var v1 checkpointV1
			if err := json.Unmarshal(b, &v1); err != nil {
				return err
			}
			converted, err := v1.upgrade()
			if err != nil {
				return err
			}
			*c = converted
			return c.check()
		},
		2: func(b []byte) error {
			if err := json.Unmarshal(b, c); err != nil {
				return err
			}
			return c.check()
		},
	}
}

// DecodeCheckpoint reads the bytes of a checkpoint file, of any version
// this driver reads, without touching the file: for tools and tests that
// look at a node's checkpoint. Errors name path.
func DecodeCheckpoint(path string, data []byte) (Checkpoint, error) {
	var c Checkpoint
	err := statefile.Decode(path, data, checkpointDecoders(&c))
	return c, err
}

// loadCheckpoint reads path, a checkpoint of driver's; a missing file is
// an empty checkpoint. A file that cannot be read, does not parse, or is
// of a version this driver does not read is set aside
// (prepared-claims.json.corrupt-<time>, kept for a person to read) and the
// checkpoint is empty: the error says so.
func loadCheckpoint(path, driver string) (map[types.UID]PreparedClaim, error) {
	var c Checkpoint
	if err := statefile.LoadOrSetAside(path, 0, checkpointDecoders(&c)); err != nil {
		return map[types.UID]PreparedClaim{}, fmt.Errorf("checkpoint %w, starting with no prepared claims", err)
	}
	return preparedOf(c, driver), nil
}

// checkpointV1 is the version 1 file as the previous release wrote it: the
// whole claim (of which the fields below are read) and the DRA helper's
// Device, whose fields had no JSON names. Spelled out here so that
// reading it does not depend on those upstream types.
type checkpointV1 struct {
	Claims map[types.UID]struct {
		Claim *struct {
			Metadata struct {
				UID       types.UID `json:"uid"`
				Namespace string    `json:"namespace"`
				Name      string    `json:"name"`
			} `json:"metadata"`
			Status struct {
				Allocation *struct {
					Devices struct {
						Results []struct {
							Request          string            `json:"request"`
							Driver           string            `json:"driver"`
							Pool             string            `json:"pool"`
							Device           string            `json:"device"`
							ShareID          *types.UID        `json:"shareID"`
							ConsumedCapacity map[string]string `json:"consumedCapacity"`
							AdminAccess      *bool             `json:"adminAccess"`
						} `json:"results"`
						Config []struct {
							Source   string   `json:"source"`
							Requests []string `json:"requests"`
							Opaque   *struct {
								Driver     string          `json:"driver"`
								Parameters json.RawMessage `json:"parameters"`
							} `json:"opaque"`
						} `json:"config"`
					} `json:"devices"`
				} `json:"allocation"`
				ReservedFor []CheckpointedConsumer `json:"reservedFor"`
			} `json:"status"`
		} `json:"claim"`
		Devices []struct {
			Requests     []string   `json:"Requests"`
			PoolName     string     `json:"PoolName"`
			DeviceName   string     `json:"DeviceName"`
			CDIDeviceIDs []string   `json:"CDIDeviceIDs"`
			ShareID      *types.UID `json:"ShareID"`
		} `json:"devices"`
		Since time.Time `json:"since"`
	} `json:"claims"`
}

// upgrade is the version 1 file in version 2's terms. The driver's name
// is that of the allocation results its devices came from.
func (v1 checkpointV1) upgrade() (Checkpoint, error) {
	out := Checkpoint{Claims: make(map[types.UID]CheckpointedClaim, len(v1.Claims))}
	for uid, p := range v1.Claims {
		if p.Claim == nil || p.Claim.Metadata.UID != uid {
			return Checkpoint{}, fmt.Errorf("claim entry %s does not hold that claim", uid)
		}
		meta := p.Claim.Metadata
		c := CheckpointedClaim{UID: uid, Namespace: meta.Namespace, Name: meta.Name, ReservedFor: p.Claim.Status.ReservedFor, Since: p.Since}
		driver := ""
		for _, d := range p.Devices {
			cd := CheckpointedDevice{Requests: d.Requests, Pool: d.PoolName, Device: d.DeviceName, CDIDeviceIDs: d.CDIDeviceIDs, ShareID: d.ShareID}
			if alloc := p.Claim.Status.Allocation; alloc != nil {
				for _, r := range alloc.Devices.Results {
					if r.Pool == d.PoolName && r.Device == d.DeviceName && sameShare(r.ShareID, d.ShareID) {
						cd.ConsumedCapacity, cd.AdminAccess, driver = r.ConsumedCapacity, isTrue(r.AdminAccess), r.Driver
						break
					}
				}
			}
			c.Devices = append(c.Devices, cd)
		}
		if alloc := p.Claim.Status.Allocation; alloc != nil && driver != "" {
			for _, cfg := range alloc.Devices.Config {
				if cfg.Opaque != nil && cfg.Opaque.Driver == driver {
					c.Configs = append(c.Configs, CheckpointedConfig{Source: cfg.Source, Requests: cfg.Requests, Parameters: cfg.Opaque.Parameters})
				}
			}
		}
		out.Claims[uid] = c
	}
	return out, nil
}

// CrashEnv names a fault point at which the driver dies once, for fault
// tests of a real deployment: one of the constants below, or the pod
// network's networker.AttachBeforeCheckpoint. "Once" is kept by a marker
// file beside the checkpoint, so the restarted process goes on.
const CrashEnv = "RDMA_CDI_DRA_CRASH_ONCE_AT"

// The fault points of prepare and unprepare, around the checkpoint's save.
// The e2e fault tests set these names in CrashEnv.
const (
	PrepareBeforeCheckpoint   statefile.FaultPoint = "prepare-before-checkpoint"
	PrepareAfterCheckpoint    statefile.FaultPoint = "prepare-after-checkpoint"
	UnprepareBeforeCheckpoint statefile.FaultPoint = "unprepare-before-checkpoint"
	UnprepareAfterCheckpoint  statefile.FaultPoint = "unprepare-after-checkpoint"
)

// crashPoint ends the process at point when CrashEnv names it, once
// (statefile.CrashOnce, its marker in dir).
func crashPoint(dir string, point statefile.FaultPoint) {
	statefile.CrashOnce(CrashEnv, dir, point)
}
