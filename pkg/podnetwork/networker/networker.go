// Package networker gives pods in their own network namespaces the RoCE
// interfaces of the HCAs they were allocated, at the moment the runtime
// starts their sandbox (nri.go), and takes them back when it stops.
// What a pod gets is its caller's policy (a Planner: the DRA driver's
// claims, the device plugin's PodResources); this package does the
// bookkeeping that must survive a crash: every attachment is recorded on
// disk before it is applied, so that a new process can give each netdev
// back to the node's namespace with its name and addresses.
package networker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/attach"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/sandboxlist"
	"github.com/rdma-cdi/rdma-cdi/pkg/statefile"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// CheckpointFile holds what was attached to each pod sandbox, in the
// directory given to Restore: a new process must be able to give every
// netdev back, to the node's namespace with its name and addresses.
const CheckpointFile = "pod-network.json"

// checkpointVersion changes when the file's meaning does; a reader keeps
// a decoder for every version a released agent wrote.
const checkpointVersion = 1

// AttachBeforeCheckpoint is the fault point after a sandbox's interfaces
// were applied and before that is recorded (RDMA_CDI_DRA_CRASH_ONCE_AT).
const AttachBeforeCheckpoint statefile.FaultPoint = "attach-before-checkpoint"

// SandboxNetwork is what one pod sandbox was given. Records are written
// before they are applied, so that a crash between a move and the next
// write still leaves the netdev's saved state on disk.
type SandboxNetwork struct {
	Pod     string          `json:"pod"`
	UID     types.UID       `json:"uid"`
	NetNS   string          `json:"netns"`
	Records []attach.Record `json:"records"`
}

// networkCheckpoint is CheckpointFile's schema (version 1) beside its
// version: the sandboxes given something, by sandbox id. Every record
// field is read back: the host netdev's saved name, MTU, addresses and
// routes move it back; the pod's namespace path finds it after a restart.
type networkCheckpoint struct {
	Sandboxes map[string]SandboxNetwork `json:"sandboxes"`
}

// decodeCheckpoint reads every version of CheckpointFile into sandboxes.
func decodeCheckpoint(sandboxes map[string]SandboxNetwork) statefile.Decoders {
	return statefile.Decoders{
		1: func(b []byte) error {
			var c networkCheckpoint
			if err := json.Unmarshal(b, &c); err != nil {
				return err
			}
			maps.Copy(sandboxes, c.Sandboxes)
			return nil
		},
	}
}

// gidWait bounds the wait for the kernel's GID entry of a pod's address:
// the pod's containers start right after, and their hook picks NCCL's GID
// index from the table. NRI gives a plugin 2 s per request by default.
const gidWait = time.Second

// Planner says what a sandbox's pod gets: one attachment per RoCE HCA it
// was allocated, sub-interface addresses from pool. An error fails the
// pod's start with nothing attached.
type Planner func(ctx context.Context, s Sandbox, pool podnetwork.Allocator) ([]podnetwork.Attachment, error)

// Addresses are where a node's sub-interface addresses come from: its
// static ranges, and the cluster blocks it holds (pkg/podnetwork/blocklease).
type Addresses interface {
	// Pool is what the node may hand out now, with a Claim (working in
	// ctx) where it can get more.
	Pool(ctx context.Context) podnetwork.Pool
}

// StaticRanges are pod_network.ranges alone, by host netdev: a node that
// registers them nowhere (no Kubernetes node name).
type StaticRanges map[string][]podnetwork.Range

func (r StaticRanges) Pool(context.Context) podnetwork.Pool { return podnetwork.Pool{Ranges: r} }

// Networker is an Handler: at a sandbox's start it gives the pod
// the interfaces Plan says, and takes them back at its stop.
type Networker struct {
	// Plan is the caller's policy.
	Plan Planner
	// Changed, when set, is called (with the networker's lock held) after
	// what pods hold changed, and for a sandbox that was given something
	// before it is listed for the hook: the DRA driver writes its claims'
	// device metadata and statuses again.
	Changed func()
	// CrashPoint, when set, is called at the fault points for fault tests.
	CrashPoint func(point statefile.FaultPoint)
	// NodeNetNS is the node's network namespace ("" for the process's
	// own), for the in-process Namespaces.
	NodeNetNS string
	// Sysfs is the sysfs root whose GID tables show the pod's addresses.
	Sysfs string
	// Addresses are where sub-interface addresses come from; nil: none.
	Addresses Addresses
	// IndexDir, when set, is where the list of handled sandboxes is kept
	// for the container hook (pkg/podnetwork/sandboxlist, pod_network.state_dir).
	IndexDir string
	Log      logrus.FieldLogger

	// Namespaces does the work in the node's and the pods' network
	// namespaces; nil: Local, in this process, in NodeNetNS.
	Namespaces NamespaceOps

	mu        sync.Mutex
	file      string
	sandboxes map[string]SandboxNetwork
	// attaching are the sandboxes whose interfaces are being applied:
	// recorded, not yet in the hook's list (save).
	attaching map[string]bool
	// ended are the sandboxes the runtime has ended whose give-back
	// failed, for RetryGiveBacks.
	ended map[string]bool
	// view is what pods hold, by pod UID and HCA, for claim statuses: read
	// without mu, which is held across netlink work and the driver's lock.
	view atomic.Pointer[map[types.UID]map[string]attach.Observed]
}

// Interfaces are the interfaces pod uid holds, by HCA.
func (n *Networker) Interfaces(uid types.UID) map[string]attach.Observed {
	if n == nil {
		return nil
	}
	if v := n.view.Load(); v != nil {
		return (*v)[uid]
	}
	return nil
}

// publish rebuilds the view from the sandboxes and has the claim statuses
// written again. n.mu is held.
func (n *Networker) publish() {
	v := map[types.UID]map[string]attach.Observed{}
	for _, e := range n.sandboxes {
		for _, r := range e.Records {
			if r.InPod == nil {
				continue
			}
			if v[e.UID] == nil {
				v[e.UID] = map[string]attach.Observed{}
			}
			v[e.UID][r.Device] = *r.InPod
		}
	}
	n.view.Store(&v)
	if n.Changed != nil {
		n.Changed()
	}
}

var _ Handler = (*Networker)(nil)

// Restore loads the records a previous process left in dataDir, where the
// networker keeps them from now on. It must be called before the sandbox
// events are served. A file it cannot read is set aside, not overwritten:
// it is then the only account of the netdevs still in pods, and the error
// tells where it went.
func (n *Networker) Restore(dataDir string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sandboxes == nil {
		n.sandboxes = map[string]SandboxNetwork{}
	}
	n.file = filepath.Join(dataDir, CheckpointFile)
	restored := map[string]SandboxNetwork{}
	err := statefile.LoadOrSetAside(n.file, 0, decodeCheckpoint(restored))
	var set *statefile.SetAsideError
	switch {
	case errors.As(err, &set) && set.Aside != "":
		n.Log.Errorf("pod network records: %v; the interfaces they name are not given back by this process: "+
			"move them back to the node's namespace by hand from that copy", err)
		return
	case err != nil:
		n.Log.Errorf("pod network records: %v; the interfaces they name are not given back", err)
		return
	}
	if len(restored) == 0 {
		return
	}
	maps.Copy(n.sandboxes, restored)
	n.publish()
	n.Log.Infof("pod network: took over %d sandboxes from %s", len(n.sandboxes), n.file)
}

// ListRestored writes the sandbox list for the hook (IndexDir) right after
// Restore, before any sandbox event: the sandboxes the records name, and
// those the list of a previous process in this boot names (given nothing,
// they are in no record), taken as handled, as that process left them.
// Until then a restarted agent's list could be missing (a reboot emptied
// the tmpfs, or pod networking was just turned on), and with pod
// networking on the hook refuses every pod's container with an HCA while
// it is; the next synchronization lets go of the sandboxes that are gone.
// A list that cannot be read is replaced.
func (n *Networker) ListRestored() error {
	if n.IndexDir == "" {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sandboxes == nil {
		n.sandboxes = map[string]SandboxNetwork{}
	}
	listed, err := sandboxlist.Read(n.IndexDir)
	if err != nil && !errors.Is(err, sandboxlist.ErrNoIndex) {
		n.Log.Warnf("pod network: %v; written again from the records", err)
	}
	for _, id := range listed {
		if _, ok := n.sandboxes[id]; !ok {
			n.sandboxes[id] = SandboxNetwork{}
		}
	}
	return n.writeList()
}

func (n *Networker) save() error {
	if n.file == "" {
		return errors.New("no checkpoint directory yet (Restore)")
	}
	// Only what was attached: the sandboxes given nothing are in the
	// index alone (NRI's synchronization lists them again after a restart).
	attached := maps.Clone(n.sandboxes)
	maps.DeleteFunc(attached, func(_ string, e SandboxNetwork) bool { return len(e.Records) == 0 })
	if err := statefile.Save(n.file, 0o600, checkpointVersion, networkCheckpoint{Sandboxes: attached}); err != nil {
		return err
	}
	return n.writeList()
}

// writeList writes the hook's list (IndexDir, if any). n.mu is held. It
// names a sandbox once what it was given is in place: one being attached
// is recorded (to be given back after a crash) but not listed, so a
// container the runtime starts meanwhile (its NRI call timed out while
// the attach waited) is refused and retried, never run without its
// interface.
func (n *Networker) writeList() error {
	if n.IndexDir == "" {
		return nil
	}
	listed := maps.Clone(n.sandboxes)
	maps.DeleteFunc(listed, func(id string, _ SandboxNetwork) bool { return n.attaching[id] })
	return sandboxlist.Write(n.IndexDir, slices.Collect(maps.Keys(listed)))
}

// Started gives a pod in its own network namespace the interfaces of its
// claims' RoCE HCAs. Any failure undoes what was done and fails the
// pod's start, with the reason in its events.
func (n *Networker) Started(ctx context.Context, s Sandbox) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.start(ctx, s)
}

// start is Started with n.mu held. A sandbox that gets nothing is recorded
// too: the index tells the hook that its pod was looked at.
func (n *Networker) start(ctx context.Context, s Sandbox) error {
	if s.NetNS == "" {
		return nil // the host's network: nothing to give
	}
	if n.sandboxes == nil {
		n.sandboxes = map[string]SandboxNetwork{}
	}
	if _, done := n.sandboxes[s.ID]; done {
		return nil
	}
	entry := SandboxNetwork{Pod: s.String(), UID: types.UID(s.UID), NetNS: s.NetNS}
	var pool podnetwork.Pool // no Addresses: no range
	if n.Addresses != nil {
		pool = n.Addresses.Pool(ctx)
	}
	pool.InUse = n.addressesInUse()
	plans, err := n.Plan(ctx, s, &pool)
	if err != nil {
		return podError(s, err)
	}
	if len(plans) == 0 {
		n.sandboxes[s.ID] = entry
		if err := n.save(); err != nil {
			delete(n.sandboxes, s.ID)
			return podError(s, fmt.Errorf("recording it: %w", err))
		}
		return nil
	}
	ops := n.ops()
	inPod, err := ops.PodLinkNames(s.NetNS)
	if err != nil {
		return podError(s, err)
	}
	podnetwork.NameInterfaces(plans, true, func(name string) bool { return inPod[name] })
	if entry.Records, err = ops.Plan(s.NetNS, plans); err != nil {
		return podError(s, err)
	}
	// A property of the whole set, recorded with each before any is made.
	attach.PlanSourceRouting(entry.Records)
	n.sandboxes[s.ID] = entry
	if n.attaching == nil {
		n.attaching = map[string]bool{}
	}
	n.attaching[s.ID] = true
	defer delete(n.attaching, s.ID)
	if err := n.save(); err != nil {
		delete(n.sandboxes, s.ID)
		return podError(s, fmt.Errorf("recording its interfaces: %w", err))
	}
	applied, err := ops.Apply(s.ID, s.NetNS, entry.Records)
	if errors.Is(err, ErrOutcomeUnknown) {
		// What the worker made, if anything, is not known: give back
		// all that was recorded; what cannot be is kept, and retried.
		left, undo := ops.Release(s.ID, s.NetNS, entry.Records)
		if len(left) > 0 {
			entry.Records = left
			n.sandboxes[s.ID] = entry
			delete(n.attaching, s.ID)
			if n.ended == nil {
				n.ended = map[string]bool{}
			}
			n.ended[s.ID] = true
			return podError(s, errors.Join(err, undo, n.save()))
		}
		err = errors.Join(err, undo)
	}
	if err != nil {
		delete(n.sandboxes, s.ID)
		return podError(s, errors.Join(err, n.save()))
	}
	entry.Records = applied
	delete(n.attaching, s.ID)
	if n.CrashPoint != nil {
		n.CrashPoint(AttachBeforeCheckpoint)
	}
	n.sandboxes[s.ID] = entry
	// Listed (save) once the kernel shows the pod's addresses in the GID
	// tables, from which the hook picks NCCL's index, and once Changed has
	// seen them (publish): the DRA driver's device metadata files name the
	// pod's interfaces before any of its containers can start.
	n.waitForGIDs(entry.Records)
	n.publish()
	if err := n.save(); err != nil {
		n.Log.Warnf("pod network of %s: %v", s, err)
	}
	n.Log.Infof("pod %s: %s", s, describeRecords(entry.Records))
	return nil
}

func podError(s Sandbox, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("rdma-cdi pod network of %s: %w", s, err)
}

// Stopped gives back what the sandbox was given: in its namespace, which
// containerd still has, and CRI-O has unpinned already but the handle held
// since the start keeps. A record that cannot be undone stays, for the
// sandbox's removal or the next synchronization to try again.
func (n *Networker) Stopped(_ context.Context, s Sandbox) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.giveBack(s.ID)
}

// giveBack releases sandbox id, which the runtime has ended; when that
// fails (a name squatted, a changed MAC), the sandbox is kept for
// RetryGiveBacks. n.mu is held.
func (n *Networker) giveBack(id string) error {
	err := n.release(id)
	if _, left := n.sandboxes[id]; left && err != nil {
		if n.ended == nil {
			n.ended = map[string]bool{}
		}
		n.ended[id] = true
		n.Log.Warnf("%v; retried every %v", err, GiveBackRetry)
	} else {
		delete(n.ended, id)
	}
	return err
}

// GiveBackRetry is how often RetryGiveBacks runs in Service.Run.
const GiveBackRetry = 30 * time.Second

// RetryGiveBacks tries again to give back what ended sandboxes hold after
// a failed give-back; it returns how many are still held. Without it the
// HCA's netdev stays out until the next NRI synchronization (an agent or
// runtime restart), and the HCA's next tenant cannot start.
func (n *Networker) RetryGiveBacks() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id := range n.ended {
		_ = n.giveBack(id)
	}
	return len(n.ended)
}

// Present lets go of the sandboxes the runtime no longer has: they ended
// while the driver was away (their sub-interfaces died with their
// namespaces; a moved netdev is restored where it fell back). The ones
// that started while it was away get their interfaces now: their
// containers' hooks have refused to start them until then.
func (n *Networker) Present(ctx context.Context, all []Sandbox) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	live := map[string]bool{}
	for _, s := range all {
		live[s.ID] = true
	}
	for id, entry := range n.sandboxes {
		gone := n.namespaceGone(id, entry)
		if !live[id] || gone {
			n.Log.Infof("pod network: sandbox %s of %s ended while the driver was away (runtime lists it: %v; its network namespace gone: %v)",
				id, cmp.Or(entry.Pod, "a pod given nothing"), live[id], gone)
			// Not the synchronization's error either: returned, it
			// would have the runtime drop the plugin at every
			// reconnect. giveBack logs it and keeps it for a retry.
			_ = n.giveBack(id)
		}
	}
	for _, s := range all {
		if _, known := n.sandboxes[s.ID]; known || s.NetNS == "" {
			continue
		}
		n.Log.Debugf("pod network: sandbox of %s started while the driver was away", s)
		// Not the synchronization's error: the runtime would refuse the
		// plugin, and every other pod with it. The pod's containers stay
		// refused by the hook; the next connection tries again.
		if err := n.start(ctx, s); err != nil {
			n.Log.Warnf("%v; its containers wait", err)
		}
	}
	// The index is written whole, also when empty: it names exactly the
	// sandboxes handled, those listed since New (ListRestored) included.
	if n.file != "" {
		return n.save()
	}
	return nil
}

// namespaceGone says that the network namespace sandbox id had is gone,
// with what was given into it: not held by this process, and its path no
// longer there. A runtime lists a sandbox it knew before a reboot (its
// metadata survives on disk, NOTREADY) until the kubelet removes it, while
// its namespace died with the node: its records are given back now, not
// at that removal. n.mu is held.
func (n *Networker) namespaceGone(id string, entry SandboxNetwork) bool {
	if entry.NetNS == "" {
		return false
	}
	gone, err := n.ops().Gone(id, entry.NetNS)
	if err != nil {
		n.Log.Warnf("pod network of sandbox %s: %v", id, err)
		return false
	}
	return gone
}

// release undoes sandbox id's records. n.mu is held.
func (n *Networker) release(id string) error {
	entry, ok := n.sandboxes[id]
	if !ok {
		return nil
	}
	if len(entry.Records) == 0 {
		delete(n.sandboxes, id)
		return n.save()
	}
	left, err := n.ops().Release(id, entry.NetNS, entry.Records)
	errs := []error{err}
	if len(left) == 0 {
		delete(n.sandboxes, id)
		n.Log.Infof("pod %s: gave back %s", entry.Pod, describeRecords(entry.Records))
	} else {
		entry.Records = left
		n.sandboxes[id] = entry
	}
	errs = append(errs, n.save())
	n.publish()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rdma-cdi pod network of %s: %w", entry.Pod, err)
	}
	return nil
}

// ops is n.Namespaces, made Local (in NodeNetNS) on first use. n.mu is
// held.
func (n *Networker) ops() NamespaceOps {
	if n.Namespaces == nil {
		n.Namespaces = &Local{NodeNetNS: n.NodeNetNS}
	}
	return n.Namespaces
}

// addressesInUse are the sub-interface addresses every sandbox holds.
func (n *Networker) addressesInUse() map[netip.Addr]bool {
	used := map[netip.Addr]bool{}
	for _, e := range n.sandboxes {
		for _, r := range e.Records {
			if r.Mode == v1alpha1.ModeSubInterface {
				for _, p := range r.Addrs {
					used[p.Addr()] = true
				}
			}
		}
	}
	return used
}

// waitForGIDs waits, up to gidWait, until the kernel lists a GID for each
// address the pod got on its HCAs: the containers' hooks pick NCCL's GID
// index from those tables right after.
func (n *Networker) waitForGIDs(records []attach.Record) {
	deadline := time.Now().Add(gidWait)
	for _, r := range records {
		for _, p := range r.PodAddrs() {
			for !sysfs.HasGID(sysfs.Root(n.Sysfs), r.Device, p.Addr()) {
				if time.Now().After(deadline) {
					n.Log.Warnf("%s: no GID for %s within %v; NCCL may pick another index", r.Device, p.Addr(), gidWait)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
}

// describeRecords is records in one line: "eth3 moved in as eth3 (10.0.63.3/24)".
func describeRecords(records []attach.Record) string {
	parts := make([]string, 0, len(records))
	for _, r := range records {
		how := "moved in as"
		if r.Mode == v1alpha1.ModeSubInterface {
			how = "sub-interface"
		}
		part := fmt.Sprintf("%s's %s %s %s %v", r.Device, r.HostNetDev, how, r.PodInterface, r.PodAddrs())
		if sr := r.SourceRouting; sr != nil {
			part += fmt.Sprintf(" routed by source (table %d)", sr.Table)
		}
		parts = append(parts, part)
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}
