package networker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/attach"
)

// NamespaceOps is the work done inside the node's and the pods' network
// namespaces (pkg/podnetwork/attach): what needs CAP_NET_ADMIN,
// CAP_NET_RAW and CAP_SYS_ADMIN. Local does it in this process (systemd,
// the bootstrap install, tests); the chart's agents hold none of those
// capabilities and ask the pod-network worker (pkg/podnetwork/netnsworker)
// over a unix socket. A pod's namespace is named by the path the runtime
// gave; id is the sandbox's, under which the implementation keeps the
// namespace open from a successful Apply until Release has given back all
// it holds (a runtime may unpin it before it says the sandbox stopped).
type NamespaceOps interface {
	// PodLinkNames are the names of the links the pod's namespace holds.
	PodLinkNames(netnsPath string) (map[string]bool, error)
	// Plan reads what each attachment needs before anything changes
	// (attach.Plan), one record each, in order.
	Plan(netnsPath string, plans []podnetwork.Attachment) ([]attach.Record, error)
	// Apply makes records (from Plan, recorded) in the pod's namespace, in
	// order, and returns them as made. On error nothing is left: what was
	// made is undone, and the error says what that undo could not do. On
	// success the namespace is held for id.
	Apply(id, netnsPath string, records []attach.Record) ([]attach.Record, error)
	// Release undoes records, last first, in the namespace held for id,
	// else the one at netnsPath, else (gone) in the node's alone. It
	// returns the records it could not undo, and lets go of the namespace
	// once none is left.
	Release(id, netnsPath string, records []attach.Record) ([]attach.Record, error)
	// Gone says that sandbox id's namespace is gone: not held, and no
	// longer at netnsPath.
	Gone(id, netnsPath string) (bool, error)
	// Ready returns once the work can be done, or with ctx's error: at
	// once in this process; the worker's client once the worker answers.
	Ready(ctx context.Context) error
}

// ErrOutcomeUnknown marks an Apply whose result never came back (the
// worker's connection broke): what it made, if anything, is not known,
// and the caller gives the records back itself.
var ErrOutcomeUnknown = errors.New("the pod-network worker's answer was lost")

// Local is NamespaceOps in this process, which needs the capabilities.
type Local struct {
	// NodeNetNS is the node's network namespace ("" for the process's own).
	NodeNetNS string

	mu sync.Mutex
	// held are the sandboxes' network namespaces, open from their start
	// until what they were given is back. A runtime may remove a
	// sandbox's namespace before it tells NRI that the sandbox stopped
	// (CRI-O 1.34's stopPodSandbox unmounts /var/run/netns/ID, then calls
	// NRI's StopPodSandbox), and a namespace nothing holds is destroyed
	// with what was moved into it: a physical netdev falls back to the
	// initial namespace without its addresses, a virtual one is deleted.
	held map[string]netns.NsHandle
}

var _ NamespaceOps = (*Local)(nil)

func (l *Local) PodLinkNames(netnsPath string) (map[string]bool, error) {
	ns, err := attach.Open(l.NodeNetNS, netnsPath)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	return attach.PodLinkNames(ns)
}

func (l *Local) Plan(netnsPath string, plans []podnetwork.Attachment) ([]attach.Record, error) {
	ns, err := attach.Open(l.NodeNetNS, netnsPath)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	return PlanIn(ns, plans)
}

// PlanIn is Plan in namespaces already open.
func PlanIn(ns attach.Namespaces, plans []podnetwork.Attachment) ([]attach.Record, error) {
	records := make([]attach.Record, 0, len(plans))
	for _, a := range plans {
		r, err := attach.Plan(ns, a)
		if err != nil {
			return nil, err
		}
		records = append(records, r)
	}
	return records, nil
}

func (l *Local) Apply(id, netnsPath string, records []attach.Record) ([]attach.Record, error) {
	ns, err := attach.Open(l.NodeNetNS, netnsPath)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	if err := ApplyIn(ns, records); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hold(id, ns.Pod)
	return records, nil
}

// ApplyIn applies records in namespaces already open, in order; on error
// it undoes those made, last first.
func ApplyIn(ns attach.Namespaces, records []attach.Record) error {
	for i := range records {
		if err := attach.Apply(ns, &records[i]); err != nil {
			return errors.Join(err, DetachAll(ns, records[:i]))
		}
	}
	return nil
}

func (l *Local) Release(id, netnsPath string, records []attach.Record) ([]attach.Record, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ns, err := l.open(id, netnsPath)
	if err != nil {
		if ns, err = attach.OpenNode(l.NodeNetNS); err != nil {
			return records, err
		}
	}
	defer ns.Close()
	left, err := ReleaseIn(ns, records)
	if len(left) == 0 {
		l.letGo(id)
	}
	return left, err
}

// ReleaseIn undoes records in namespaces already open, last first, and
// returns those it could not undo.
func ReleaseIn(ns attach.Namespaces, records []attach.Record) ([]attach.Record, error) {
	var left []attach.Record
	var errs []error
	for i := len(records) - 1; i >= 0; i-- {
		if err := attach.Detach(ns, records[i]); err != nil {
			left = append(left, records[i])
			errs = append(errs, err)
		}
	}
	return left, errors.Join(errs...)
}

// Ready returns at once: this process does the work.
func (l *Local) Ready(context.Context) error { return nil }

func (l *Local) Gone(id, netnsPath string) (bool, error) {
	l.mu.Lock()
	_, held := l.held[id]
	l.mu.Unlock()
	if held || netnsPath == "" {
		return false, nil
	}
	_, err := os.Stat(netnsPath)
	return errors.Is(err, fs.ErrNotExist), nil
}

// Held is how many namespaces l holds.
func (l *Local) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

// LetGo closes the handle of sandbox id's namespace, if held.
func (l *Local) LetGo(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.letGo(id)
}

// hold keeps a handle of sandbox id's network namespace (pod's duplicate)
// until Release has given back all it was given. l.mu is held. Without
// it (no descriptor left) Release opens the namespace by its path, as
// after a restart.
func (l *Local) hold(id string, pod netns.NsHandle) {
	h, err := DupHandle(pod)
	if err != nil {
		return // Release opens it by its path
	}
	if old, ok := l.held[id]; ok {
		old.Close()
	}
	if l.held == nil {
		l.held = map[string]netns.NsHandle{}
	}
	l.held[id] = h
}

// letGo closes the handle hold kept for sandbox id. l.mu is held.
func (l *Local) letGo(id string) {
	if h, ok := l.held[id]; ok {
		h.Close()
		delete(l.held, id)
	}
}

// open opens the node's namespace and sandbox id's: the one held since its
// start, which the runtime may have unpinned already, else the one at
// path. l.mu is held.
func (l *Local) open(id, path string) (attach.Namespaces, error) {
	h, ok := l.held[id]
	if !ok {
		return attach.Open(l.NodeNetNS, path)
	}
	ns, err := attach.OpenNode(l.NodeNetNS)
	if err != nil {
		return ns, err
	}
	if ns.Pod, err = DupHandle(h); err != nil {
		ns.Close()
		return attach.Namespaces{}, fmt.Errorf("pod network namespace %s: %w", path, err)
	}
	return ns, nil
}

// DupHandle is a new descriptor (close-on-exec) of h's namespace.
func DupHandle(h netns.NsHandle) (netns.NsHandle, error) {
	fd, err := unix.FcntlInt(uintptr(h), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return netns.None(), err
	}
	return netns.NsHandle(fd), nil
}

// DetachAll undoes records, last first.
func DetachAll(ns attach.Namespaces, records []attach.Record) error {
	var errs []error
	for i := len(records) - 1; i >= 0; i-- {
		errs = append(errs, attach.Detach(ns, records[i]))
	}
	return errors.Join(errs...)
}
