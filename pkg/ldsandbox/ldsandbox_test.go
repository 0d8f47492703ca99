package ldsandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain lets Run re-execute this test binary as the sandbox.
func TestMain(m *testing.M) {
	RunIfSandbox()
	runOrphaningHook()
	os.Exit(m.Run())
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount namespaces, pivot_root)")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// buildProbe builds testdata/probe statically: the sandbox runs only
// binaries without an interpreter.
func buildProbe(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "probe")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, b)
	}
	return out
}

// runSandbox prepares and runs one sandbox; output and error are ldconfig's
// (or the probe's) and the sandbox's.
func runSandbox(t *testing.T, opts Options) (string, error) {
	t.Helper()
	s, err := New(opts)
	must(t, err)
	defer s.Close()
	return s.Run(context.Background())
}

// containerLikeRoot is a root laid out as runc leaves it for a
// createContainer hook: a real procfs and sysfs mounted inside, and a
// device node bound in.
func containerLikeRoot(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"proc", "sys", "dev", "etc"} {
		must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	must(t, os.WriteFile(filepath.Join(root, "marker-in-root"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(root, "dev/null"), nil, 0o644))
	mount := func(src, dst, fstype string, flags uintptr) {
		target := filepath.Join(root, dst)
		must(t, unix.Mount(src, target, fstype, flags, ""))
		t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	}
	mount("proc", "proc", "proc", 0)
	mount("sysfs", "sys", "sysfs", unix.MS_RDONLY)
	mount("/dev/null", "dev/null", "", unix.MS_BIND)
	return root
}

// Both binaries that can become the sandbox confine alike: this test
// binary re-executed (what the hook does where no rdma-cdi-ldsandbox is
// installed) and rdma-cdi-ldsandbox, executed through its descriptor.
func TestSandboxConfinesWhatItRuns(t *testing.T) {
	needRoot(t)
	probe := buildProbe(t)
	for name, exe := range map[string]string{"self": "", ExecutableName: buildSandboxBinary(t)} {
		t.Run(name, func(t *testing.T) { sandboxConfines(t, probe, exe) })
	}
}

// buildSandboxBinary builds cmd/rdma-cdi-ldsandbox statically, as make does.
func buildSandboxBinary(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), ExecutableName)
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "github.com/rdma-cdi/rdma-cdi/cmd/"+ExecutableName)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", ExecutableName, err, b)
	}
	return out
}

func sandboxConfines(t *testing.T, probe, exe string) {
	root := containerLikeRoot(t)
	t.Setenv("LD_PRELOAD", "/nonexistent/evil.so")
	// A descriptor of the host's "/" the hook inherited without
	// close-on-exec, as an engine might leave one.
	hostRoot, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(hostRoot)
	hostNamespaceMarks(t, root)
	if out, err := runSandbox(t, Options{Root: root, Folders: []string{"/opt/rdma/lib", "/usr/lib/x"}, Ldconfig: probe, Executable: exe}); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	report, err := os.ReadFile(filepath.Join(root, "probe-report"))
	must(t, err)
	for _, want := range append(confinedProbe, []string{
		"args=ldconfig /opt/rdma/lib /usr/lib/x",
		"env=PATH=/usr/sbin:/usr/bin:/sbin:/bin\n", // the whole environment
		"entries /proc=0 <nil>",                    // procfs masked: no /proc/1/root
		"entries /sys=0 <nil>",
		"stat /proc/1/root=stat /proc/1/root: no such file or directory",
		"stat /marker-in-root=<nil>",                       // "/" is the container root
		"open /dev/null=open /dev/null: permission denied", // nodev all the way down
		"write /proc/escape=open /proc/escape: read-only file system",
		"rlimit nofile=64",
		"rlimit as=1073741824",
		"no_new_privs=1",
		"pdeathsig=9",      // on the thread that became ldconfig
		"inherited fds=[]", // the host's "/" above and the sandbox's binary included
	}...) {
		if !strings.Contains(string(report), want+"\n") && !strings.Contains(string(report), want) {
			t.Errorf("sandbox report lacks %q:\n%s", want, report)
		}
	}
	// The masks lived in the sandbox's own mount namespace only.
	if entries, _ := os.ReadDir(filepath.Join(root, "proc")); len(entries) == 0 {
		t.Error("the container's /proc was masked outside the sandbox too")
	}
}

// confinedProbe is what the probe, in ldconfig's place, must report of its
// privileges (what /proc/self/status says, from the system calls that
// answer the same: the sandbox masks /proc), its namespaces and its mounts.
var confinedProbe = []string{
	"CapEff=0000000000000000",
	"CapPrm=0000000000000000",
	"CapInh=0000000000000000",
	"CapBnd=0000000000000000",
	"CapAmb=0000000000000000",
	"no_new_privs=1",
	"seccomp=2 <nil>", // a filter
	// Its own PID namespace, whose first process it is, and its own IPC
	// namespace: the host's SysV segment (hostNamespaceMarks) is not
	// there. The network is the host's namespace, closed by the filter:
	// no socket reaches the host's abstract socket or lists an interface.
	"pid=1 ppid=0",
	"host shm segment=no such file or directory",
	"host abstract socket=dial unix @",
	"socket: operation not permitted",
	"interfaces=[] route ip+net: netlinkrib: operation not permitted",
	// The filter's answers, where the kernel alone would give EINVAL or
	// success: clone3 is ENOSYS so that a libc falls back to clone, whose
	// flags the filter can read.
	"unshare(CLONE_NEWUSER)=operation not permitted",
	"add_key=operation not permitted",
	"clone(CLONE_NEWUSER)=operation not permitted",
	"clone3=function not implemented",
	"io_uring_setup=operation not permitted",
	"open_tree=operation not permitted",
	"socket(AF_INET)=operation not permitted",
	"socket(AF_NETLINK)=operation not permitted",
	"socketpair=operation not permitted",
	"statfs / flags=nosuid,nodev,noexec",
	"exec /exec-probe=permission denied",
}

// hostNamespaceMarks makes, in the test's own IPC and network namespaces,
// a SysV shared memory segment and an abstract socket, and names them in
// the root's /probe-ns for the probe to look for; and an executable
// /exec-probe there, which only a noexec mount keeps from running.
func hostNamespaceMarks(t *testing.T, root string) {
	t.Helper()
	key := int(time.Now().UnixNano()&0x3fffffff) | 1
	id, err := unix.SysvShmGet(key, 4096, unix.IPC_CREAT|unix.IPC_EXCL|0o600)
	must(t, err)
	t.Cleanup(func() { _, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil) })
	sock := fmt.Sprintf("rdma-cdi-probe-%d", key)
	l, err := net.Listen("unix", "@"+sock)
	must(t, err)
	t.Cleanup(func() { l.Close() })
	must(t, os.WriteFile(filepath.Join(root, "probe-ns"), []byte(fmt.Sprintf("%d %s\n", key, sock)), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "exec-probe"), []byte("#!/nonexistent/interpreter\n"), 0o755))
	// The same marks seen from here: the probe's answers differ only by
	// the namespaces.
	if _, err := unix.SysvShmGet(key, 0, 0); err != nil {
		t.Fatalf("the test's own segment: %v", err)
	}
}

// The sandbox process itself is in PID and IPC namespaces of its own, the
// host's seen from outside while it waits for the go-ahead; its network
// namespace is the host's, which its seccomp filter closes (no socket).
func TestSandboxHasItsOwnPIDAndIPCNamespaces(t *testing.T) {
	needRoot(t)
	probe := buildProbe(t)
	root := containerLikeRoot(t)
	s, err := New(Options{Root: root, Ldconfig: probe})
	must(t, err)
	defer s.Close()
	r, err := s.Start(context.Background())
	must(t, err)
	defer r.Abort()
	must(t, r.awaitStart())
	for _, ns := range []string{"pid", "ipc", "net", "mnt", "user"} {
		host, err := os.Readlink("/proc/self/ns/" + ns)
		must(t, err)
		sandbox, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", r.cmd.Process.Pid, ns))
		must(t, err)
		// The mount namespace is made after the go-ahead; the user
		// namespace stays the caller's (its ids map the owner); no
		// network namespace is made (the filter denies sockets).
		if same := host == sandbox; same != (ns == "mnt" || ns == "user" || ns == "net") {
			t.Errorf("%s namespace: host %s, sandbox %s", ns, host, sandbox)
		}
	}
}

// On a kernel without mount_setattr(2) (before 5.12) the sandbox remounts
// each mount under the root instead: the same nosuid, nodev and noexec,
// submounts (the bound /dev/null) included.
func TestSandboxWithoutMountSetattrRemountsEachMount(t *testing.T) {
	needRoot(t)
	probe := buildProbe(t)
	root := containerLikeRoot(t)
	hostNamespaceMarks(t, root)
	forceNoMountSetattr = true
	t.Cleanup(func() { forceNoMountSetattr = false })
	if out, err := runSandbox(t, Options{Root: root, Ldconfig: probe}); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	report, err := os.ReadFile(filepath.Join(root, "probe-report"))
	must(t, err)
	for _, want := range append(confinedProbe, "open /dev/null=open /dev/null: permission denied", "entries /proc=0 <nil>") {
		if !strings.Contains(string(report), want) {
			t.Errorf("sandbox report lacks %q:\n%s", want, report)
		}
	}
}

// A sandbox started ahead waits: what the caller puts in the root before
// Proceed is what the program sees, Abort ends it with nothing run, and
// its timeout counts from Proceed (a waiting sandbox outlives it).
func TestSandboxStartedAheadWaitsForProceedOrAbort(t *testing.T) {
	needRoot(t)
	probe := buildProbe(t)
	root := containerLikeRoot(t)
	s, err := New(Options{Root: root, Ldconfig: probe, Timeout: 300 * time.Millisecond})
	must(t, err)
	defer s.Close()

	aborted, err := s.Start(context.Background())
	must(t, err)
	aborted.Abort()
	if _, err := os.Stat(filepath.Join(root, "probe-report")); !os.IsNotExist(err) {
		t.Fatalf("the probe ran although the sandbox was aborted (%v)", err)
	}

	// A mount made between Start and Proceed, as the lend's are.
	late := filepath.Join(t.TempDir(), "late")
	must(t, os.WriteFile(late, []byte("mounted after Start"), 0o644))
	running, err := s.Start(context.Background())
	must(t, err)
	time.Sleep(500 * time.Millisecond) // up and waiting, longer than the timeout
	must(t, unix.Mount(late, filepath.Join(root, "marker-in-root"), "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(root, "marker-in-root"), unix.MNT_DETACH) })
	if out, err := running.Proceed(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	report, err := os.ReadFile(filepath.Join(root, "probe-report"))
	must(t, err)
	if !strings.Contains(string(report), `read /marker-in-root="mounted after Start"`) || !strings.Contains(string(report), "entries /proc=0 <nil>") {
		t.Fatalf("probe report after Proceed:\n%s", report)
	}
}

// The engine's storage reached through a symlink: the masks still land.
func TestSandboxConfinesARootReachedThroughASymlink(t *testing.T) {
	needRoot(t)
	probe := buildProbe(t)
	root := containerLikeRoot(t)
	link := filepath.Join(t.TempDir(), "storage-link")
	must(t, os.Symlink(filepath.Dir(root), link))
	if out, err := runSandbox(t, Options{Root: filepath.Join(link, filepath.Base(root)), Ldconfig: probe}); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	report, err := os.ReadFile(filepath.Join(root, "probe-report"))
	must(t, err)
	if !strings.Contains(string(report), "entries /proc=0 <nil>") || !strings.Contains(string(report), "stat /proc/1/root=stat /proc/1/root: no such file") {
		t.Fatalf("/proc was not masked under a symlinked root:\n%s", report)
	}
}

func TestSandboxRefusesAnUnfitLdconfig(t *testing.T) {
	root := t.TempDir()
	script := filepath.Join(t.TempDir(), "ldconfig")
	must(t, os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755))
	dynamic, err := exec.LookPath("ls")
	must(t, err)
	for _, tc := range []struct{ ldconfig, want string }{
		{"sbin/ldconfig", "want an absolute host path"},
		{"/nonexistent/ldconfig", "no such file"},
		{script, "not an ELF executable"},
		{dynamic, "dynamically linked"},
	} {
		_, err := New(Options{Root: root, Ldconfig: tc.ldconfig})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.ldconfig, err, tc.want)
		}
	}
	if _, err := New(Options{Root: "rootfs"}); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("relative root: %v", err)
	}
}

func TestSandboxRefusesAFIFOAsLdSoConf(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	must(t, unix.Mkfifo(filepath.Join(root, "etc/ld.so.conf"), 0o644))
	out, err := runSandbox(t, Options{Root: root})
	if err == nil || !strings.Contains(err.Error(), "/etc/ld.so.conf is a FIFO") {
		t.Fatalf("FIFO as ld.so.conf: %v: %s", err, out)
	}
}

// A FIFO behind a library name blocks ldconfig's open; the pre-flight check
// does not scan library dirs, so the timeout ends it.
func TestSandboxKillsLdconfigAtItsTimeout(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	must(t, os.MkdirAll(filepath.Join(root, "opt/lib"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), nil, 0o644))
	must(t, unix.Mkfifo(filepath.Join(root, "opt/fifo"), 0o644))
	must(t, os.Symlink("/opt/fifo", filepath.Join(root, "opt/lib/libblock.so.1")))
	out, err := runSandbox(t, Options{Root: root, Folders: []string{"/opt/lib"}, Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "killed after 1s") {
		t.Fatalf("got %v: %s", err, out)
	}
}

func TestCheckMaskedFailsClosed(t *testing.T) {
	needRoot(t)
	root := containerLikeRoot(t) // procfs and sysfs mounted, unmasked
	if err := checkMasked(root); err == nil || !strings.Contains(err.Error(), "still a live procfs") {
		t.Fatalf("unmasked /proc: %v", err)
	}
	for _, dir := range []string{"proc", "sys"} {
		target := filepath.Join(root, dir)
		must(t, unix.Mount("tmpfs", target, "tmpfs", unix.MS_RDONLY, "size=4k"))
		t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	}
	if err := checkMasked(root); err != nil {
		t.Fatalf("masked: %v", err)
	}
}

func TestMagicMounts(t *testing.T) {
	info := strings.Join([]string{
		`22 1 0:21 / /proc rw,nosuid - proc proc rw`,
		`100 90 0:50 / /run/ctr/rootfs rw - overlay overlay rw`,
		`101 100 0:51 / /run/ctr/rootfs/proc rw - proc proc rw`,
		`102 101 0:51 /sys /run/ctr/rootfs/proc/sys ro - proc proc rw`,
		`103 100 0:52 / /run/ctr/rootfs/sys ro - sysfs sysfs ro`,
		`104 100 0:53 / /run/ctr/rootfs/dev rw - tmpfs tmpfs rw`,
		`105 100 0:21 / /run/ctr/rootfs/host\040proc rw - proc proc rw`,
		`106 90 0:21 / /run/ctr/rootfs2/proc rw - proc proc rw`,
		`garbage`,
	}, "\n")
	got := magicMounts(info, "/run/ctr/rootfs")
	want := []string{"/host proc", "/proc", "/sys"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestCheckConfGraph(t *testing.T) {
	needRoot(t) // mknod of a device
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(data), 0o644))
		return p
	}
	must(t, unix.Mkfifo(filepath.Join(dir, "fifo.conf"), 0o644))
	must(t, unix.Mknod(filepath.Join(dir, "zero"), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 5))))
	write("huge.conf", strings.Repeat("x", maxConfSize+1))
	const huge = "huge.conf"
	cases := []struct {
		name, conf, want string
	}{
		{"plain", "/usr/lib\n# include fifo.conf\ninclude d/b.conf\n", ""},
		{"missing include", "include nothing/*.conf\ninclude /nonexistent.conf\n", ""},
		{"loop", "include loop.conf\n", "loop.conf includes itself"},
		{"loop through another file", "include d/*.conf\n", "loop.conf includes itself: an include loop; fix the image (included from"},
		{"diamond", "include d/b.conf\ninclude d/b.conf\n", ""},
		{"include bomb", "include bomb/1.conf\n", "more than 512 includes"},
		{"FIFO included", "include\td/b.conf   fifo.conf\n", "fifo.conf is a FIFO, not a file"},
		{"FIFO in a glob", "include *.conf\n", "is a FIFO"},
		{"device", "include /zero\n", "zero is a device"},
		{"huge", "include /" + huge + "\n", "huge.conf is over"},
		{"keyword needs a blank", "includefifo.conf\n", ""},
	}
	write("d/a.conf", "/opt/a\ninclude ../loop.conf\n")
	write("d/b.conf", "/opt/b\n")
	for i := 1; i < 20; i++ { // each level includes the next twice: 2^19 files
		write(fmt.Sprintf("bomb/%d.conf", i), strings.Repeat(fmt.Sprintf("include %d.conf\n", i+1), 2))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			write("loop.conf", tc.conf)
			err := checkConfGraph(dir, "/loop.conf")
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	if err := checkConfGraph(dir, "/fifo.conf"); err == nil || !strings.Contains(err.Error(), "FIFO") {
		t.Errorf("FIFO itself: %v", err)
	}
}

func TestDefaultLdconfigPrefersTheRealBinaryBehindAScript(t *testing.T) {
	dir := t.TempDir()
	real, plain := filepath.Join(dir, "ldconfig.real"), filepath.Join(dir, "ldconfig")
	if got := firstExisting([]string{real, plain}); got != plain {
		t.Errorf("neither exists: %s, want the last", got)
	}
	must(t, os.WriteFile(plain, nil, 0o755))
	if got := firstExisting([]string{real, plain}); got != plain {
		t.Errorf("only ldconfig: %s", got)
	}
	must(t, os.WriteFile(real, nil, 0o755))
	if got := firstExisting([]string{real, plain}); got != real {
		t.Errorf("Ubuntu layout: %s, want %s", got, real)
	}
}
