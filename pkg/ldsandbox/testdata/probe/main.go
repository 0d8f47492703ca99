// Command probe stands in for ldconfig in the sandbox tests: it writes what
// it sees from inside the sandbox to /probe-report, one fact per line.
package main

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The parent-death signal belongs to the thread that exec'd the probe;
// threads the probe's runtime starts have none. Locked in init, main runs
// on that first thread.
func init() { runtime.LockOSThread() }

func main() {
	var r []string
	add := func(format string, a ...any) { r = append(r, fmt.Sprintf(format, a...)) }
	add("args=%s", strings.Join(os.Args, " "))
	add("env=%s", strings.Join(os.Environ(), " "))
	for _, dir := range []string{"/proc", "/sys"} {
		entries, err := os.ReadDir(dir)
		add("entries %s=%d %v", dir, len(entries), err)
	}
	_, err := os.Stat("/proc/1/root")
	add("stat /proc/1/root=%v", err)
	marker, err := os.ReadFile("/marker-in-root")
	add("stat /marker-in-root=%v", err)
	add("read /marker-in-root=%q", marker)
	f, err := os.OpenFile("/dev/null", os.O_WRONLY, 0)
	if err == nil {
		f.Close()
	}
	add("open /dev/null=%v", err)
	err = os.WriteFile("/proc/escape", nil, 0o644)
	add("write /proc/escape=%v", err)
	for _, l := range []struct {
		name string
		res  int
	}{{"nofile", unix.RLIMIT_NOFILE}, {"as", unix.RLIMIT_AS}, {"cpu", unix.RLIMIT_CPU}} {
		var lim unix.Rlimit
		_ = unix.Getrlimit(l.res, &lim)
		add("rlimit %s=%d", l.name, lim.Max)
	}
	nnp, _ := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	add("no_new_privs=%d", nnp)
	var pdeath int32
	_ = unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&pdeath)), 0, 0, 0)
	add("pdeathsig=%d", pdeath)
	// Descriptors inherited across the exec: open and not close-on-exec
	// (Go's runtime opens its own with close-on-exec).
	var fds []string
	for fd := 3; fd < 1024; fd++ {
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			fds = append(fds, fmt.Sprint(fd))
		}
	}
	add("inherited fds=[%s]", strings.Join(fds, " "))
	privileges(add)
	namespaces(add)
	deniedCalls(add)
	mountFlags(add)
	if err := os.WriteFile("/probe-report", []byte(strings.Join(r, "\n")+"\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// privileges reports what /proc/self/status would (the sandbox masks
// /proc), from the system calls that answer the same: the capability sets
// as hex masks, no_new_privs above, and the seccomp mode (2: a filter).
func privileges(add func(string, ...any)) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		add("capget=%v", err)
	}
	mask := func(lo, hi uint32) uint64 { return uint64(hi)<<32 | uint64(lo) }
	add("CapEff=%016x", mask(data[0].Effective, data[1].Effective))
	add("CapPrm=%016x", mask(data[0].Permitted, data[1].Permitted))
	add("CapInh=%016x", mask(data[0].Inheritable, data[1].Inheritable))
	var bnd, amb uint64
	for c := 0; c < 64; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if err != nil {
			break // past the kernel's last capability
		}
		if in == 1 {
			bnd |= 1 << c
		}
		if set, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, uintptr(c), 0, 0); err == nil && set == 1 {
			amb |= 1 << c
		}
	}
	add("CapBnd=%016x", bnd)
	add("CapAmb=%016x", amb)
	mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	add("seccomp=%d %v", mode, err)
	add("uid=%d euid=%d", unix.Getuid(), unix.Geteuid())
}

// namespaces reports which of the host's PID and IPC namespaces the probe
// shares, and what it reaches of the host's network. /probe-ns, written by the test, names a SysV shared
// memory key and an abstract socket that the test made in its own.
func namespaces(add func(string, ...any)) {
	add("pid=%d ppid=%d", unix.Getpid(), unix.Getppid())
	var key int
	var sock string
	if b, err := os.ReadFile("/probe-ns"); err == nil {
		_, _ = fmt.Sscanf(string(b), "%d %s", &key, &sock)
	}
	if key != 0 {
		_, err := unix.SysvShmGet(key, 0, 0)
		add("host shm segment=%v", err)
	}
	if sock != "" {
		c, err := net.Dial("unix", "@"+sock)
		if err == nil {
			c.Close()
		}
		add("host abstract socket=%v", err)
	}
	ifs, err := net.Interfaces()
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	add("interfaces=[%s] %v", strings.Join(names, " "), err)
}

// deniedCalls tries system calls the sandbox's seccomp filter refuses,
// each chosen so that without the filter the kernel answers something
// else (success, EINVAL), and never with a new process.
func deniedCalls(add func(string, ...any)) {
	// Go's threads make a user namespace EINVAL without the filter.
	add("unshare(CLONE_NEWUSER)=%v", unix.Unshare(unix.CLONE_NEWUSER))
	_, err := unix.AddKey("user", "probe", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
	add("add_key=%v", err)
	// CLONE_NEWUSER with CLONE_FS is EINVAL to the kernel: no child either way.
	_, _, errno := unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_FS|uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	add("clone(CLONE_NEWUSER)=%v", errno)
	_, _, errno = unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0) // size 0: EINVAL to the kernel
	add("clone3=%v", errno)
	var params [120]byte // struct io_uring_params
	fd, _, errno := unix.RawSyscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)), 0)
	if errno == 0 {
		unix.Close(int(fd))
	}
	add("io_uring_setup=%v", errno)
	slash, _ := unix.BytePtrFromString("/")
	cwd := unix.AT_FDCWD
	fd, _, errno = unix.RawSyscall(unix.SYS_OPEN_TREE, uintptr(cwd), uintptr(unsafe.Pointer(slash)), 0)
	if errno == 0 {
		unix.Close(int(fd))
	}
	add("open_tree=%v", errno)
	add("socket(AF_INET)=%v", trySocket(unix.AF_INET, unix.SOCK_DGRAM))
	add("socket(AF_NETLINK)=%v", trySocket(unix.AF_NETLINK, unix.SOCK_RAW))
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.Close(pair[0])
		unix.Close(pair[1])
	}
	add("socketpair=%v", err)
}

// trySocket makes a socket and closes it at once: only the answer counts.
func trySocket(domain, typ int) error {
	fd, err := unix.Socket(domain, typ, 0)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// mountFlags reports how "/" is mounted and whether a file with its
// executable bits set runs there: /exec-probe, when the test wrote one, is
// a script whose interpreter does not exist (ENOENT where exec is allowed,
// EACCES on a noexec mount).
func mountFlags(add func(string, ...any)) {
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		add("statfs /=%v", err)
		return
	}
	var flags []string
	for _, f := range []struct {
		bit  int64
		name string
	}{{unix.ST_NOSUID, "nosuid"}, {unix.ST_NODEV, "nodev"}, {unix.ST_NOEXEC, "noexec"}} {
		if st.Flags&f.bit != 0 {
			flags = append(flags, f.name)
		}
	}
	add("statfs / flags=%s", strings.Join(flags, ","))
	if _, err := os.Stat("/exec-probe"); err == nil {
		add("exec /exec-probe=%v", unix.Exec("/exec-probe", []string{"exec-probe"}, nil))
	}
}
