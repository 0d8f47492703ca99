package dradriver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-cdi/rdma-cdi/pkg/specio"
)

// CheckpointFile is the name of the driver's checkpoint in its plugin data
// directory (/var/lib/kubelet/plugins/<driver>/), which outlives the
// driver's process, a helm upgrade and, with /var/lib/kubelet, a reboot.
const CheckpointFile = "prepared-claims.json"

// checkpointVersion changes when the file's meaning does; a file of
// another version is set aside rather than misread.
const checkpointVersion = 1

// Checkpoint is what the driver must remember of the claims it prepared
// when its process is replaced. The kubelet remembers which claims it
// prepared with which driver and calls unprepare for each of them, after
// its own restarts too; it keeps none of the driver's state. Without this
// file a new process would not know which devices are held (and could
// prepare one for a second claim), would stop keeping a claim's status
// current and never clear it, and would drop the claim's pods from the
// holder metrics. Preparing writes nothing else on the node (the spec has
// a device for every HCA), so this file is all there is to undo.
type Checkpoint struct {
	Version int                         `json:"version"`
	Claims  map[types.UID]PreparedClaim `json:"claims"`
}

// PreparedClaim is one prepared claim: the claim as the kubelet gave it
// (its allocation and reservedFor), the devices prepared, and when.
type PreparedClaim struct {
	Claim   *resourceapi.ResourceClaim `json:"claim"`
	Devices []kubeletplugin.Device     `json:"devices"`
	Since   metav1.Time                `json:"since"`
}

// encode is the checkpoint's bytes, claims' managed fields left out (the
// largest part of a claim, and of no use here).
func (c Checkpoint) encode() ([]byte, error) {
	out := Checkpoint{Version: checkpointVersion, Claims: make(map[types.UID]PreparedClaim, len(c.Claims))}
	for uid, p := range c.Claims {
		claim := p.Claim.DeepCopy()
		claim.ManagedFields = nil
		out.Claims[uid] = PreparedClaim{Claim: claim, Devices: p.Devices, Since: p.Since}
	}
	return json.Marshal(out)
}

// saveCheckpoint replaces path with c atomically: a crash leaves the old
// file or the new one, never a part.
func saveCheckpoint(path string, c Checkpoint) error {
	b, err := c.encode()
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return specio.WriteAtomic(path, b, 0o600)
}

// loadCheckpoint reads path; a missing file is an empty checkpoint. A file
// that does not parse, or of another version, is renamed to path.bad (kept
// for a person to read) and the checkpoint is empty: the error says so.
func loadCheckpoint(path string) (Checkpoint, error) {
	empty := Checkpoint{Version: checkpointVersion, Claims: map[types.UID]PreparedClaim{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return empty, nil
	}
	if err != nil {
		return empty, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	var c Checkpoint
	err = json.Unmarshal(b, &c)
	if err == nil && c.Version != checkpointVersion {
		err = fmt.Errorf("version %d, this driver reads %d", c.Version, checkpointVersion)
	}
	if err == nil {
		for uid, p := range c.Claims {
			if p.Claim == nil || p.Claim.UID != uid {
				err = fmt.Errorf("claim entry %s does not hold that claim", uid)
				break
			}
		}
	}
	if err != nil {
		bad := path + ".bad"
		if rerr := os.Rename(path, bad); rerr != nil {
			return empty, fmt.Errorf("checkpoint %s: %v; and setting it aside: %w", path, err, rerr)
		}
		return empty, fmt.Errorf("checkpoint %s: %v; set aside as %s, starting with no prepared claims", path, err, filepath.Base(bad))
	}
	if c.Claims == nil {
		c.Claims = map[types.UID]PreparedClaim{}
	}
	return c, nil
}

// CrashEnv names a point of prepare or unprepare at which the driver dies
// once, for fault tests of a real deployment: prepare-before-checkpoint,
// prepare-after-checkpoint, unprepare-before-checkpoint,
// unprepare-after-checkpoint. "Once" is kept by a marker file beside the
// checkpoint, so the restarted process goes on.
const CrashEnv = "RDMA_CDI_DRA_CRASH_ONCE_AT"

// crashPoint ends the process when CrashEnv names point and its marker in
// dir does not exist yet: at once, with SIGKILL's status and no cleanup
// (no deferred call, no socket removed). Not a SIGKILL to itself: the
// agent is its container's PID 1, and the kernel drops a fatal signal the
// namespace's init sends itself.
func crashPoint(dir, point string) {
	if os.Getenv(CrashEnv) != point {
		return
	}
	marker := filepath.Join(dir, ".crashed-"+point)
	if _, err := os.Stat(marker); err == nil {
		return
	}
	if err := specio.WriteAtomic(marker, nil, 0o600); err != nil {
		return
	}
	os.Exit(128 + int(syscall.SIGKILL))
}
