package ldsandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
)

// The sandbox's file descriptors and flags, as Run passes them.
const (
	// ldconfigFD is the sealed host ldconfig (ExtraFiles[0]).
	ldconfigFD = 3
	// goAheadFD is a pipe (ExtraFiles[1]): one byte on it starts the work,
	// end of file without one ends the sandbox (Running.Abort).
	goAheadFD = 4
	// mountNSFD is the container's mount namespace (ExtraFiles[2]), when
	// the flag flagMountNS comes first.
	mountNSFD   = 5
	flagMountNS = "--mount-ns"
	// flagOwner=UID:GID: run ldconfig as these host ids.
	flagOwner = "--owner"
	// flagNoMountSetattr: act as on a kernel without mount_setattr(2)
	// (tests: forceNoMountSetattr).
	flagNoMountSetattr = "--no-mount-setattr"
)

// forceNoMountSetattr makes Start pass flagNoMountSetattr (tests only).
var forceNoMountSetattr bool

// Limits on ldconfig inside the sandbox. Real images need a few MiB and a
// dozen descriptors.
var limits = []struct {
	resource int
	value    uint64
}{
	{unix.RLIMIT_NOFILE, 64},       // an include loop stops at 64 open files
	{unix.RLIMIT_FSIZE, 256 << 20}, // the cache it writes
	{unix.RLIMIT_CPU, 10},          // seconds
	{unix.RLIMIT_CORE, 0},
	{unix.RLIMIT_AS, 1 << 30}, // an endless or huge include stops here, not at the host's memory
}

// RunIfSandbox becomes the sandbox when this process was started as one
// (argv[0] is Argv0), and returns otherwise. main calls it first, as does
// the TestMain of every package whose tests run ldconfig: Run re-executes
// /proc/self/exe, which is the test binary there.
func RunIfSandbox() {
	if filepath.Base(os.Args[0]) != Argv0 {
		return
	}
	// Success is ldconfig's own exit, or an abort before any work.
	if err := waitForGoAhead(); err != nil {
		if errors.Is(err, errAborted) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "ldconfig sandbox: %v\n", err)
		os.Exit(1)
	}
	// sandbox returns only when it could not exec ldconfig.
	fmt.Fprintf(os.Stderr, "ldconfig sandbox: %v\n", sandbox(os.Args[1:]))
	os.Exit(1)
}

var errAborted = errors.New("aborted before any work")

// waitForGoAhead blocks until the caller's Proceed (one byte) or Abort
// (end of file). The caller keeps its end open until the sandbox exits:
// parentGone tells from it whether the hook is still there.
func waitForGoAhead() error {
	var b [1]byte
	for {
		n, err := unix.Read(goAheadFD, b[:])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return fmt.Errorf("waiting to proceed: %w", err)
		case n == 0:
			return errAborted
		}
		return nil
	}
}

// parentGone tells whether the hook that started the sandbox has exited:
// its end of the go-ahead pipe is then closed. (The sandbox is the first
// process of its own PID namespace, where getppid(2) is 0 whoever the
// parent is.)
func parentGone(fds []unix.PollFd) bool {
	for {
		fds[0] = unix.PollFd{Fd: goAheadFD, Events: unix.POLLIN}
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err != nil || n > 0 && fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
	}
}

// sandboxArgs is the sandbox's command line: flags, the root, the folders.
type sandboxArgs struct {
	mountNS   bool   // flagMountNS: enter the mount namespace on mountNSFD first
	owner     *Owner // flagOwner
	noSetattr bool   // flagNoMountSetattr
	root      string
	folders   []string
}

func parseSandboxArgs(args []string) (sandboxArgs, error) {
	var a sandboxArgs
	// The root is an absolute path (New): what starts with "--" is a flag.
	for ; len(args) > 0 && strings.HasPrefix(args[0], "--"); args = args[1:] {
		switch flag, value, _ := strings.Cut(args[0], "="); flag {
		case flagMountNS:
			a.mountNS = true
		case flagNoMountSetattr:
			a.noSetattr = true
		case flagOwner:
			var o Owner
			if _, err := fmt.Sscanf(value, "%d:%d", &o.UID, &o.GID); err != nil {
				return a, fmt.Errorf("%s: %w", args[0], err)
			}
			a.owner = &o
		default:
			return a, fmt.Errorf("unknown flag %s", args[0])
		}
	}
	if len(args) < 1 {
		return a, fmt.Errorf("usage: %s [%s] [%s=UID:GID] [%s] ROOT [FOLDER...]", Argv0, flagMountNS, flagOwner, flagNoMountSetattr)
	}
	a.root, a.folders = args[0], args[1:]
	return a, nil
}

func sandbox(argv []string) error {
	// Whatever the hook inherited without close-on-exec (an engine's
	// descriptor of the host's "/") must not reach ldconfig, whose parsing
	// of the image's files is the part an image can aim at. Done while
	// /proc is still the host's, for the fallback.
	if err := closeOnExecFrom(ldconfigFD); err != nil {
		return err
	}
	args, err := parseSandboxArgs(argv)
	if err != nil {
		return err
	}
	nsFD := -1 // the sandbox's own, which it shares with the caller
	if args.mountNS {
		nsFD = mountNSFD
	}
	// Only now, after the go-ahead: the copy has what the caller mounted
	// meanwhile.
	if err := privateMountNS(nsFD); err != nil {
		return err
	}
	if err := confine(args.root, args.noSetattr); err != nil {
		return err
	}
	if err := limitTheWalk(); err != nil {
		return err
	}
	if err := checkConfGraph("/", "/etc/ld.so.conf"); err != nil {
		return err
	}
	return execLdconfig(append([]string{"ldconfig"}, args.folders...), args.owner)
}

// closeOnExecFrom marks every descriptor from first on close-on-exec
// (close_range(2), or one by one from /proc/self/fd on kernels before
// 5.11).
func closeOnExecFrom(first int) error {
	if unix.CloseRange(uint(first), ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return nil
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("listing inherited descriptors: %w", err)
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < first {
			continue
		}
		// The directory's own descriptor is gone by now: EBADF.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return fmt.Errorf("descriptor %d: %w", fd, err)
		}
	}
	return nil
}

// privateMountNS moves this thread, for good, into a private copy of the
// mount namespace fd names (fd < 0: of its own). setns(2) lets only a
// thread with a filesystem context of its own change mount namespace, and
// Go's threads share one, so the thread unshares it first; everything
// after (confine, the exec of ldconfig) runs on this thread, which stays
// locked.
func privateMountNS(fd int) error {
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare the filesystem context: %w", err)
	}
	if fd >= 0 {
		if err := unix.Setns(fd, unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("entering the container's mount namespace: %w", err)
		}
		_ = unix.Close(fd)
	}
	// A copy of it, so that nothing mounted here reaches the container.
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare the mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mounts private: %w", err)
	}
	return nil
}

// confine makes root the sandbox's "/", with proc and sysfs masked and no
// device, setuid or executable file usable under it. privateMountNS put
// this thread in a private mount namespace, so none of it is seen outside.
func confine(root string, noSetattr bool) error {
	if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s onto itself: %w", root, err)
	}
	if err := lockDown(root, noSetattr); err != nil {
		return err
	}
	// thread-self: this thread may be in another mount namespace than the
	// process's first thread (enterMountNS).
	mounts, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return err
	}
	// Fail closed, whichever way the flags were set.
	if err := checkLockedDown(string(mounts), root); err != nil {
		return err
	}
	for _, dir := range magicMounts(string(mounts), root) {
		if err := mask(root, dir); err != nil {
			return err
		}
	}
	if err := checkMasked(root); err != nil {
		return err
	}
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("chdir %s: %w", root, err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root into %s: %w", root, err)
	}
	// The host's tree is now stacked on "/": detach it.
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the host's root: %w", err)
	}
	return unix.Chdir("/")
}

// lockedDown are the mount flags every mount under the sandbox's root
// gets: no device node, setuid bit or executable file of the image (or of
// a volume in it) works there.
const lockedDown = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC

// lockDown sets lockedDown on the bind of root and on every mount below
// it, in one mount_setattr(2) (Linux 5.12). Where the kernel has none
// (ENOSYS; noSetattr acts so for the tests), it remounts each visible
// mount instead (MS_REMOUNT|MS_BIND with the flags each one has kept), and
// refuses if that fails: ldconfig never runs where a device node could
// open.
func lockDown(root string, noSetattr bool) error {
	var err error = unix.ENOSYS
	if !noSetattr {
		attr := unix.MountAttr{Attr_set: lockedDown}
		err = unix.MountSetattr(unix.AT_FDCWD, root, unix.AT_RECURSIVE, &attr)
	}
	if err == nil {
		return nil
	}
	if err != unix.ENOSYS {
		return fmt.Errorf("nosuid,nodev,noexec on %s: %w", root, err)
	}
	if err := remountEach(root); err != nil {
		return fmt.Errorf("this kernel has no mount_setattr(2) (Linux 5.12 or later has), and remounting each mount under %s nosuid,nodev,noexec failed: %w; refusing to run ldconfig there", root, err)
	}
	return nil
}

// remountEach remounts every mount visible under root with lockedDown
// added to the flags it has. A mount's read-only and atime flags go into
// the remount too: MS_REMOUNT|MS_BIND replaces them all, and the kernel
// refuses to change those a less privileged user namespace inherited
// locked.
func remountEach(root string) error {
	info, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return err
	}
	visible, err := visibleMounts(string(info), root)
	if err != nil {
		return err
	}
	for _, m := range visible {
		if err := remountLockedDown(root, m.dir); err != nil {
			return err
		}
	}
	return nil
}

func remountLockedDown(root, dir string) error {
	// In-root, as mask does: the mount's own root, reached through no
	// link of the image's.
	h, err := pathrs.OpenInRoot(root, dir)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	defer h.Close()
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(h.Fd()), &st); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	for _, f := range []struct {
		st int64
		ms uintptr
	}{
		{unix.ST_RDONLY, unix.MS_RDONLY},
		{unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME},
		{unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if st.Flags&f.st != 0 {
			flags |= f.ms
		}
	}
	if st.Flags&(unix.ST_NOATIME|unix.ST_RELATIME) == 0 {
		flags |= unix.MS_STRICTATIME // the kernel would make it relatime
	}
	target := fmt.Sprintf("/proc/self/fd/%d", h.Fd())
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		return fmt.Errorf("remounting %s: %w", dir, err)
	}
	return nil
}

// mountEntry is one line of mountinfo.
type mountEntry struct {
	id, parent int
	dir        string // the mount point: a host path, or in-root from visibleMounts
	options    string // the mount's own (per mount point) options
	fstype     string
}

func parseMountinfo(mountinfo string) []mountEntry {
	var out []mountEntry
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		fields, fsFields := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 6 || len(fsFields) < 1 {
			continue
		}
		id, err1 := strconv.Atoi(fields[0])
		parent, err2 := strconv.Atoi(fields[1])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, mountEntry{id: id, parent: parent, dir: unescapeMountinfo(fields[4]), options: fields[5], fstype: fsFields[0]})
	}
	return out
}

// inRoot is a host path's in-root form, if it is root or under it.
func inRoot(p, root string) (string, bool) {
	rel, ok := strings.CutPrefix(p, root)
	if !ok || rel != "" && rel[0] != '/' {
		return "", false
	}
	return "/" + strings.TrimPrefix(rel, "/"), true
}

// visibleMounts lists, from mountinfo, the mounts a path under root can
// reach, mount points in-root: the topmost mount at root (the sandbox's
// bind, stacked on the engine's own mounts there) and every mount below
// it but those hidden under a later one on the same mount point.
func visibleMounts(mountinfo, root string) ([]mountEntry, error) {
	all := parseMountinfo(mountinfo)
	children := map[int][]mountEntry{}
	for _, m := range all {
		children[m.parent] = append(children[m.parent], m)
	}
	// stackedOn: a child of m at m's own mount point hides m.
	stackedOn := func(m mountEntry) bool {
		for _, c := range children[m.id] {
			if c.dir == m.dir {
				return true
			}
		}
		return false
	}
	var top *mountEntry
	for i, m := range all {
		if m.dir == root && !stackedOn(m) {
			top = &all[i]
		}
	}
	if top == nil {
		return nil, fmt.Errorf("no mount at %s in mountinfo", root)
	}
	var out []mountEntry
	queue := []mountEntry{*top}
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		queue = append(queue, children[m.id]...)
		dir, ok := inRoot(m.dir, root)
		if !ok || stackedOn(m) {
			continue
		}
		m.dir = dir
		out = append(out, m)
	}
	return out, nil
}

// checkLockedDown fails closed: every mount a path under root reaches must
// be nosuid, nodev and noexec, however lockDown set them.
func checkLockedDown(mountinfo, root string) error {
	visible, err := visibleMounts(mountinfo, root)
	if err != nil {
		return err
	}
	for _, m := range visible {
		opts := strings.Split(m.options, ",")
		for _, want := range []string{"nosuid", "nodev", "noexec"} {
			if !slices.Contains(opts, want) {
				return fmt.Errorf("mount %s (%s) in %s is not %s after locking the root down; refusing to run ldconfig there", m.dir, m.fstype, root, want)
			}
		}
	}
	return nil
}

// magicMounts lists, from mountinfo, the proc and sysfs mounts at or under
// root, as in-root paths, outermost first and without those below another
// (masking /proc hides /proc/sys too). procfs is where magic links such as
// /proc/1/root lead out of any root.
func magicMounts(mountinfo, root string) []string {
	var dirs []string
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		fields, fsFields := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(fsFields) < 1 {
			continue
		}
		if fs := fsFields[0]; fs != "proc" && fs != "sysfs" {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if rel, ok := strings.CutPrefix(mp, root); ok && (rel == "" || rel[0] == '/') {
			dirs = append(dirs, "/"+strings.TrimPrefix(rel, "/"))
		}
	}
	sort.Strings(dirs)
	var outer []string
	for _, d := range dirs {
		if len(outer) > 0 {
			last := outer[len(outer)-1]
			if d == last || strings.HasPrefix(d, strings.TrimSuffix(last, "/")+"/") {
				continue
			}
		}
		outer = append(outer, d)
	}
	return outer
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// mask mounts an empty read-only tmpfs on dir, resolved in-root so that a
// symlink swapped in since mountinfo was read cannot aim it elsewhere.
func mask(root, dir string) error {
	h, err := pathrs.OpenInRoot(root, dir)
	if err != nil {
		return fmt.Errorf("masking %s in %s: %w", dir, root, err)
	}
	defer h.Close()
	target := fmt.Sprintf("/proc/self/fd/%d", h.Fd())
	flags := uintptr(unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if err := unix.Mount("tmpfs", target, "tmpfs", flags, "size=4k,nr_inodes=1,mode=0555"); err != nil {
		return fmt.Errorf("masking %s in %s: %w", dir, root, err)
	}
	return nil
}

// checkMasked fails closed: whatever mountinfo said, the root's own /proc
// and /sys must not be a procfs or a sysfs once the masks are on.
func checkMasked(root string) error {
	for _, dir := range []string{"/proc", "/sys"} {
		h, err := pathrs.OpenInRoot(root, dir)
		if err != nil {
			continue // absent: nothing to leak through
		}
		var st unix.Statfs_t
		err = unix.Fstatfs(int(h.Fd()), &st)
		h.Close()
		if err != nil {
			return fmt.Errorf("checking %s in %s: %w", dir, root, err)
		}
		if fs := magicFS(st.Type); fs != "" {
			return fmt.Errorf("%s in %s is still a live %s after masking; refusing to run ldconfig there", dir, root, fs)
		}
	}
	return nil
}

// magicFS names the file systems whose paths lead out of a root.
func magicFS(fsType int64) string {
	switch fsType {
	case unix.PROC_SUPER_MAGIC:
		return "procfs"
	case unix.SYSFS_MAGIC:
		return "sysfs"
	}
	return ""
}

// limitTheWalk sets, before the walk of the image's linker config, the
// limits that bound this Go process as well as ldconfig: CPU time counts
// across the exec, so RLIMIT_CPU bounds the walk and ldconfig together.
// RLIMIT_AS waits for execLdconfig: the Go runtime has already reserved
// more address space than it allows (about 1.2 GiB at start), and would
// die at its next reservation; the walk bounds its own memory instead
// (conf.go), and the run's timeout, counted from Proceed, covers it too.
func limitTheWalk() error {
	for _, l := range limits {
		if l.resource == unix.RLIMIT_AS {
			continue
		}
		if err := unix.Setrlimit(l.resource, &unix.Rlimit{Cur: l.value, Max: l.value}); err != nil {
			return fmt.Errorf("rlimit %d: %w", l.resource, err)
		}
	}
	return nil
}

// execLdconfig replaces the sandbox by the sealed ldconfig, with the limits
// set, no capability, no_new_privs and the seccomp filter. Everything that
// allocates happens before the first limit.
func execLdconfig(argv []string, owner *Owner) error {
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return err
	}
	envp, err := syscall.SlicePtrFromStrings(apis.HookEnv)
	if err != nil {
		return err
	}
	empty, err := syscall.BytePtrFromString("")
	if err != nil {
		return err
	}
	filter, err := seccompFilter(runtime.GOARCH)
	if err != nil {
		return err
	}
	prog := &unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	pollFDs := make([]unix.PollFd, 1)
	if _, err := unix.FcntlInt(ldconfigFD, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return fmt.Errorf("host ldconfig on fd %d: %w", ldconfigFD, err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// Capabilities, in the order their own checks allow: the bounding set
	// while CAP_SETPCAP is there, the ids while CAP_SETUID is, the rest
	// last (caps.go).
	if err := dropBoundingAndAmbient(); err != nil {
		return err
	}
	if owner != nil {
		if err := becomeOwner(*owner); err != nil {
			return err
		}
	}
	if err := clearCapabilities(); err != nil {
		return err
	}
	// The parent-death signal Go set at the fork belongs to the first
	// thread, and changing ids clears it: set it again on this thread,
	// which ldconfig becomes, and give up if the hook is already gone.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	if parentGone(pollFDs) {
		return errors.New("the hook that started the sandbox has exited")
	}
	if err := installSeccomp(prog); err != nil {
		return err
	}
	// A Go process has already reserved more address space than
	// RLIMIT_AS allows ldconfig, so from the first limit on nothing may
	// allocate: the values are laid out beforehand and set with raw
	// system calls, right before the exec.
	values := make([]unix.Rlimit, len(limits))
	for i, l := range limits {
		values[i] = unix.Rlimit{Cur: l.value, Max: l.value}
	}
	for i := range limits {
		if _, _, errno := unix.RawSyscall6(unix.SYS_PRLIMIT64, 0, uintptr(limits[i].resource),
			uintptr(unsafe.Pointer(&values[i])), 0, 0, 0); errno != 0 { //nolint:gosec // a raw system call takes its argument's address

			return fmt.Errorf("rlimit %d: %w", limits[i].resource, errno)
		}
	}
	// execveat(fd, "", argv, envp, AT_EMPTY_PATH): Go has no wrapper.
	_, _, errno := unix.Syscall6(unix.SYS_EXECVEAT, ldconfigFD, uintptr(unsafe.Pointer(empty)), //nolint:gosec // a raw system call takes pointers
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])), unix.AT_EMPTY_PATH, 0) //nolint:gosec // as above
	runtime.KeepAlive(filter)
	return fmt.Errorf("executing the host's ldconfig: %w", errno)
}

// becomeOwner drops to the owner's ids (Go applies them to every thread).
func becomeOwner(o Owner) error {
	if err := syscall.Setgroups([]int{o.GID}); err != nil {
		return fmt.Errorf("setgroups %d: %w", o.GID, err)
	}
	if err := syscall.Setresgid(o.GID, o.GID, o.GID); err != nil {
		return fmt.Errorf("setresgid %d: %w", o.GID, err)
	}
	if err := syscall.Setresuid(o.UID, o.UID, o.UID); err != nil {
		return fmt.Errorf("setresuid %d: %w", o.UID, err)
	}
	return nil
}
