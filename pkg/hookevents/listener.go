package hookevents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Listener is the agent's end: a datagram socket that takes outcomes from
// root's processes only.
type Listener struct {
	path string
	fd   int
	file os.FileInfo // the socket as bound, so that exit removes only it
}

// Listen binds socket in a directory made 0700 if it has to be made; the
// socket is 0600 (root's alone whatever the directory). A file already
// there is replaced only when it is a socket nobody listens on: a mistyped
// path never removes another file, and a second agent does not take over a
// running one's socket.
func Listen(socket string) (*Listener, error) {
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return nil, fmt.Errorf("hook events socket directory: %w", err)
	}
	if err := removeStale(socket); err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	// fchmod does not apply to a unix socket's file: the mode comes from
	// the umask at bind (process-wide, for this instant).
	old := unix.Umask(0o177)
	err = unix.Bind(fd, &unix.SockaddrUnix{Name: socket})
	unix.Umask(old)
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	}
	var fi os.FileInfo
	if err == nil {
		fi, err = os.Lstat(socket)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("hook events socket %s: %w", socket, err)
	}
	return &Listener{path: socket, fd: fd, file: fi}, nil
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
