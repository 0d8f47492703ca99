// Package hookevents carries what each container hook did to the node
// agent, whose metrics count it: one datagram per hook run on a unix
// datagram socket.
//
// A datagram, because the hook is on the path of every container start and
// must never wait: Send is one non-blocking sendto of a few hundred bytes,
// and where no agent listens, or its queue is full (the kernel bounds it),
// the outcome is dropped, not retried, queued or written to disk. A lost
// outcome costs a count; a blocked hook would cost a container start. The
// socket is the agent's, root's alone (0600 in a 0700 directory), and the
// agent checks each sender's credentials and every field, since whatever a
// hook reports partly comes from the container (its annotations).
package hookevents

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
)

// MaxSize bounds one datagram; the agent drops larger ones.
const MaxSize = 4096

// The user space a container ran (the user-space step's decision).
const (
	UserSpaceImage = "image" // the image's own RDMA stack
	UserSpaceHost  = "host"  // the host's, lent
)

// Outcome is what one hook run did for one container.
type Outcome struct {
	Hook string `json:"hook"`
	// ContainerID is the OCI state's id.
	ContainerID string `json:"id"`
	// Pid and StartTime (clock ticks since boot, /proc/PID/stat) are the
	// container's init on the host: without a usable Cgroup, an agent that
	// has the host's /proc forgets the container when that process is
	// gone, and a reused pid has another start time.
	Pid       int    `json:"pid,omitempty"`
	StartTime uint64 `json:"start,omitempty"`
	// Cgroup is the init's cgroup as a path under the host's cgroup mount
	// root, /sys/fs/cgroup (see ProcCgroups): the agent, which has no host
	// /proc in a DaemonSet, holds the container while that cgroup has a
	// process ("" when the hook could not tell; older hooks send pid and
	// start time alone, or a v2 path on cgroup v2 hosts alone).
	Cgroup string `json:"cgroup,omitempty"`
	// Namespace, Pod and Container name a Kubernetes container, from the
	// CRI's annotations ("" elsewhere).
	Namespace string `json:"ns,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Container string `json:"ctr,omitempty"`
	// Devices are the HCAs the container got (their uverbs nodes).
	Devices []string `json:"devices,omitempty"`
	// UserSpace is UserSpaceImage or UserSpaceHost, "" when the step did
	// not decide.
	UserSpace string `json:"userSpace,omitempty"`
	// FailedStep is the step that failed ("" when the hook succeeded);
	// Reason is Reason of its error.
	FailedStep string `json:"failedStep,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// Failure reasons: a small, fixed set, so that a metric labeled by them
// stays small.
const (
	ReasonNotFound   = "not_found"
	ReasonPermission = "permission"
	ReasonNoSpace    = "no_space"
	ReasonReadOnly   = "read_only"
	ReasonTimeout    = "timeout"
	ReasonInvalid    = "invalid"
	ReasonOther      = "other"
)

// StepLoad is the failed step of a hook that failed before its steps: the
// OCI state, the container or the configuration.
const StepLoad = "load"

// steps are the failed steps a report may name: StepLoad and the hooks'.
var steps = []string{StepLoad, string(apis.HookMemlock), string(apis.HookUserSpace), string(apis.HookUpdateLDCache), string(apis.HookNCCLConf)}

var reasons = []string{ReasonNotFound, ReasonPermission, ReasonNoSpace, ReasonReadOnly, ReasonTimeout, ReasonInvalid, ReasonOther}

// Steps are the steps a report may name as failed; Reasons the reasons.
// The agent starts every combination's counter at 0, so that a rate over
// them exists before the first failure.
func Steps() []string   { return slices.Clone(steps) }
func Reasons() []string { return slices.Clone(reasons) }

// Reason classifies err by the errno it carries.
func Reason(err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return ReasonNotFound
	case errors.Is(err, os.ErrPermission), errors.Is(err, syscall.EPERM):
		return ReasonPermission
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return ReasonNoSpace
	case errors.Is(err, syscall.EROFS):
		return ReasonReadOnly
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return ReasonTimeout
	case errors.Is(err, syscall.EINVAL), errors.Is(err, errInvalid):
		return ReasonInvalid
	}
	return ReasonOther
}

var errInvalid = errors.New("invalid")

// Invalid marks err as bad input (a state or config that does not parse)
// for Reason; its message stays err's.
func Invalid(err error) error { return invalidError{err} }

type invalidError struct{ err error }

func (e invalidError) Error() string   { return e.err.Error() }
func (e invalidError) Unwrap() []error { return []error{e.err, errInvalid} }

// Send sends o to the agent at socket without ever blocking; every error
// (no agent, a full queue) means the outcome is dropped.
func Send(socket string, o Outcome) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	if len(b) > MaxSize {
		return fmt.Errorf("hook outcome of %d bytes, more than %d", len(b), MaxSize)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Sendto(fd, b, unix.MSG_DONTWAIT, &unix.SockaddrUnix{Name: socket})
}

// Check validates o as the agent must: names shaped as names, lengths and
// counts bounded, the user space and reason from their sets, the cgroup a
// path that cannot lead out of the agent's cgroup mount.
func Check(o Outcome) error {
	for _, f := range []struct{ name, v string }{
		{"hook", o.Hook}, {"id", o.ContainerID}, {"ns", o.Namespace}, {"pod", o.Pod},
		{"ctr", o.Container}, {"failedStep", o.FailedStep},
	} {
		if f.v != "" && !IsName(f.v) {
			return fmt.Errorf("field %s: %q is not a name", f.name, f.v)
		}
	}
	if o.Hook == "" || o.ContainerID == "" {
		return errors.New("no hook or container id")
	}
	if len(o.Devices) > maxDevices {
		return fmt.Errorf("%d devices, more than %d", len(o.Devices), maxDevices)
	}
	for _, d := range o.Devices {
		if !IsName(d) {
			return fmt.Errorf("device %q is not a name", d)
		}
	}
	if o.UserSpace != "" && o.UserSpace != UserSpaceImage && o.UserSpace != UserSpaceHost {
		return fmt.Errorf("user space %q", o.UserSpace)
	}
	if o.FailedStep != "" && !slices.Contains(steps, o.FailedStep) {
		return fmt.Errorf("step %q", o.FailedStep)
	}
	if o.Reason != "" && !slices.Contains(reasons, o.Reason) {
		return fmt.Errorf("reason %q", o.Reason)
	}
	if o.Pid < 0 {
		return fmt.Errorf("pid %d", o.Pid)
	}
	if o.Cgroup != "" && !IsCgroupPath(o.Cgroup) {
		return fmt.Errorf("cgroup %.80q is not a clean absolute path of safe characters", o.Cgroup)
	}
	return nil
}

const maxDevices = 256

// IsName accepts what Kubernetes names, container ids and ibdev names all
// fit: up to 253 of A-Z a-z 0-9 _ . : -, not starting with a punctuation.
// (No regexp: its compilation would run at every hook's start.)
func IsName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != ':' && c != '+' && c != '-') {
			return false
		}
	}
	return true
}
