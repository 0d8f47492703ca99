package hookevents

import (
	"bytes"
	"errors"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// maxCgroupLen bounds a reported cgroup path. Engines' paths are far
// shorter (a Kubernetes pod's container under systemd, nested in a kind
// node, is about 330 bytes); each held container keeps its path.
const maxCgroupLen = 1024

// IsCgroupPath accepts a cgroup v2 path as a hook may report it: absolute
// and cleaned (so without "." or ".." elements: the agent joins it under
// its own cgroup mount), at most maxCgroupLen bytes of A-Z a-z 0-9 and
// / _ . : @ + -, which is what engines and systemd name cgroups with.
func IsCgroupPath(p string) bool {
	if len(p) == 0 || len(p) > maxCgroupLen || p[0] != '/' || path.Clean(p) != p {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && c != '/' && c != '_' && c != '.' && c != ':' && c != '@' && c != '+' && c != '-' {
			return false
		}
	}
	return true
}

// UnifiedCgroup is the cgroup v2 path in the text of a /proc/PID/cgroup
// file: its "0::" line ("" without one, on a host of cgroup v1 alone). The
// path is relative to the reader's cgroup namespace.
func UnifiedCgroup(procCgroup []byte) string {
	for line := range bytes.Lines(procCgroup) {
		if p, ok := bytes.CutPrefix(bytes.TrimRight(line, "\n"), []byte("0::")); ok {
			return string(p)
		}
	}
	return ""
}

// Init is a container's init as its hook reported it: what the agent
// checks to tell whether the container still runs.
type Init struct {
	Pid       int
	StartTime uint64
	Cgroup    string
}

// Init is the container's init as o reports it.
func (o Outcome) Init() Init { return Init{Pid: o.Pid, StartTime: o.StartTime, Cgroup: o.Cgroup} }

// Liveness tells whether a container's init still runs from what the agent
// sees of the host: the init's cgroup under the sysfs root (the agent's
// read-only /sys, which brings the cgroup2 mount along), else its pid and
// start time in the host's procfs, where the agent has one.
type Liveness struct {
	// Sysfs is the sysfs root; the cgroup v2 hierarchy is at fs/cgroup.
	Sysfs string
	// Proc is the host's procfs for the pid check; "" when the agent has
	// none (a DaemonSet without the host's /proc or PID namespace).
	Proc string
}

// Alive reports whether init still runs. A container whose liveness
// cannot be told at all (no usable cgroup, no procfs to look in) counts as
// gone: held, it would be reported as a holder for ever.
func (l Liveness) Alive(init Init) bool {
	if alive, known := CgroupPopulated(filepath.Join(l.Sysfs, "fs/cgroup"), init.Cgroup); known {
		return alive
	}
	return l.Proc != "" && init.Pid > 0 && Alive(l.Proc, init.Pid, init.StartTime)
}

// CgroupPopulated reads whether the cgroup at path (under the cgroup v2
// mount at root) still has a process, by its cgroup.events. known is false
// when that says nothing of the container: no path or the root cgroup "/"
// (a runtime that gives containers none), root not a cgroup v2 mount (a
// host of cgroup v1, or a hybrid one, where v2 is at unified/), or a read
// error other than the cgroup being gone.
func CgroupPopulated(root, cgroup string) (alive, known bool) {
	if cgroup == "/" || !IsCgroupPath(cgroup) {
		return false, false
	}
	// Every cgroup v2 directory, the root's included, has this file.
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		return false, false
	}
	events, err := readSmall(filepath.Join(root, cgroup, "cgroup.events"))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, true // removed with its container
	case err != nil:
		return false, false
	}
	for line := range bytes.Lines(events) {
		switch string(bytes.TrimSpace(line)) {
		case "populated 1":
			return true, true
		case "populated 0":
			return false, true
		}
	}
	return false, false
}

// readSmall reads the start of a small kernel file (cgroup.events is two
// short lines) with one read into a bounded buffer; O_NONBLOCK, so that a
// FIFO in a fixture tree fails instead of blocking.
func readSmall(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 256)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	return buf[:n], nil
}
