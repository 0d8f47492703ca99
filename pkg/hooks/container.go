package hooks

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/ldsandbox"
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
	// UserSpace is whose RDMA user space the container runs, once the
	// user-space step decided (hookevents.UserSpaceImage or UserSpaceHost).
	UserSpace string
	// proc is an O_PATH handle of /proc/ProcPid, which pins the process,
	// or of the hook's own /proc entry when it is the init's child in a
	// user namespace (see inheritedFromParent): its namespaces either way.
	proc *os.File
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
	if err := c.useContainersView(); err != nil {
		c.Close()
		return nil, err
	}
	if c.Root.owner, err = c.RootOwner(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// useContainersView reopens the root as the container's mount namespace
// has it, when the hook runs outside that namespace: a createRuntime hook
// runs in the runtime's, where the root lacks what the runtime mounted in
// it (the CDI spec's libraries, a volume over /etc). The process's root
// (before pivot_root, the namespace's "/") is where the root's host path
// is resolved, in-root, and the directory found must be the same one.
func (c *Container) useContainersView() error {
	same, err := c.sharesNamespace("mnt")
	if err != nil || same {
		return err
	}
	nsRoot, err := c.openProc("root", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer nsRoot.Close()
	h, err := pathrs.OpenatInRoot(nsRoot, c.Root.Path())
	if err != nil {
		return fmt.Errorf("root %s in container %s's mount namespace: %w", c.Root.Path(), c.State.ID, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(h.Fd()), &st); err != nil || !c.Root.same(&st) {
		h.Close()
		return fmt.Errorf("root %s in container %s's mount namespace is not the directory the host path names", c.Root.Path(), c.State.ID)
	}
	c.Root.fd.Close()
	c.Root.fd = h
	return nil
}

// sharesNamespace reports whether the hook is in the container process's
// namespace of that kind (a /proc/PID/ns entry name).
func (c *Container) sharesNamespace(kind string) (bool, error) {
	var self, ctr unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/"+kind, &self); err != nil {
		return false, fmt.Errorf("the hook's own %s namespace: %w", kind, err)
	}
	if err := unix.Fstatat(int(c.proc.Fd()), "ns/"+kind, &ctr, 0); err != nil {
		return false, fmt.Errorf("container %s's %s namespace: %w", c.State.ID, kind, err)
	}
	return self.Dev == ctr.Dev && self.Ino == ctr.Ino, nil
}

// MountNS opens the container's mount namespace when the hook is outside
// it (nil, nil when inside), for what must run there (ldsandbox).
func (c *Container) MountNS() (*os.File, error) {
	if same, err := c.sharesNamespace("mnt"); err != nil || same {
		return nil, err
	}
	return c.openProc("ns/mnt", unix.O_RDONLY)
}

// openProc opens an entry of the container process's pinned /proc
// directory; its magic links (root, ns/*) are followed, which in-root
// resolution would refuse.
func (c *Container) openProc(name string, flags int) (*os.File, error) {
	fd, err := unix.Openat(int(c.proc.Fd()), name, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("container %s's /proc entry %s: %w", c.State.ID, name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// RootOwner is the host uid and gid of the container's root when the hook
// runs outside the container's user namespace and config.json maps the
// container's root elsewhere (podman --uidmap, Kubernetes hostUsers:
// false); nil otherwise (files the hook makes are then the container
// root's already).
func (c *Container) RootOwner() (*ldsandbox.Owner, error) {
	if c.Spec.Linux == nil || len(c.Spec.Linux.UIDMappings) == 0 {
		return nil, nil
	}
	if same, err := c.sharesNamespace("user"); err != nil || same {
		return nil, err
	}
	uid, uok := hostID(c.Spec.Linux.UIDMappings)
	gid, gok := hostID(c.Spec.Linux.GIDMappings)
	if !uok || !gok {
		return nil, fmt.Errorf("config.json of container %s maps no host uid and gid to its root", c.State.ID)
	}
	return &ldsandbox.Owner{UID: uid, GID: gid}, nil
}

// hostID is the host id that container id 0 maps to.
func hostID(maps []specs.LinuxIDMapping) (int, bool) {
	for _, m := range maps {
		if m.ContainerID == 0 && m.Size > 0 {
			return int(m.HostID), true
		}
	}
	return 0, false
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
//
// In a user-namespaced container (podman --uidmap, Kubernetes hostUsers:
// false) the parent's root and cwd links cannot be read: reading them is a
// ptrace check, runc keeps its init non-dumpable until it execs the
// container's process, and the init's memory belongs to the host's user
// namespace, where the hook (root only in the container's) has no
// CAP_SYS_PTRACE. The hook then proves it through itself
// (inheritedFromParent).
func (c *Container) findProcess() error {
	pid := c.State.Pid
	// The hook's cwd may be the rootfs (createContainer), so its own
	// process would pass the check below.
	if pid == unix.Getpid() || strconv.Itoa(pid) == procSelf() {
		return fmt.Errorf("OCI state pid %d is this hook's own process, not container %s", pid, c.State.ID)
	}
	err := c.checkProc(pid)
	if err == nil {
		c.Pid, c.ProcPid = pid, pid
		return nil
	}
	if pid != unix.Getppid() {
		return err
	}
	ppid, perr := procParent()
	if perr != nil || ppid == pid {
		return err
	}
	perr = c.checkProc(ppid)
	if errors.Is(perr, errProcUnreadable) {
		if perr = c.inheritedFromParent(pid, ppid); perr != nil {
			return perr
		}
	}
	if perr != nil {
		return err
	}
	c.Pid, c.ProcPid = pid, ppid
	return nil
}

// errProcUnreadable marks a process whose root and cwd links this hook may
// not read (EACCES, EPERM), which says nothing about whose process it is.
var errProcUnreadable = errors.New("its root and cwd links cannot be read")

func (c *Container) checkProc(pid int) error {
	dir := "/proc/" + strconv.Itoa(pid)
	h, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("OCI state pid %d: %w", pid, err)
	}
	var denied []error
	for _, link := range []string{"root", "cwd"} {
		var st unix.Stat_t
		err := unix.Fstatat(int(h.Fd()), link, &st, 0)
		if err == nil && c.Root.same(&st) {
			c.setProc(h)
			return nil
		}
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			denied = append(denied, err)
		}
	}
	h.Close()
	if len(denied) == 2 {
		return fmt.Errorf("OCI state pid %d is not provably container %s: %w (%s: %w)", pid, c.State.ID, errProcUnreadable, dir, denied[0])
	}
	return fmt.Errorf("OCI state pid %d is not container %s: neither %s/root nor %s/cwd is its root %s", pid, c.State.ID, dir, dir, c.Root.Path())
}

func (c *Container) setProc(h *os.File) {
	if c.proc != nil {
		c.proc.Close()
	}
	c.proc = h
}

// inheritedFromParent accepts the hook's parent (pid in the hook's pid
// namespace, ppid in /proc's) as the container's init when its /proc links
// cannot be read, by what the hook inherited from it at fork: the hook
// runs in a pid namespace below /proc's (the container's, where runc runs
// createContainer hooks), and its own working directory, which it has not
// changed, is the container's root. That is the parent's cwd check made
// on the child. The hook's own /proc entry then stands for the container's
// namespaces, which it shares.
func (c *Container) inheritedFromParent(pid, ppid int) error {
	self, err := os.OpenFile("/proc/self", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("OCI state pid %d: %w", pid, err)
	}
	refuse := func(why string) error {
		self.Close()
		return fmt.Errorf("OCI state pid %d (/proc/%d) is not container %s: its /proc links cannot be read from this user namespace, and %s", pid, ppid, c.State.ID, why)
	}
	switch procSelf() {
	case "":
		return refuse("the hook's own /proc entry is unknown")
	case strconv.Itoa(unix.Getpid()):
		return refuse("the hook runs in /proc's pid namespace, not in a container's below it")
	}
	var cwd unix.Stat_t
	if err := unix.Fstatat(int(self.Fd()), "cwd", &cwd, 0); err != nil {
		return refuse(fmt.Sprintf("the hook's own cwd: %v", err))
	}
	if !c.Root.same(&cwd) {
		return refuse(fmt.Sprintf("the hook's working directory (inherited from pid %d) is not its root %s", pid, c.Root.Path()))
	}
	c.setProc(self)
	return nil
}

// procSelf is the hook's pid as /proc numbers it ("" if unknown).
func procSelf() string {
	link, _ := os.Readlink("/proc/self")
	return link
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
	if same, err := c.sharesNamespace("net"); err == nil && same {
		return ""
	}
	return c.NetNSPath()
}
