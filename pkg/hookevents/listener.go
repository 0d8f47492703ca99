package hookevents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Listener is the agent's end: a datagram socket that takes outcomes from
// root's processes only.
type Listener struct {
	path string
	fd   int
	file os.FileInfo // the socket as bound, so that exit removes only it
}

// Listen binds socket in a directory that it makes, or finds, 0700 and
// root's; the socket is 0600. A file already there is replaced only when it
// is a socket nobody listens on: a mistyped path never removes another
// file, and a second agent does not take over a running one's socket.
//
// fchmod does not apply to a unix socket's file, and a umask set for the
// bind would be the whole process's, so the socket is bound under a
// temporary name, chmod-ed by path, and renamed into place: until the
// rename only root can reach it, through the 0700 directory.
func Listen(socket string) (*Listener, error) {
	dir := filepath.Dir(socket)
	if err := privateDir(dir); err != nil {
		return nil, err
	}
	if err := removeStale(socket); err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	// One name per process: a concurrent agent binds its own, and one left
	// by a dead agent of the same pid is ours to replace.
	tmp := filepath.Join(dir, "."+strconv.Itoa(os.Getpid())+".bind")
	fi, err := bindInPlace(fd, tmp, socket)
	if err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("hook events socket %s: %w", socket, err)
	}
	return &Listener{path: socket, fd: fd, file: fi}, nil
}

// bindInPlace binds fd at tmp, makes it 0600 and renames it to socket
// without replacing anything there: a socket bound there meanwhile is
// another agent's.
func bindInPlace(fd int, tmp, socket string) (os.FileInfo, error) {
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: tmp}); err != nil {
		return nil, fmt.Errorf("bind %s: %w", tmp, err)
	}
	err := os.Chmod(tmp, 0o600)
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	}
	if err == nil {
		err = renameNoReplace(tmp, socket)
	}
	if errors.Is(err, os.ErrExist) {
		err = errors.New("another agent bound it meanwhile")
	}
	if err != nil {
		_ = os.Remove(tmp)
		return nil, err
	}
	return os.Lstat(socket)
}

// renameNoReplace renames old to new unless new exists (os.ErrExist). A
// file system without RENAME_NOREPLACE gets a hard link and an unlink,
// which are as atomic about an existing new.
func renameNoReplace(old, new string) error {
	err := unix.Renameat2(unix.AT_FDCWD, old, unix.AT_FDCWD, new, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		if err != nil {
			return &os.LinkError{Op: "rename", Old: old, New: new, Err: err}
		}
		return nil
	}
	if err := os.Link(old, new); err != nil {
		return err
	}
	return os.Remove(old)
}

// privateDir makes dir 0700 (its missing parents too) or, where it exists,
// makes it 0700 if it is a directory of the agent's own user (root: the
// hooks that send are root's): a hostPath DirectoryOrCreate makes it 0755.
// A symlink there, or a directory of another user, is refused rather than
// changed: whoever controls it could swap the socket. Opened without
// following links, the directory checked is the one chmod-ed.
func privateDir(dir string) error {
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("hook events socket directory %s is a symlink; refusing it (name the real directory in metrics.hook_socket)", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("hook events socket directory: %w", err)
	}
	// A symlink put there since the Lstat fails here (ELOOP).
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("hook events socket directory %s: %w", dir, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("hook events socket directory %s: %w", dir, err)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("hook events socket directory %s is owned by uid %d, not by this agent's uid %d; refusing it", dir, st.Uid, os.Geteuid())
	}
	if st.Mode&0o7777 != 0o700 {
		if err := unix.Fchmod(fd, 0o700); err != nil {
			return fmt.Errorf("hook events socket directory %s: chmod 0700: %w", dir, err)
		}
	}
	return nil
}

func removeStale(socket string) error {
	fi, err := os.Lstat(socket)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("hook events socket %s: %w", socket, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("hook events socket %s: a %s is there, not a socket; not removed", socket, fi.Mode().Type())
	}
	probe, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(probe)
	if unix.Connect(probe, &unix.SockaddrUnix{Name: socket}) == nil {
		return fmt.Errorf("hook events socket %s: another agent is listening on it", socket)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the stale hook events socket: %w", err)
	}
	return nil
}

// Receive calls got for each valid outcome and bad for each datagram it
// refuses (not root's, too large, not an outcome), until ctx ends (nil) or
// the socket fails (the error); then it closes the socket and removes it,
// if it is still the one it bound.
func (l *Listener) Receive(ctx context.Context, got func(Outcome), bad func(error)) error {
	stop := context.AfterFunc(ctx, func() { _ = unix.Shutdown(l.fd, unix.SHUT_RDWR) })
	defer stop()
	defer unix.Close(l.fd)
	defer l.remove()
	buf := make([]byte, MaxSize+1)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	for ctx.Err() == nil {
		n, oobn, _, _, err := unix.Recvmsg(l.fd, buf, oob, 0)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.ENOBUFS), errors.Is(err, unix.ENOMEM):
			continue
		case err != nil:
			return fmt.Errorf("hook events socket %s: %w", l.path, err)
		}
		o, err := decode(buf[:n], oob[:oobn])
		if err != nil {
			bad(err)
			continue
		}
		got(o)
	}
	return nil
}

// remove removes the socket file if it is still this listener's. It runs
// while the socket is open, which keeps its inode from being reused.
func (l *Listener) remove() {
	if fi, err := os.Lstat(l.path); err == nil && os.SameFile(fi, l.file) {
		_ = os.Remove(l.path)
	}
}

func decode(b, oob []byte) (Outcome, error) {
	var o Outcome
	cred, err := sender(oob)
	if err != nil {
		return o, err
	}
	if cred.Uid != 0 {
		return o, fmt.Errorf("a datagram from uid %d (pid %d), not root", cred.Uid, cred.Pid)
	}
	if len(b) > MaxSize {
		return o, fmt.Errorf("a datagram of more than %d bytes", MaxSize)
	}
	// Unknown fields are a newer hook's, during an upgrade: ignored.
	if err := json.Unmarshal(b, &o); err != nil {
		return o, fmt.Errorf("not a hook outcome: %w", err)
	}
	return o, Check(o)
}

func sender(oob []byte) (*unix.Ucred, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if cred, err := unix.ParseUnixCredentials(&m); err == nil {
			return cred, nil
		}
	}
	return nil, errors.New("a datagram without its sender's credentials")
}
