package hookevents

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func closeListener(l *Listener) {
	l.remove()
	unix.Close(l.fd)
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// TestListenMakesItsDirectoryPrivate: a directory found 0755 (a hostPath
// DirectoryOrCreate) becomes 0700; the socket is 0600 even under a umask
// of 0, which Listen leaves as it was; nothing but the socket is left.
func TestListenMakesItsDirectoryPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old := unix.Umask(0)
	l, err := Listen(filepath.Join(dir, "events.sock"))
	umask := unix.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	defer closeListener(l)
	if umask != 0 {
		t.Errorf("umask %#o after Listen, want the 0 it was", umask)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory: %v, %v; want 0700", fi.Mode().Perm(), err)
	}
	if fi, err := os.Lstat(l.path); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket: %v, %v; want a 0600 socket", fi.Mode(), err)
	}
	if got := entries(t, dir); !slices.Equal(got, []string{"events.sock"}) {
		t.Errorf("directory holds %v, want the socket alone", got)
	}
}

// TestListenRefusesADirectoryItDoesNotOwn: a symlink where the directory
// goes, or a directory of another user, is refused by name and left as
// it was.
func TestListenRefusesADirectoryItDoesNotOwn(t *testing.T) {
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(target, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "run")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	_, err := Listen(filepath.Join(link, "events.sock"))
	if err == nil || !strings.Contains(err.Error(), link) || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("Listen in a symlinked directory: %v", err)
	}
	unchanged := func(dir string) {
		t.Helper()
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s changed: %v, %v", dir, fi.Mode().Perm(), err)
		}
		if got := entries(t, dir); len(got) != 0 {
			t.Errorf("%s holds %v", dir, got)
		}
	}
	unchanged(target)

	if os.Geteuid() != 0 {
		t.Skip("giving a directory to another user needs root")
	}
	foreign := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(foreign, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err = Listen(filepath.Join(foreign, "events.sock"))
	if err == nil || !strings.Contains(err.Error(), foreign) || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("Listen in another user's directory: %v", err)
	}
	unchanged(foreign)
}

// TestBindInPlaceReplacesNothing: what appears at the socket's path between
// the stale check and the rename (another agent's socket) is kept, and the
// temporary name is removed.
func TestBindInPlaceReplacesNothing(t *testing.T) {
	dir := t.TempDir()
	socket, tmp := filepath.Join(dir, "events.sock"), filepath.Join(dir, ".1.bind")
	if err := os.WriteFile(socket, []byte("another agent's"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := bindInPlace(fd, tmp, socket); err == nil || !strings.Contains(err.Error(), "another agent") {
		t.Errorf("bindInPlace over an existing file: %v", err)
	}
	if b, _ := os.ReadFile(socket); string(b) != "another agent's" {
		t.Error("the file there was replaced")
	}
	if got := entries(t, dir); !slices.Equal(got, []string{"events.sock"}) {
		t.Errorf("directory holds %v, want the other file alone", got)
	}
}
