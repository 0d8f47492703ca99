package ldsandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ldconfig reads files, lists directories, writes one cache file and makes
// soname links: it needs none of the system calls below, each of which
// either reaches past the sandbox (mounts, namespaces, other processes'
// memory, file handles that skip path resolution) or is kernel attack
// surface that a bug in ldconfig's parsing of a hostile image could aim
// at. The filter answers them with EPERM; it allows the rest, so that a
// newer ldconfig's system calls keep working. Numbers are those of the
// binary's own architecture (golang.org/x/sys/unix's, per GOARCH).
var deniedSyscalls = []struct {
	name string
	nr   uint32
}{
	// mounts, old API and new
	{"mount", unix.SYS_MOUNT},
	{"umount2", unix.SYS_UMOUNT2},
	{"pivot_root", unix.SYS_PIVOT_ROOT},
	{"open_tree", unix.SYS_OPEN_TREE},
	{"move_mount", unix.SYS_MOVE_MOUNT},
	{"fsopen", unix.SYS_FSOPEN},
	{"fsconfig", unix.SYS_FSCONFIG},
	{"fsmount", unix.SYS_FSMOUNT},
	{"fspick", unix.SYS_FSPICK},
	{"mount_setattr", unix.SYS_MOUNT_SETATTR},
	// namespaces (clone and clone3: see seccompFilter)
	{"unshare", unix.SYS_UNSHARE},
	{"setns", unix.SYS_SETNS},
	// other processes and the kernel itself
	{"ptrace", unix.SYS_PTRACE},
	{"process_vm_readv", unix.SYS_PROCESS_VM_READV},
	{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV},
	{"kexec_load", unix.SYS_KEXEC_LOAD},
	{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD},
	{"init_module", unix.SYS_INIT_MODULE},
	{"finit_module", unix.SYS_FINIT_MODULE},
	{"delete_module", unix.SYS_DELETE_MODULE},
	{"bpf", unix.SYS_BPF},
	{"perf_event_open", unix.SYS_PERF_EVENT_OPEN},
	{"userfaultfd", unix.SYS_USERFAULTFD},
	{"io_uring_setup", unix.SYS_IO_URING_SETUP},
	{"io_uring_enter", unix.SYS_IO_URING_ENTER},
	{"io_uring_register", unix.SYS_IO_URING_REGISTER},
	// the network: with no socket, ldconfig reaches no interface, abstract
	// socket or netlink of the host, which a network namespace of its own
	// would also give, at a millisecond or more per container start to make
	// one and later to tear it down
	{"socket", unix.SYS_SOCKET},
	{"socketpair", unix.SYS_SOCKETPAIR},
	// keys
	{"keyctl", unix.SYS_KEYCTL},
	{"add_key", unix.SYS_ADD_KEY},
	{"request_key", unix.SYS_REQUEST_KEY},
	// files by handle, past any root
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT},
	{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT},
	// the machine
	{"reboot", unix.SYS_REBOOT},
	{"swapon", unix.SYS_SWAPON},
	{"swapoff", unix.SYS_SWAPOFF},
	{"acct", unix.SYS_ACCT},
	{"quotactl", unix.SYS_QUOTACTL},
	{"quotactl_fd", unix.SYS_QUOTACTL_FD},
	{"sethostname", unix.SYS_SETHOSTNAME},
	{"setdomainname", unix.SYS_SETDOMAINNAME},
}

// namespaceCloneFlags are clone(2)'s flags that make a namespace. The low
// byte of clone's flags is the exit signal, so CLONE_NEWTIME (0x80, valid
// in clone3 and unshare only) is not among them.
const namespaceCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// x32SyscallBit marks the x32 ABI's system calls, which run under
// AUDIT_ARCH_X86_64 with numbers of their own.
const x32SyscallBit = 0x40000000

// Offsets in struct seccomp_data: the system call's number, its
// architecture and its first argument (the lower half on a little-endian
// machine, which both supported ones are).
const (
	seccompDataNR   = 0
	seccompDataArch = 4
	seccompDataArg0 = 16
)

// seccompArch is the audit architecture of this binary's system calls, and
// whether that architecture also carries the x32 ABI.
func seccompArch(goarch string) (arch uint32, x32 bool, err error) {
	switch goarch {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, true, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, false, nil
	}
	return 0, false, fmt.Errorf("no seccomp filter for ldconfig on %s (amd64 and arm64 have one)", goarch)
}

// seccompFilter is the classic BPF program installed before ldconfig is
// executed:
//
//   - a system call of another ABI than the binary's (i386 through int
//     0x80, x32, 32-bit arm) kills the process: the deny-list holds this
//     ABI's numbers only, and ldconfig uses no other;
//   - a system call of deniedSyscalls fails with EPERM;
//   - clone with a namespace flag fails with EPERM;
//   - clone3 fails with ENOSYS: its flags are in memory, which the filter
//     cannot read, and ENOSYS is what makes a C library fall back to clone;
//   - everything else is allowed.
func seccompFilter(goarch string) ([]unix.SockFilter, error) {
	arch, x32, err := seccompArch(goarch)
	if err != nil {
		return nil, err
	}
	load := func(off uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
	}
	jump := func(op uint16, k uint32, jt, jf int) unix.SockFilter {
		if jt > 255 || jf > 255 {
			panic("seccomp filter: jump too long") // the lists above are fixed
		}
		return unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, K: k, Jt: uint8(jt), Jf: uint8(jf)}
	}
	ret := func(k uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k} }
	const (
		allow  = unix.SECCOMP_RET_ALLOW
		kill   = unix.SECCOMP_RET_KILL_PROCESS
		eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	)
	prog := []unix.SockFilter{
		load(seccompDataArch),
		jump(unix.BPF_JEQ, arch, 1, 0),
		ret(kill),
		load(seccompDataNR),
	}
	if x32 {
		prog = append(prog, jump(unix.BPF_JSET, x32SyscallBit, 0, 1), ret(kill))
	}
	// After the deny-list, its tail (offsets from its first instruction):
	//
	//	0 clone3?        -> 6
	//	1 not clone?     -> 4
	//	2 load clone's flags
	//	3 namespace flag? -> 5, else 4
	//	4 allow
	//	5 EPERM
	//	6 ENOSYS
	n := len(deniedSyscalls)
	for i, s := range deniedSyscalls {
		prog = append(prog, jump(unix.BPF_JEQ, s.nr, n-i-1+5, 0))
	}
	return append(prog,
		jump(unix.BPF_JEQ, unix.SYS_CLONE3, 5, 0),
		jump(unix.BPF_JEQ, unix.SYS_CLONE, 0, 2),
		load(seccompDataArg0),
		jump(unix.BPF_JSET, namespaceCloneFlags, 1, 0),
		ret(allow),
		ret(eperm),
		ret(enosys),
	), nil
}

// installSeccomp puts prog on the calling thread, which no_new_privs
// allows without privileges; execve keeps it for ldconfig, and the Go
// runtime's other threads, which do not get it, end at that execve.
func installSeccomp(prog *unix.SockFprog) error {
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(prog)), 0, 0); err != nil { //nolint:gosec // the kernel reads the program through this pointer
		return fmt.Errorf("seccomp filter: %w", err)
	}
	return nil
}
