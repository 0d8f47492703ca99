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
}

// Listen binds socket, replacing a stale one, in a directory made 0700;
// the socket is 0600. SO_PASSCRED gives each datagram its sender.
func Listen(socket string) (*Listener, error) {
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return nil, fmt.Errorf("hook events socket directory: %w", err)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing the stale hook events socket: %w", err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	old := unix.Umask(0o177)
	err = unix.Bind(fd, &unix.SockaddrUnix{Name: socket})
	unix.Umask(old)
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("hook events socket %s: %w", socket, err)
	}
	return &Listener{path: socket, fd: fd}, nil
}

// Receive calls got for each valid outcome and bad for each datagram it
// refuses (not root's, too large, not an outcome), until ctx ends; then
// it closes the socket and removes it.
func (l *Listener) Receive(ctx context.Context, got func(Outcome), bad func(error)) {
	stop := context.AfterFunc(ctx, func() { _ = unix.Shutdown(l.fd, unix.SHUT_RDWR) })
	defer stop()
	defer os.Remove(l.path)
	defer unix.Close(l.fd)
	buf := make([]byte, MaxSize+1)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	for ctx.Err() == nil {
		n, oobn, _, _, err := unix.Recvmsg(l.fd, buf, oob, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || ctx.Err() != nil {
			return
		}
		o, err := decode(buf[:n], oob[:oobn])
		if err != nil {
			bad(err)
			continue
		}
		got(o)
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
