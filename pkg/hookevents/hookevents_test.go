package hookevents

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func listen(t *testing.T) (string, <-chan Outcome, <-chan error) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("the listener takes root's datagrams only")
	}
	sock := filepath.Join(t.TempDir(), "run", "events.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	got, bad := make(chan Outcome, 10), make(chan error, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		if err := l.Receive(ctx, func(o Outcome) { got <- o }, func(err error) { bad <- err }); err != nil {
			t.Error(err)
		}
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Receive did not return after its context ended")
		}
		if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket left behind: %v", err)
		}
	})
	return sock, got, bad
}

func TestSendReceive(t *testing.T) {
	sock, got, _ := listen(t)
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	dir, _ := os.Stat(filepath.Dir(sock))
	if dir.Mode().Perm() != 0o700 {
		t.Errorf("socket dir mode %v, want 0700", dir.Mode().Perm())
	}
	want := Outcome{Hook: "create-runtime", ContainerID: "abc123", Pid: 42, StartTime: 7, Cgroup: "/kubepods/pod1/abc123", Namespace: "ml", Pod: "train-0",
		Container: "worker", Devices: []string{"mlx5_1", "mlx5_2"}, UserSpace: UserSpaceImage}
	if err := Send(sock, want); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-got:
		if fmt.Sprint(o) != fmt.Sprint(want) {
			t.Errorf("got %+v, want %+v", o, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no outcome received")
	}
}

// TestSendNeverBlocks: with no listener, and with a listener whose queue is
// full, Send returns at once with an error (the outcome is dropped).
func TestSendNeverBlocks(t *testing.T) {
	start := time.Now()
	if err := Send(filepath.Join(t.TempDir(), "none.sock"), Outcome{Hook: "h", ContainerID: "c"}); err == nil {
		t.Error("Send to no socket: no error")
	}
	// A bound socket nobody reads: its queue fills.
	sock := filepath.Join(t.TempDir(), "full.sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	var full error
	for i := 0; i < 100000 && full == nil; i++ {
		full = Send(sock, Outcome{Hook: "h", ContainerID: "c", Devices: []string{strings.Repeat("x", 200)}})
	}
	if !errors.Is(full, syscall.EAGAIN) {
		t.Errorf("a full queue: %v, want EAGAIN", full)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("sends took %v", d)
	}
}

func TestReceiveRefusesBadDatagrams(t *testing.T) {
	sock, got, bad := listen(t)
	send := func(b []byte) {
		t.Helper()
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if err := unix.Sendto(fd, b, 0, &unix.SockaddrUnix{Name: sock}); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range [][]byte{
		[]byte("not json"),
		[]byte(`{"hook":"create-runtime"}`),
		[]byte(`{"hook":"create-runtime","id":"c","pod":"../../etc"}`),
		[]byte(`{"hook":"create-runtime","id":"c","devices":["mlx5_1\n# HELP"]}`),
		[]byte(`{"hook":"create-runtime","id":"c","userSpace":"both"}`),
		[]byte(`{"hook":"create-runtime","id":"c","reason":"` + strings.Repeat("r", 300) + `"}`),
		[]byte(`{"hook":"create-runtime","id":"` + strings.Repeat("c", MaxSize) + `"}`),
		[]byte(`{"hook":"create-runtime","id":"c","cgroup":"/kubepods/../../etc"}`),
		[]byte(`{"hook":"create-runtime","id":"c","cgroup":"kubepods/x"}`),
		[]byte(`{"hook":"create-runtime","id":"c","cgroup":"/x (deleted)"}`),
	} {
		send(b)
		select {
		case err := <-bad:
			t.Logf("refused: %v", err)
		case o := <-got:
			t.Errorf("%.60q accepted as %+v", b, o)
		case <-time.After(5 * time.Second):
			t.Fatalf("%.60q: neither accepted nor refused", b)
		}
	}
	// A newer hook's extra field is ignored.
	send([]byte(`{"hook":"create-runtime","id":"c","fromTheFuture":1}`))
	select {
	case o := <-got:
		if o.ContainerID != "c" {
			t.Errorf("got %+v", o)
		}
	case err := <-bad:
		t.Errorf("an unknown field refused: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("nothing received")
	}
}

func TestReason(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("open x: %w", os.ErrNotExist):        ReasonNotFound,
		&os.PathError{Op: "open", Err: syscall.EACCES}:  ReasonPermission,
		&os.PathError{Op: "write", Err: syscall.ENOSPC}: ReasonNoSpace,
		&os.PathError{Op: "write", Err: syscall.EROFS}:  ReasonReadOnly,
		Invalid(errors.New("state does not parse")):     ReasonInvalid,
		errors.New("something else"):                    ReasonOther,
	} {
		if got := Reason(err); got != want {
			t.Errorf("Reason(%v) = %s, want %s", err, got, want)
		}
	}
}

func TestIsName(t *testing.T) {
	for _, s := range []string{"mlx5_1", "train-0", "0123abcdef", "kube-system", "sha256:abc"} {
		if !IsName(s) {
			t.Errorf("%q refused", s)
		}
	}
	for _, s := range []string{"", "-x", "a b", "a/b", "a\nb", `a"b`, strings.Repeat("a", 254)} {
		if IsName(s) {
			t.Errorf("%q accepted", s)
		}
	}
}

func TestProcessStart(t *testing.T) {
	start, err := ProcessStart("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if start == 0 || !Alive("/proc", os.Getpid(), start) {
		t.Errorf("this process: start %d, alive %v", start, Alive("/proc", os.Getpid(), start))
	}
	if Alive("/proc", os.Getpid(), start+1) {
		t.Error("a different start time is alive")
	}
	if _, err := ProcessStart("/proc", 1<<30); err == nil {
		t.Error("no such pid: no error")
	}
}

// TestListenReplacesOnlyAStaleSocket: a regular file where the socket goes
// is kept (a mistyped path), a live agent's socket is not taken over, a
// dead one's is replaced.
func TestListenReplacesOnlyAStaleSocket(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen over a file: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep me" {
		t.Error("the file was touched")
	}
	sock := filepath.Join(dir, "events.sock")
	first, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(sock); err == nil || !strings.Contains(err.Error(), "another agent") {
		t.Errorf("a second Listen: %v", err)
	}
	// Someone removes the first agent's socket and a second agent binds
	// the path: the first one's exit must leave the new socket alone.
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	second, err := Listen(sock)
	if err != nil {
		t.Fatalf("Listen where the socket was removed: %v", err)
	}
	first.remove()
	unix.Close(first.fd)
	if _, err := os.Stat(sock); err != nil {
		t.Errorf("the new socket was removed: %v", err)
	}
	// A socket whose agent died (closed, not removed) is replaced.
	unix.Close(second.fd)
	third, err := Listen(sock)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	third.remove()
	unix.Close(third.fd)
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an agent's own socket left behind: %v", err)
	}
}
