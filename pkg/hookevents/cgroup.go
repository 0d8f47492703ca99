package hookevents

import (
	"bytes"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxCgroupLen bounds a reported cgroup path. Engines' paths are far
// shorter (a Kubernetes pod's container under systemd, nested in a kind
// node, is about 330 bytes); each held container keeps its path.
const maxCgroupLen = 1024

// IsCgroupPath accepts a cgroup path as a hook may report it (see
// ProcCgroups): absolute and cleaned (so without "." or ".." elements: the
// agent joins it under its own cgroup mount root), at most maxCgroupLen
// bytes of A-Z a-z 0-9 and / _ . : @ + -, which is what engines and
// systemd name cgroups with.
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

// CgroupLayout is how a host mounts its cgroup hierarchies under the
// cgroup mount root (sysfs's fs/cgroup).
type CgroupLayout int

const (
	// CgroupV1: a tmpfs of v1 hierarchies, each in a directory of its own
	// (pids, systemd for name=systemd, ...).
	CgroupV1 CgroupLayout = iota
	// CgroupHybrid: v1 hierarchies, and cgroup v2 at unified.
	CgroupHybrid
	// CgroupV2: the mount root is the cgroup v2 hierarchy.
	CgroupV2
)

// CgroupLayoutAt is the layout of the cgroup mount root at root.
func CgroupLayoutAt(root string) CgroupLayout {
	switch {
	case exists(filepath.Join(root, "cgroup.controllers")):
		return CgroupV2
	case exists(filepath.Join(root, "unified/cgroup.controllers")):
		return CgroupHybrid
	}
	return CgroupV1
}

// ProcCgroups are the cgroups that the text of a /proc/PID/cgroup file
// places the process in, as paths under a cgroup mount root of layout,
// the preferred first: the v2 one (its "0::" line; under unified on a
// hybrid host), whose cgroup.events counts the processes of its
// descendants too; then v1's pids hierarchy, which systemd mounts alone at
// pids; then name=systemd's. A hierarchy's root cgroup, which every
// process outside a container shares, is left out. The paths are relative
// to the reader's cgroup namespace: a caller checks that the cgroup lists
// the process under its own mount.
func ProcCgroups(procCgroup []byte, layout CgroupLayout) []string {
	var v2, pids, systemd string
	for line := range bytes.Lines(procCgroup) {
		id, rest, _ := strings.Cut(strings.TrimSuffix(string(line), "\n"), ":")
		switch controllers, p, _ := strings.Cut(rest, ":"); {
		case id == "0" && controllers == "":
			v2 = p
		case controllers == "pids":
			pids = p
		case controllers == "name=systemd":
			systemd = p
		}
	}
	var out []string
	add := func(mount, p string) {
		if len(p) > 1 && p[0] == '/' && IsCgroupPath(mount+p) {
			out = append(out, mount+p)
		}
	}
	switch layout {
	case CgroupV2:
		add("", v2)
	case CgroupHybrid:
		add("/unified", v2)
		fallthrough
	default:
		add("/pids", pids)
		add("/systemd", systemd)
	}
	return out
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
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
// read-only /sys, which brings the cgroup mounts along), else its pid and
// start time in the host's procfs, where the agent has one.
type Liveness struct {
	// Sysfs is the sysfs root; the cgroup mount root is at fs/cgroup.
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

// CgroupPopulated reads whether the cgroup at path cgroup under the cgroup
// mount root (as ProcCgroups names it) still has a process: by its
// cgroup.events (v2), else by whether its cgroup.procs lists one (v1 has
// no cgroup.events; the cgroup stays, empty, until the runtime removes
// it). known is false when that says nothing of the container: no path, a
// hierarchy's root, a hierarchy the agent does not see, or a read error
// other than the cgroup being gone.
func CgroupPopulated(root, cgroup string) (alive, known bool) {
	if !IsCgroupPath(cgroup) {
		return false, false
	}
	dir := filepath.Join(root, cgroup)
	if h := hierarchy(root, cgroup); h == "" || h == dir {
		return false, false
	}
	events, err := readSmall(filepath.Join(dir, "cgroup.events"))
	if err == nil {
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
	if !errors.Is(err, os.ErrNotExist) {
		return false, false
	}
	// One bounded read: whether there is a first pid is all that matters.
	procs, err := readSmall(filepath.Join(dir, "cgroup.procs"))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, true // removed with its container
	case err != nil:
		return false, false
	}
	return len(bytes.TrimSpace(procs)) > 0, true
}

// hierarchy is the mount under root that holds cgroup: root itself where
// it is a cgroup hierarchy (v2), else the directory of the path's first
// element (a v1 hierarchy, or hybrid's unified). It is "" where that has
// no cgroup.procs, as every hierarchy's root has: not mounted in the
// agent's view (an empty mount point) or absent, so that a container there
// is not taken for gone.
func hierarchy(root, cgroup string) string {
	if exists(filepath.Join(root, "cgroup.procs")) {
		return root
	}
	first, _, _ := strings.Cut(cgroup[1:], "/")
	if h := filepath.Join(root, first); first != "" && exists(filepath.Join(h, "cgroup.procs")) {
		return h
	}
	return ""
}

// readSmall reads the start of a small kernel file (cgroup.events is a
// few short lines; of cgroup.procs, the first pids) with one read into a
// bounded buffer; O_NONBLOCK, so that a FIFO in a fixture tree fails
// instead of blocking.
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
