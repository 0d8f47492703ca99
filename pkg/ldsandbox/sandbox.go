package ldsandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/hookname"
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
)

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
	parent := os.Getppid()
	if err := waitForGoAhead(); err != nil {
		if errors.Is(err, errAborted) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "ldconfig sandbox: %v\n", err)
		os.Exit(1)
	}
	// sandbox returns only when it could not exec ldconfig.
	fmt.Fprintf(os.Stderr, "ldconfig sandbox: %v\n", sandbox(os.Args[1:], parent))
	os.Exit(1)
}

var errAborted = errors.New("aborted before any work")

// waitForGoAhead blocks until the caller's Proceed (one byte) or Abort
// (end of file).
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
		return unix.Close(goAheadFD)
	}
}

func sandbox(args []string, parent int) error {
	// Whatever the hook inherited without close-on-exec (an engine's
	// descriptor of the host's "/") must not reach ldconfig, whose parsing
	// of the image's files is the part an image can aim at. Done while
	// /proc is still the host's, for the fallback.
	if err := closeOnExecFrom(ldconfigFD); err != nil {
		return err
	}
	var owner *Owner
	nsFD := -1 // the sandbox's own, which it shares with the caller
	if len(args) > 0 && args[0] == flagMountNS {
		nsFD, args = mountNSFD, args[1:]
	}
	// Only now, after the go-ahead: the copy has what the caller mounted
	// meanwhile.
	if err := privateMountNS(nsFD); err != nil {
		return err
	}
	if len(args) > 0 && strings.HasPrefix(args[0], flagOwner+"=") {
		var o Owner
		if _, err := fmt.Sscanf(strings.TrimPrefix(args[0], flagOwner+"="), "%d:%d", &o.UID, &o.GID); err != nil {
			return fmt.Errorf("%s: %w", args[0], err)
		}
		owner, args = &o, args[1:]
	}
	if len(args) < 1 {
		return fmt.Errorf("usage: %s [%s] [%s=UID:GID] ROOT [FOLDER...]", Argv0, flagMountNS, flagOwner)
	}
	root, folders := args[0], args[1:]
	if err := confine(root); err != nil {
		return err
	}
	if err := limitTheWalk(); err != nil {
		return err
	}
	if err := checkConfGraph("/", "/etc/ld.so.conf"); err != nil {
		return err
	}
	return execLdconfig(append([]string{"ldconfig"}, folders...), owner, parent)
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
func confine(root string) error {
	if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s onto itself: %w", root, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(unix.AT_FDCWD, root, unix.AT_RECURSIVE, &attr); err != nil && err != unix.ENOSYS {
		return fmt.Errorf("nosuid,nodev,noexec on %s: %w", root, err)
	}
	// thread-self: this thread may be in another mount namespace than the
	// process's first thread (enterMountNS).
	mounts, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
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
// set. Everything that allocates happens before the first limit.
func execLdconfig(argv []string, owner *Owner, parent int) error {
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return err
	}
	envp, err := syscall.SlicePtrFromStrings(hookname.Env)
	if err != nil {
		return err
	}
	empty, err := syscall.BytePtrFromString("")
	if err != nil {
		return err
	}
	if _, err := unix.FcntlInt(ldconfigFD, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return fmt.Errorf("host ldconfig on fd %d: %w", ldconfigFD, err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if owner != nil {
		if err := becomeOwner(*owner); err != nil {
			return err
		}
	}
	// The parent-death signal Go set at the fork belongs to the first
	// thread, and changing ids clears it: set it again on this thread,
	// which ldconfig becomes, and give up if the hook is already gone.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	if unix.Getppid() != parent {
		return errors.New("the hook that started the sandbox has exited")
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
