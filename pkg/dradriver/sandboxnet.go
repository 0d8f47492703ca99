package dradriver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rdma-cdi/rdma-cdi/pkg/netattach"
	"github.com/rdma-cdi/rdma-cdi/pkg/nrisandbox"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnet"
	"github.com/rdma-cdi/rdma-cdi/pkg/specio"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// NetworkCheckpointFile holds what the driver attached to each pod sandbox,
// beside CheckpointFile: a new process must be able to give every netdev
// back, to the node's namespace with its name and addresses.
const NetworkCheckpointFile = "pod-network.json"

// SandboxNetwork is what one pod sandbox was given. Records are written
// before they are applied, so that a crash between a move and the next
// write still leaves the netdev's saved state on disk.
type SandboxNetwork struct {
	Pod     string             `json:"pod"`
	UID     types.UID          `json:"uid"`
	NetNS   string             `json:"netns"`
	Records []netattach.Record `json:"records"`
}

type networkCheckpoint struct {
	Version   int                       `json:"version"`
	Sandboxes map[string]SandboxNetwork `json:"sandboxes"`
}

// gidWait bounds the wait for the kernel's GID entry of a pod's address:
// the pod's containers start right after, and their hook picks NCCL's GID
// index from the table. NRI gives a plugin 2 s per request by default.
const gidWait = time.Second

// PodNetworker is the driver's nrisandbox.Handler: at a sandbox's start it
// gives the pod the RoCE interfaces its claims' HCAs carry, and takes them
// back at its stop.
type PodNetworker struct {
	d *Driver
	// NodeNetNS is the node's network namespace ("" for the process's own).
	NodeNetNS string
	// Sysfs is the sysfs root whose GID tables show the pod's addresses.
	Sysfs string
	// Ranges are the node's addresses for sub-interfaces (pod_network.ranges).
	Ranges map[string]podnet.Range
	Log    logrus.FieldLogger
	// Serve, when set, runs the sandbox events' source (the NRI plugin)
	// until ctx ends; the driver starts it once its records are loaded.
	Serve func(ctx context.Context) error

	mu        sync.Mutex
	file      string
	sandboxes map[string]SandboxNetwork
	// view is what pods hold, by pod UID and HCA, for claim statuses: read
	// without mu, which is held across netlink work and the driver's lock.
	view atomic.Pointer[map[types.UID]map[string]netattach.Observed]
}

// Interfaces are the interfaces pod uid holds, by HCA.
func (n *PodNetworker) Interfaces(uid types.UID) map[string]netattach.Observed {
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
func (n *PodNetworker) publish() {
	v := map[types.UID]map[string]netattach.Observed{}
	for _, e := range n.sandboxes {
		for _, r := range e.Records {
			if r.InPod == nil {
				continue
			}
			if v[e.UID] == nil {
				v[e.UID] = map[string]netattach.Observed{}
			}
			v[e.UID][r.Device] = *r.InPod
		}
	}
	n.view.Store(&v)
	n.d.statuses.refresh()
}

var _ nrisandbox.Handler = (*PodNetworker)(nil)

// NewPodNetworker attaches pod interfaces for d, keeping its records in
// d's plugin data directory once d runs.
func (d *Driver) NewPodNetworker(ranges map[string]podnet.Range, sysRoot string) *PodNetworker {
	d.init()
	n := &PodNetworker{d: d, Sysfs: sysRoot, Ranges: ranges, Log: d.Log, sandboxes: map[string]SandboxNetwork{}}
	d.networker = n
	return n
}

// restore loads the records a previous process left in dataDir.
func (n *PodNetworker) restore(dataDir string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.file = filepath.Join(dataDir, NetworkCheckpointFile)
	b, err := os.ReadFile(n.file)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var c networkCheckpoint
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err == nil && c.Version != checkpointVersion {
		err = fmt.Errorf("version %d, this driver reads %d", c.Version, checkpointVersion)
	}
	if err != nil {
		n.Log.Errorf("pod network checkpoint %s: %v; the interfaces it names are not given back", n.file, err)
		return
	}
	if c.Sandboxes != nil {
		n.sandboxes = c.Sandboxes
	}
	n.publish()
	n.Log.Infof("pod network: took over %d sandboxes from %s", len(n.sandboxes), n.file)
}

func (n *PodNetworker) save() error {
	if n.file == "" {
		return errors.New("the driver has not started")
	}
	b, err := json.Marshal(networkCheckpoint{Version: checkpointVersion, Sandboxes: n.sandboxes})
	if err != nil {
		return err
	}
	return specio.WriteAtomic(n.file, b, 0o600)
}

// Started gives a pod in its own network namespace the interfaces of its
// claims' RoCE HCAs. Any failure undoes what was done and fails the
// pod's start, with the reason in its events.
func (n *PodNetworker) Started(_ context.Context, s nrisandbox.Sandbox) error {
	if s.NetNS == "" {
		return nil // the host's network: nothing to give
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, done := n.sandboxes[s.ID]; done {
		return nil
	}
	plans, err := n.d.planPod(types.UID(s.UID), &podnet.Pool{Ranges: n.Ranges, InUse: n.addressesInUse()})
	if err != nil || len(plans) == 0 {
		return podError(s, err)
	}
	ns, err := netattach.Open(n.NodeNetNS, s.NetNS)
	if err != nil {
		return podError(s, err)
	}
	defer ns.Close()
	entry := SandboxNetwork{Pod: s.String(), UID: types.UID(s.UID), NetNS: s.NetNS}
	for _, a := range plans {
		r, err := netattach.Plan(ns, a)
		if err != nil {
			return podError(s, err)
		}
		entry.Records = append(entry.Records, r)
	}
	n.sandboxes[s.ID] = entry
	if err := n.save(); err != nil {
		delete(n.sandboxes, s.ID)
		return podError(s, fmt.Errorf("recording its interfaces: %w", err))
	}
	for i := range entry.Records {
		if err := netattach.Apply(ns, &entry.Records[i]); err != nil {
			undo := detachAll(ns, entry.Records[:i])
			delete(n.sandboxes, s.ID)
			return podError(s, errors.Join(err, undo, n.save()))
		}
	}
	crashPoint(filepath.Dir(n.file), "attach-before-checkpoint")
	n.sandboxes[s.ID] = entry
	if err := n.save(); err != nil {
		n.Log.Warnf("pod network of %s: %v", s, err)
	}
	n.waitForGIDs(entry.Records)
	n.publish()
	n.Log.Infof("pod %s: %s", s, describeRecords(entry.Records))
	return nil
}

func podError(s nrisandbox.Sandbox, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("rdma-cdi pod network of %s: %w", s, err)
}

// Stopped gives back what the sandbox was given, before the runtime
// destroys its namespace. A record that cannot be undone stays, for the
// sandbox's removal or the next synchronization to try again.
func (n *PodNetworker) Stopped(_ context.Context, s nrisandbox.Sandbox) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.release(s.ID)
}

// Present lets go of the sandboxes the runtime no longer has: they ended
// while the driver was away (their sub-interfaces died with their
// namespaces; a moved netdev is restored where it fell back).
func (n *PodNetworker) Present(_ context.Context, all []nrisandbox.Sandbox) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	live := map[string]bool{}
	for _, s := range all {
		live[s.ID] = true
	}
	var errs []error
	for id, entry := range n.sandboxes {
		if !live[id] {
			n.Log.Infof("pod network: sandbox of %s ended while the driver was away", entry.Pod)
			errs = append(errs, n.release(id))
		}
	}
	return errors.Join(errs...)
}

// release undoes sandbox id's records. n.mu is held.
func (n *PodNetworker) release(id string) error {
	entry, ok := n.sandboxes[id]
	if !ok {
		return nil
	}
	ns, err := netattach.Open(n.NodeNetNS, entry.NetNS)
	if err != nil {
		if ns, err = netattach.OpenNode(n.NodeNetNS); err != nil {
			return err
		}
	}
	defer ns.Close()
	var left []netattach.Record
	var errs []error
	for i := len(entry.Records) - 1; i >= 0; i-- {
		if err := netattach.Detach(ns, entry.Records[i]); err != nil {
			left = append(left, entry.Records[i])
			errs = append(errs, err)
		}
	}
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

// detachAll undoes records, last first.
func detachAll(ns netattach.Namespaces, records []netattach.Record) error {
	var errs []error
	for i := len(records) - 1; i >= 0; i-- {
		errs = append(errs, netattach.Detach(ns, records[i]))
	}
	return errors.Join(errs...)
}

// addressesInUse are the sub-interface addresses every sandbox holds.
func (n *PodNetworker) addressesInUse() map[netip.Addr]bool {
	used := map[netip.Addr]bool{}
	for _, e := range n.sandboxes {
		for _, r := range e.Records {
			if r.Mode == podnet.ModeSubInterface {
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
func (n *PodNetworker) waitForGIDs(records []netattach.Record) {
	deadline := time.Now().Add(gidWait)
	for _, r := range records {
		for _, p := range r.PodAddrs() {
			for !n.hasGID(r.Device, p.Addr()) {
				if time.Now().After(deadline) {
					n.Log.Warnf("%s: no GID for %s within %v; NCCL may pick another index", r.Device, p.Addr(), gidWait)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
}

// hasGID tells whether a port of ibdev lists addr's GID.
func (n *PodNetworker) hasGID(ibdev string, addr netip.Addr) bool {
	root := sysfs.Root(n.Sysfs)
	ports, _ := os.ReadDir(root.Path("class/infiniband", ibdev, "ports"))
	want := netip.AddrFrom16(addr.As16())
	rd := sysfs.NewReader()
	for _, port := range ports {
		dir := root.Path("class/infiniband", ibdev, "ports", port.Name(), "gids")
		slots, _ := os.ReadDir(dir)
		for _, slot := range slots {
			s, err := rd.Read(filepath.Join(dir, slot.Name()))
			if err != nil {
				continue
			}
			if g, err := sysfs.ParseGID(dir, s); err == nil && g == want {
				return true
			}
		}
	}
	return false
}

// describeRecords is records in one line: "eth3 moved in as eth3 (10.0.63.3/24)".
func describeRecords(records []netattach.Record) string {
	parts := make([]string, 0, len(records))
	for _, r := range records {
		how := "moved in as"
		if r.Mode == podnet.ModeSubInterface {
			how = "sub-interface"
		}
		parts = append(parts, fmt.Sprintf("%s's %s %s %s %v", r.Device, r.HostNetDev, how, r.PodInterface, r.PodAddrs()))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// planPod is PodAttachments over the driver's current view.
func (d *Driver) planPod(uid types.UID, pool podnet.Allocator) ([]podnet.Attachment, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return PodAttachments(d.prepared, uid, d.Name, d.inv, NodeFacts{Node: d.node, NodeIPs: d.nodeIPs}, pool)
}
