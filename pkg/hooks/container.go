package hooks

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Container is one container as a hook sees it: its state, its config and
// its root, held open, with the state's pid checked to belong to it.
type Container struct {
	State specs.State
	Spec  *specs.Spec
	*Root
	// Pid is the container's init as the hook's own pid namespace numbers
	// it (for prlimit); ProcPid is the same process as /proc numbers it.
	// They differ in a createContainer hook, which runs in the container's
	// pid namespace while /proc is still the host's.
	Pid     int
	ProcPid int
	proc    *os.File // O_PATH handle of /proc/ProcPid: pins the process
}

// Load reads the bundle's config.json, opens the root and verifies that
// st.Pid is this container's process, refusing any other (the host's PID 1,
// the hook itself, another container).
func Load(st specs.State) (*Container, error) {
	spec, err := LoadSpec(st.Bundle)
	if err != nil {
		return nil, err
	}
	root, err := OpenRoot(RootfsPath(st.Bundle, spec))
	if err != nil {
		return nil, err
	}
	c := &Container{State: st, Spec: spec, Root: root}
	if err := c.findProcess(); err != nil {
		root.Close()
		return nil, err
	}
	return c, nil
}

// Close releases the root and the process handle.
func (c *Container) Close() error {
	if c.proc != nil {
		c.proc.Close()
	}
	return c.Root.Close()
}

// ReadOnly reports whether config.json asks for a read-only root.
func (c *Container) ReadOnly() bool { return c.Spec.Root != nil && c.Spec.Root.Readonly }

// NetNSPath names the container process's network namespace through the
// pinned /proc handle, so a recycled pid cannot swap the namespace.
func (c *Container) NetNSPath() string { return fmt.Sprintf("/proc/self/fd/%d/ns/net", c.proc.Fd()) }

// findProcess locates the state's pid in /proc and checks that its root or
// its working directory is the container's root (runc starts its init in
// the rootfs and hooks run before pivot_root, so the root only matches
// once the container runs).
//
// Engines number the pid differently per stage: runc gives createRuntime
// hooks the host pid of its init, but createContainer hooks the pid from
// inside the container's pid namespace (usually 1), and runs them as
// children of that init. So a pid that is not this container in /proc but
// is the hook's own parent is looked up as the parent's /proc pid.
func (c *Container) findProcess() error {
	pid := c.State.Pid
	err := c.checkProc(pid)
	if err == nil {
		c.Pid, c.ProcPid = pid, pid
		return nil
	}
	if pid == unix.Getppid() {
		if ppid, perr := procParent(); perr == nil && ppid != pid {
			if c.checkProc(ppid) == nil {
				c.Pid, c.ProcPid = pid, ppid
				return nil
			}
		}
	}
	return err
}

func (c *Container) checkProc(pid int) error {
	dir := "/proc/" + strconv.Itoa(pid)
	h, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("OCI state pid %d: %w", pid, err)
	}
	for _, link := range []string{"root", "cwd"} {
		var st unix.Stat_t
		if err := unix.Fstatat(int(h.Fd()), link, &st, 0); err == nil && c.Root.same(&st) {
			if c.proc != nil {
				c.proc.Close()
			}
			c.proc = h
			return nil
		}
	}
	h.Close()
	return fmt.Errorf("OCI state pid %d is not container %s: neither %s/root nor %s/cwd is its root %s", pid, c.State.ID, dir, dir, c.Root.Path())
}

// procParent reads the hook's parent pid as /proc numbers it.
func procParent() (int, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PPid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("/proc/self/status: no PPid line")
}

// netNSToOpen is the namespace file for netinfo.Open: "" when the hook
// already runs in the container's network namespace (a createContainer
// hook), since switching namespaces there would fail: the hook sits in the
// container's pid namespace while /proc is still the host's, so the
// thread's own /proc/PID/task/TID path does not exist.
func (c *Container) netNSToOpen() string {
	var self, ctr unix.Stat_t
	if unix.Stat("/proc/self/ns/net", &self) == nil && unix.Fstatat(int(c.proc.Fd()), "ns/net", &ctr, 0) == nil &&
		self.Dev == ctr.Dev && self.Ino == ctr.Ino {
		return ""
	}
	return c.NetNSPath()
}
