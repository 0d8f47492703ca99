// Package ldsandbox runs the host's ldconfig on a container root so that no
// path it resolves can leave that root.
//
// A createContainer hook runs before pivot_root: the container's /proc is
// already mounted in its rootfs, and its /proc/1 is the runtime's init,
// whose root is the host's "/". A chroot (`ldconfig -r`) does not stop
// such magic links, nor a ".." soname that walks into them. So ldconfig
// runs in a sandbox of its own:
//
//   - a re-execution of this binary in PID and IPC namespaces of its own,
//     and a new, private mount namespace;
//   - the container root bound onto itself, nosuid, nodev and noexec all
//     the way down (no device node in the image or in /dev opens), in one
//     mount_setattr(2) or, on kernels before 5.12, one remount per mount,
//     and checked in mountinfo afterwards: no way to set them, no run;
//   - every proc and sysfs mount inside the root masked by an empty
//     read-only tmpfs;
//   - pivot_root into the root, the host's tree detached;
//   - the image's ld.so.conf include graph checked for FIFOs and other
//     non-files, which would block ldconfig until it is killed, in a walk
//     that is bounded itself (includes, bytes, glob steps: conf.go);
//   - rlimits that bound what ldconfig can use (an include loop stops at
//     the open-file limit, an endless or huge file at the address space),
//     all but the address space set before that walk;
//   - the host's statically linked ldconfig executed from a sealed memfd,
//     so nothing from the image is executed and nothing in the container
//     can rewrite the host's binary through /proc/PID/exe;
//   - ldconfig with no capability in any set (bounding, permitted,
//     effective, inheritable, ambient: it writes as the owner of the
//     root's files, caps.go), no_new_privs, and a seccomp filter that
//     refuses sockets (no network, no abstract socket), mounts, namespaces,
//     module and kexec loading, ptrace, bpf, io_uring, keys, file handles
//     and the like, and kills a system call
//     of another ABI (seccomp.go).
package ldsandbox

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
)

// Argv0 is the argv[0] under which this binary acts as the sandbox; main
// (and the TestMain of packages that run ldconfig) dispatches on it.
const Argv0 = "rdma-cdi-ldconfig-sandbox"

// DefaultLdconfig is the host's ldconfig on most distributions.
const DefaultLdconfig = "/sbin/ldconfig"

// defaultLdconfigs are tried in order when no ldconfig is named. Ubuntu's
// /sbin/ldconfig is a shell script around the real, static binary, and a
// script cannot run inside the container root.
var defaultLdconfigs = []string{"/sbin/ldconfig.real", DefaultLdconfig}

// DefaultTimeout bounds a whole run: ldconfig takes well under a second on
// real images, and a FIFO reached through a library symlink (which the
// pre-flight check cannot see without redoing ldconfig's scan) blocks
// until this kill.
const DefaultTimeout = 10 * time.Second

// Options steer Run.
type Options struct {
	// Root is the container root's host path.
	Root string
	// Folders are in-container library dirs to add to the cache.
	Folders []string
	// Ldconfig is the host's ldconfig (default: the first of
	// defaultLdconfigs that exists).
	Ldconfig string
	// Timeout bounds the run (default DefaultTimeout).
	Timeout time.Duration
	// MountNS is the container's mount namespace, for a caller outside it
	// (a createRuntime hook runs in the runtime's): the sandbox enters it
	// first, so ldconfig sees the libraries the engine mounted there. Nil:
	// the caller's own (a createContainer hook runs in the container's).
	MountNS *os.File
	// Owner runs ldconfig as this host uid and gid, the container's root
	// seen from the caller (a user-namespaced container's, when the caller
	// is outside that namespace), so the cache it writes belongs to the
	// container. Nil: as the caller.
	Owner *Owner
	// Executable is the binary that becomes the sandbox, an absolute path
	// (its main calls RunIfSandbox first). Default: ExecutableName beside
	// this process's executable, else this executable itself
	// (openExecutable).
	Executable string
}

// Owner is a host uid and gid.
type Owner struct{ UID, GID int }

// Sandbox is a prepared run: the host's ldconfig checked and sealed.
type Sandbox struct {
	opts Options
	bin  *os.File // the sealed ldconfig
	exe  *os.File // the sandbox's binary, checked (openExecutable)
}

// New checks opts and seals a copy of the host's ldconfig, before the
// caller touches the container: a missing or unfit ldconfig changes
// nothing in it.
func New(opts Options) (*Sandbox, error) {
	if opts.Ldconfig == "" {
		opts.Ldconfig = firstExisting(defaultLdconfigs)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if !path.IsAbs(opts.Ldconfig) {
		return nil, fmt.Errorf("ldconfig %q: want an absolute host path", opts.Ldconfig)
	}
	if !filepath.IsAbs(opts.Root) {
		return nil, fmt.Errorf("container root %q: want an absolute host path", opts.Root)
	}
	// mountinfo names mount points by their real path: a root reached
	// through a symlink (the engine's storage moved and linked) would match
	// none of them, and leave its /proc unmasked.
	root, err := filepath.EvalSymlinks(opts.Root)
	if err != nil {
		return nil, fmt.Errorf("container root: %w", err)
	}
	opts.Root = root
	exe, err := openExecutable(opts.Executable)
	if err != nil {
		return nil, err
	}
	bin, err := sealedCopy(opts.Ldconfig)
	if err != nil {
		exe.Close()
		return nil, err
	}
	return &Sandbox{opts: opts, bin: bin, exe: exe}, nil
}

// Close releases the sealed copy and the sandbox's binary.
func (s *Sandbox) Close() error {
	s.exe.Close()
	return s.bin.Close()
}

// Run executes the host's ldconfig inside the root, confined as the
// package comment says, and returns what it printed.
func (s *Sandbox) Run(ctx context.Context) (string, error) {
	r, err := s.Start(ctx)
	if err != nil {
		return "", err
	}
	return r.Proceed()
}

// Running is a sandbox process started ahead of its work: it waits before
// it enters the container's mount namespace or looks at the root at all.
type Running struct {
	sandbox  *Sandbox
	cmd      *exec.Cmd
	cancel   context.CancelFunc
	goAhead  *os.File // the write end of the sandbox's goAheadFD
	started  chan struct{}
	startErr error // cmd.Start's, once started is closed
	out      bytes.Buffer
	exited   chan struct{}
	waitErr  error       // cmd.Wait's, once exited is closed
	deadline *time.Timer // from Proceed: the run's timeout
	timedOut atomic.Bool
}

// Start begins to start the sandbox process, which then waits for
// Proceed, and returns at once: the fork and exec (a millisecond or two)
// overlap whatever the caller does meanwhile, typically its mounts into
// the container (the lent libraries, which the sandbox's copy of the mount
// namespace must include). A failure to start is Proceed's error. The
// timeout runs from Proceed; until then the sandbox lives as long as ctx
// and the caller's end of the pipe.
func (s *Sandbox) Start(ctx context.Context) (*Running, error) {
	ctx, cancel := context.WithCancel(ctx)
	goRead, goWrite, err := os.Pipe()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("ldconfig sandbox: %w", err)
	}
	files := []*os.File{s.bin, goRead} // fds 3 and 4 in the sandbox
	args := []string{Argv0}
	if s.opts.MountNS != nil {
		files = append(files, s.opts.MountNS) // fd 5
		args = append(args, flagMountNS)
	}
	// The sandbox's binary, opened and checked by New, comes last and is
	// executed through the child's own copy of that descriptor: no path is
	// looked up between the checks and the exec, and /proc/self/exe stays
	// this very binary even if an upgrade replaced the file meanwhile. The
	// sandbox marks it close-on-exec with the rest (closeOnExecFrom), so
	// ldconfig does not get it.
	exePath := fmt.Sprintf("/proc/self/fd/%d", 3+len(files))
	files = append(files, s.exe)
	cmd := exec.CommandContext(ctx, exePath)
	cmd.Args = args
	cmd.ExtraFiles = files
	if o := s.opts.Owner; o != nil {
		cmd.Args = append(cmd.Args, fmt.Sprintf("%s=%d:%d", flagOwner, o.UID, o.GID))
	}
	if forceNoMountSetattr {
		cmd.Args = append(cmd.Args, flagNoMountSetattr)
	}
	cmd.Args = append(append(cmd.Args, s.opts.Root), s.opts.Folders...)
	cmd.Env = apis.HookEnv // nothing inherited reaches a host binary
	cmd.Dir = "/"
	// The sandbox makes its private mount namespace itself, after the
	// go-ahead (privateMountNS): a copy made at the start would miss what
	// the caller mounts meanwhile. Its PID and IPC namespaces are its own
	// from the start: ldconfig sees no host process (it is the first
	// process of its namespace) and no SysV object of the host's. The
	// network is closed by the seccomp filter instead (no socket at all),
	// which costs nothing where a network namespace costs every start a
	// millisecond.
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig:  unix.SIGKILL,
		Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWIPC,
	}
	r := &Running{sandbox: s, cmd: cmd, cancel: cancel, goAhead: goWrite,
		started: make(chan struct{}), exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &r.out, &r.out
	go func() {
		// Pdeathsig fires when the thread that forked dies, not the
		// process: a goroutine that locks its thread and ends (the lend's
		// mount namespace switch) would take that thread, and the waiting
		// sandbox, with it. This thread stays until the sandbox exits.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r.startErr = cmd.Start()
		goRead.Close() // the sandbox's end, which it holds now
		close(r.started)
		if r.startErr != nil {
			r.startErr = fmt.Errorf("%s in %s: %w", s.opts.Ldconfig, s.opts.Root, r.startErr)
			goWrite.Close()
			cancel()
			close(r.exited)
			return
		}
		r.waitErr = cmd.Wait()
		close(r.exited)
	}()
	return r, nil
}

// awaitStart waits until the sandbox process runs, or could not be
// started.
func (r *Running) awaitStart() error {
	<-r.started
	return r.startErr
}

// Proceed lets the sandbox run ldconfig, waits for it and returns what it
// printed.
func (r *Running) Proceed() (string, error) {
	if err := r.awaitStart(); err != nil {
		return "", err
	}
	r.deadline = time.AfterFunc(r.sandbox.opts.Timeout, func() {
		r.timedOut.Store(true)
		r.cancel()
	})
	// The pipe stays open until the sandbox exits: its end of file tells
	// the sandbox that the hook is gone (parentGone).
	_, err := r.goAhead.Write([]byte{1})
	msg, waitErr := r.wait()
	if err != nil && waitErr == nil {
		// It exited without reading the go-ahead, yet with success.
		waitErr = fmt.Errorf("ldconfig sandbox: %w", err)
	}
	return msg, waitErr
}

// Abort ends the sandbox without its running ldconfig.
func (r *Running) Abort() {
	r.goAhead.Close() // the sandbox reads end of file and exits
	if r.awaitStart() == nil {
		_, _ = r.wait()
	}
}

func (r *Running) wait() (string, error) {
	defer r.cancel()
	<-r.exited
	r.goAhead.Close()
	if r.deadline != nil {
		r.deadline.Stop()
	}
	err := r.waitErr
	msg := strings.TrimSpace(r.out.String())
	what := fmt.Sprintf("%s in %s", r.sandbox.opts.Ldconfig, r.sandbox.opts.Root)
	if r.timedOut.Load() {
		return msg, fmt.Errorf("%s: killed after %s (a FIFO or device where ldconfig expects a library?)", what, r.sandbox.opts.Timeout)
	}
	if err != nil {
		return msg, fmt.Errorf("%s: %w: %s", what, err, msg)
	}
	return msg, nil
}

func firstExisting(paths []string) string {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return paths[len(paths)-1]
}

// sealedCopy copies the host's ldconfig into a sealed memfd after checking
// that it is statically linked: a dynamic one would load its interpreter
// from the container root once it runs there.
func sealedCopy(ldconfig string) (*os.File, error) {
	src, err := os.Open(ldconfig)
	if err != nil {
		return nil, fmt.Errorf("host ldconfig: %w", err)
	}
	defer src.Close()
	fd, err := unix.MemfdCreate("ldconfig", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd for %s: %w", ldconfig, err)
	}
	mem := os.NewFile(uintptr(fd), "memfd:ldconfig")
	if err := fillAndSeal(mem, src); err != nil {
		mem.Close()
		return nil, fmt.Errorf("copying %s into a sealed memfd: %w", ldconfig, err)
	}
	if err := checkStatic(mem); err != nil {
		mem.Close()
		return nil, fmt.Errorf("host ldconfig %s: %w", ldconfig, err)
	}
	return mem, nil
}

func fillAndSeal(mem *os.File, src *os.File) error {
	if err := copyAll(mem, src); err != nil {
		return err
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	_, err := unix.FcntlInt(mem.Fd(), unix.F_ADD_SEALS, seals)
	return err
}

// copyAll copies src whole into dst in the kernel (sendfile): io.Copy
// falls back to 32 KiB reads and writes between a file and a memfd, 60 of
// them for a 1 MB ldconfig on every container start.
func copyAll(dst, src *os.File) error {
	st, err := src.Stat()
	if err != nil {
		return err
	}
	for left := st.Size(); left > 0; {
		n, err := unix.Sendfile(int(dst.Fd()), int(src.Fd()), nil, int(min(left, 1<<30)))
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF // the file shrank while copied
		}
		left -= int64(n)
	}
	return nil
}

func checkStatic(f io.ReaderAt) error {
	ef, err := elf.NewFile(f)
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked (it would load the image's own dynamic loader inside the container root); install a static ldconfig (Debian's and most distributions' is)")
		}
	}
	return nil
}
