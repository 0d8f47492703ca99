package ldsandbox

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// runFilter evaluates a seccomp program on one system call as the kernel
// would on a little-endian machine: the instructions seccompFilter emits,
// and nothing else.
func runFilter(t *testing.T, prog []unix.SockFilter, arch, nr uint32, arg0 uint64) uint32 {
	t.Helper()
	var data [64]byte // struct seccomp_data
	binary.LittleEndian.PutUint32(data[seccompDataNR:], nr)
	binary.LittleEndian.PutUint32(data[seccompDataArch:], arch)
	binary.LittleEndian.PutUint64(data[seccompDataArg0:], arg0)
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = binary.LittleEndian.Uint32(data[in.K:])
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			if acc == in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			if acc&in.K != 0 {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		default:
			t.Fatalf("instruction %d: code %#x the evaluator does not know", pc, in.Code)
		}
	}
	t.Fatal("the program ran off its end")
	return 0
}

func TestSeccompFilter(t *testing.T) {
	const (
		allow  = unix.SECCOMP_RET_ALLOW
		kill   = unix.SECCOMP_RET_KILL_PROCESS
		eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	)
	for _, goarch := range []string{"amd64", "arm64"} {
		t.Run(goarch, func(t *testing.T) {
			prog, err := seccompFilter(goarch)
			must(t, err)
			if len(prog) > unix.BPF_MAXINSNS {
				t.Fatalf("%d instructions", len(prog))
			}
			arch, x32, _ := seccompArch(goarch)
			for _, s := range deniedSyscalls {
				if got := runFilter(t, prog, arch, s.nr, 0); got != eperm {
					t.Errorf("%s: %#x, want EPERM", s.name, got)
				}
			}
			// What ldconfig and Go's runtime do, allowed (this binary's
			// numbers: the filter's logic is the same for both).
			for _, nr := range []uint32{unix.SYS_READ, unix.SYS_OPENAT, unix.SYS_GETDENTS64, unix.SYS_SYMLINKAT,
				unix.SYS_RENAMEAT, unix.SYS_EXECVE, unix.SYS_EXIT_GROUP, unix.SYS_PRLIMIT64, unix.SYS_MMAP} {
				if got := runFilter(t, prog, arch, nr, 0); got != allow {
					t.Errorf("syscall %d: %#x, want allowed", nr, got)
				}
			}
			thread := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM)
			if got := runFilter(t, prog, arch, unix.SYS_CLONE, thread); got != allow {
				t.Errorf("clone of a thread: %#x", got)
			}
			if got := runFilter(t, prog, arch, unix.SYS_CLONE, uint64(unix.SIGCHLD)); got != allow {
				t.Errorf("fork through clone: %#x", got)
			}
			for _, f := range []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET,
				unix.CLONE_NEWIPC, unix.CLONE_NEWUTS, unix.CLONE_NEWCGROUP} {
				if got := runFilter(t, prog, arch, unix.SYS_CLONE, uint64(unix.SIGCHLD)|f); got != eperm {
					t.Errorf("clone with %#x: %#x, want EPERM", f, got)
				}
			}
			if got := runFilter(t, prog, arch, unix.SYS_CLONE3, 0); got != enosys {
				t.Errorf("clone3: %#x, want ENOSYS", got)
			}
			// Another ABI on the same machine: 32-bit x86 through int 0x80,
			// 32-bit arm, and x32 under x86_64's own audit arch.
			for _, other := range []uint32{unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_ARM, unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_AARCH64} {
				if other == arch {
					continue
				}
				if got := runFilter(t, prog, other, unix.SYS_READ, 0); got != kill {
					t.Errorf("arch %#x: %#x, want the process killed", other, got)
				}
			}
			if x32 {
				if got := runFilter(t, prog, arch, x32SyscallBit|unix.SYS_READ, 0); got != kill {
					t.Errorf("x32 read: %#x, want the process killed", got)
				}
			}
		})
	}
	if _, err := seccompFilter("riscv64"); err == nil || !strings.Contains(err.Error(), "no seccomp filter for ldconfig on riscv64") {
		t.Errorf("riscv64: %v", err)
	}
}

func TestParseSandboxArgs(t *testing.T) {
	a, err := parseSandboxArgs([]string{flagMountNS, flagOwner + "=1000:1001", flagNoMountSetattr, "/root", "/a", "/b"})
	must(t, err)
	if !a.mountNS || !a.noSetattr || a.owner == nil || *a.owner != (Owner{1000, 1001}) || a.root != "/root" || strings.Join(a.folders, " ") != "/a /b" {
		t.Errorf("%+v", a)
	}
	a, err = parseSandboxArgs([]string{"/root"})
	must(t, err)
	if a.mountNS || a.noSetattr || a.owner != nil || a.root != "/root" || len(a.folders) != 0 {
		t.Errorf("%+v", a)
	}
	for _, bad := range [][]string{nil, {flagMountNS}, {"--bogus", "/root"}, {flagOwner + "=x", "/root"}} {
		if _, err := parseSandboxArgs(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The engine's own mounts at and under the root are stacked under the
// sandbox's bind: only the bind and what is below it are checked, and a
// mount hidden under another on its mount point is not.
func TestCheckLockedDown(t *testing.T) {
	const root = "/run/ctr/rootfs"
	engine := []string{
		`90 1 0:40 / / rw - ext4 /dev/sda1 rw`,
		`100 90 0:50 / /run/ctr/rootfs rw,relatime - overlay overlay rw`,
		`101 100 0:51 / /run/ctr/rootfs/proc rw,nosuid,nodev,noexec - proc proc rw`,
		`102 100 0:52 / /run/ctr/rootfs/dev rw,nosuid - tmpfs tmpfs rw`,
		`110 90 0:60 / /run/ctr/other rw - ext4 /dev/sdb rw`,
	}
	sandbox := []string{
		`200 100 0:50 / /run/ctr/rootfs rw,nosuid,nodev,noexec,relatime - overlay overlay rw`,
		`201 200 0:51 / /run/ctr/rootfs/proc rw,nosuid,nodev,noexec - proc proc rw`,
		`202 200 0:52 / /run/ctr/rootfs/dev rw,nosuid,nodev,noexec - tmpfs tmpfs rw`,
		`203 202 0:53 / /run/ctr/rootfs/dev/shm rw,nosuid,nodev,noexec - tmpfs shm rw`,
		`204 203 0:54 / /run/ctr/rootfs/dev/shm rw,nosuid,nodev,noexec - tmpfs shm2 rw`,
		`205 200 0:55 / /run/ctr/rootfs/data\040dir rw,nosuid,nodev,noexec - ext4 /dev/sdc rw`,
	}
	info := strings.Join(append(engine, sandbox...), "\n")
	must(t, checkLockedDown(info, root))
	visible, err := visibleMounts(info, root)
	must(t, err)
	var dirs []string
	for _, m := range visible {
		dirs = append(dirs, fmt.Sprintf("%d:%s", m.id, m.dir))
	}
	if got := strings.Join(dirs, " "); got != "200:/ 201:/proc 202:/dev 205:/data dir 204:/dev/shm" {
		t.Errorf("visible mounts: %s", got)
	}
	for _, tc := range []struct{ line, want string }{
		{`206 200 0:56 / /run/ctr/rootfs/vol rw,nosuid,noexec - ext4 /dev/sdd rw`, "mount /vol (ext4) in /run/ctr/rootfs is not nodev"},
		{`206 205 0:56 / /run/ctr/rootfs/data\040dir/x rw,nodev,noexec - ext4 /dev/sdd rw`, "mount /data dir/x (ext4) in /run/ctr/rootfs is not nosuid"},
		{`206 204 0:56 / /run/ctr/rootfs/dev/shm/y rw,nosuid,nodev - ext4 /dev/sdd rw`, "is not noexec"},
	} {
		if err := checkLockedDown(info+"\n"+tc.line, root); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.line, err, tc.want)
		}
	}
	// Hidden under the sandbox's bind, or outside the root: not checked.
	if err := checkLockedDown(info+"\n"+`206 100 0:56 / /run/ctr/rootfs/vol rw - ext4 /dev/sdd rw`, root); err != nil {
		t.Errorf("an engine mount under the bind: %v", err)
	}
	if _, err := visibleMounts(strings.Join(engine[:1], "\n"), root); err == nil {
		t.Error("no mount at the root: no error")
	}
}

// ldconfig needs no capability for its work: as root, on a root whose
// files are root's (a container sharing the host's ids), and as the owner,
// on a root whose files are the owner's (a user-namespaced container).
func TestSandboxLdconfigNeedsNoCapability(t *testing.T) {
	needRoot(t)
	ldconfig := firstExisting(defaultLdconfigs)
	lib, err := filepath.EvalSymlinks("/usr/lib/x86_64-linux-gnu/libibverbs.so.1")
	if err != nil {
		t.Skipf("no host libibverbs to copy: %v", err)
	}
	data, err := os.ReadFile(lib)
	must(t, err)
	for _, owner := range []*Owner{nil, {UID: 100000, GID: 100000}} {
		t.Run(fmt.Sprint(owner != nil), func(t *testing.T) {
			root := containerLikeRoot(t)
			must(t, os.MkdirAll(filepath.Join(root, "opt/rdma/lib"), 0o755))
			must(t, os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("/opt/rdma/lib\n"), 0o644))
			must(t, os.WriteFile(filepath.Join(root, "opt/rdma/lib", filepath.Base(lib)), data, 0o644))
			if owner != nil {
				for _, d := range []string{".", "etc", "etc/ld.so.conf", "opt", "opt/rdma", "opt/rdma/lib", "opt/rdma/lib/" + filepath.Base(lib)} {
					must(t, os.Lchown(filepath.Join(root, d), owner.UID, owner.GID))
				}
			}
			if out, err := runSandbox(t, Options{Root: root, Owner: owner}); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			st, err := os.Stat(filepath.Join(root, "etc/ld.so.cache"))
			must(t, err)
			wantUID := 0
			if owner != nil {
				wantUID = owner.UID
			}
			if uid := int(st.Sys().(*syscall.Stat_t).Uid); uid != wantUID {
				t.Errorf("ld.so.cache belongs to %d, want %d", uid, wantUID)
			}
			out, err := exec.Command(ldconfig, "-p", "-C", filepath.Join(root, "etc/ld.so.cache")).CombinedOutput()
			must(t, err)
			if !strings.Contains(string(out), "libibverbs.so.1 ") || !strings.Contains(string(out), "/opt/rdma/lib/libibverbs.so.1") {
				t.Errorf("the cache does not list the library:\n%s", out)
			}
			if _, err := os.Lstat(filepath.Join(root, "opt/rdma/lib/libibverbs.so.1")); err != nil {
				t.Errorf("no soname link: %v", err)
			}
		})
	}
}

// orphanEnv makes the test binary, in TestMain, a hook that starts a
// sandbox on the root the variable names, lets it run a blocked ldconfig,
// prints its pid and exits without waiting.
const orphanEnv = "RDMA_CDI_LDSANDBOX_TEST_ORPHAN_ROOT"

func runOrphaningHook() {
	root := os.Getenv(orphanEnv)
	if root == "" {
		return
	}
	s, err := New(Options{Root: root, Folders: []string{"/opt/lib"}, Timeout: time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	r, err := s.Start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := r.awaitStart(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	go func() { _, _ = r.Proceed() }()
	fmt.Println(r.cmd.Process.Pid)
	time.Sleep(500 * time.Millisecond) // ldconfig is blocked on the FIFO by now
	os.Exit(0)
}

// The sandbox is the first process of its PID namespace, which ignores
// signals it has no handler for, from inside it: the parent-death signal,
// sent from the hook's namespace, still ends it and its ldconfig with the
// hook.
func TestSandboxDiesWithTheHook(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	must(t, os.MkdirAll(filepath.Join(root, "opt/lib"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), nil, 0o644))
	must(t, unix.Mkfifo(filepath.Join(root, "opt/fifo"), 0o644))
	must(t, os.Symlink("/opt/fifo", filepath.Join(root, "opt/lib/libblock.so.1")))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), orphanEnv+"="+root)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the hook: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	must(t, err)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return // gone, or a zombie waiting for its new parent
		}
		if time.Now().After(deadline) {
			_ = unix.Kill(pid, unix.SIGKILL)
			t.Fatalf("the sandbox (%d) outlived its hook: %s", pid, stat)
		}
	}
}
