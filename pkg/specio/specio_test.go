package specio

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestDefaultPath(t *testing.T) {
	cases := []struct{ format, want string }{
		{"yaml", "/var/run/cdi/rdma.example.com-hca.yaml"},
		{"", "/var/run/cdi/rdma.example.com-hca.yaml"},
		{"json", "/var/run/cdi/rdma.example.com-hca.json"},
	}
	for _, c := range cases {
		if got := DefaultPath("/var/run/cdi", "rdma.example.com", "hca", c.format); got != c.want {
			t.Errorf("DefaultPath(format %q) = %q, want %q", c.format, got, c.want)
		}
	}
}

func TestWriteAtomicCreatesDirAndFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "var", "run", "cdi")
	path := filepath.Join(dir, "x.yaml")
	if err := WriteAtomic(path, []byte("hello\n"), 0); err != nil {
		t.Fatal(err)
	}
	assertContent(t, path, "hello\n")
	assertMode(t, path, 0o644)
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Mode().Perm(); got != 0o755 {
		t.Errorf("created dir mode = %o, want 755", got)
	}
	assertNoTemp(t, dir)
}

func TestWriteAtomicMode0644RegardlessOfUmask(t *testing.T) {
	old := unix.Umask(0o077)
	defer unix.Umask(old)

	dir := t.TempDir()
	path := filepath.Join(dir, "spec.yaml")
	// An earlier file with a tighter mode must come out 0644 too.
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(path, []byte("new"), DefaultMode); err != nil {
		t.Fatal(err)
	}
	assertMode(t, path, 0o644)
	assertContent(t, path, "new")

	sub := filepath.Join(dir, "made", "here")
	if err := WriteAtomic(filepath.Join(sub, "f.json"), []byte("{}"), 0); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(sub)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Mode().Perm(); got != 0o755 {
		t.Errorf("dir created under umask 077 has mode %o, want 755", got)
	}
}

func TestWriteAtomicReplacesSymlinkNotItsTarget(t *testing.T) {
	dir := t.TempDir()
	elsewhere := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(elsewhere, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "spec.yaml")
	if err := os.Symlink(elsewhere, path); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(path, []byte("spec"), 0); err != nil {
		t.Fatal(err)
	}
	assertContent(t, elsewhere, "keep me")
	info, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Mode().IsRegular() {
		t.Errorf("target is %v after write, want a regular file", info.Mode())
	}
	assertContent(t, path, "spec")
}

// A directory that cannot be written to: the error names the spec path and
// the step, and the previous spec stays as it was.
func TestWriteAtomicUnwritableDirKeepsPrevious(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rdma.example.com-hca.yaml")
	if os.Geteuid() == 0 {
		// Root ignores permission bits; a read-only mount stops it.
		mountTmpfs(t, dir, "size=64k")
		writeFile(t, path, "previous")
		if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			t.Skipf("cannot remount %s read-only: %v", dir, err)
		}
	} else {
		writeFile(t, path, "previous")
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	}

	err := WriteAtomic(path, []byte("next"), 0)
	if err == nil {
		t.Fatal("WriteAtomic into an unwritable dir succeeded")
	}
	if !strings.Contains(err.Error(), "create temp file for "+path+": ") {
		t.Errorf("error %q does not name the step and %s", err, path)
	}
	if !errors.Is(err, syscall.EROFS) && !errors.Is(err, syscall.EACCES) {
		t.Errorf("error %v is neither EROFS nor EACCES", err)
	}
	assertContent(t, path, "previous")
	assertNoTemp(t, dir)
}

// A failure after the temp file exists (here: rename over a non-empty
// directory) removes the temp file.
func TestWriteAtomicRenameFailureRemovesTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "spec.yaml")
	if err := os.MkdirAll(filepath.Join(path, "child"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := WriteAtomic(path, []byte("data"), 0)
	if err == nil {
		t.Fatal("rename over a directory succeeded")
	}
	if !strings.HasPrefix(err.Error(), "rename temp file over "+path+": ") {
		t.Errorf("error %q does not name the rename step and the path", err)
	}
	assertNoTemp(t, dir)
	if _, err := os.Stat(filepath.Join(path, "child")); err != nil {
		t.Errorf("directory in the way was changed: %v", err)
	}
}

func TestWriteAtomicFullFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	mountTmpfs(t, dir, "size=16k")
	path := filepath.Join(dir, "rdma.example.com-hca.yaml")
	writeFile(t, path, "previous spec\n")

	big := bytes.Repeat([]byte("x"), 256<<10)
	err := WriteAtomic(path, big, 0)
	if err == nil {
		t.Fatal("writing 256 KiB into a 16 KiB tmpfs succeeded")
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("error %v is not ENOSPC", err)
	}
	want := "write " + path + ": no space left on device"
	if err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	assertContent(t, path, "previous spec\n")
	assertNoTemp(t, dir)
}

func TestWriteIfChanged(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "spec.json")

	changed, err := WriteIfChanged(path, []byte("v1"), 0)
	if err != nil || !changed {
		t.Fatalf("first write: changed=%v err=%v, want true, nil", changed, err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}

	changed, err = WriteIfChanged(path, []byte("v1"), 0)
	if err != nil || changed {
		t.Fatalf("same bytes: changed=%v err=%v, want false, nil", changed, err)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// Same inode: the file was not replaced.
	if !os.SameFile(before, after) {
		t.Error("file was replaced although its bytes were equal")
	}

	changed, err = WriteIfChanged(path, []byte("v2"), 0)
	if err != nil || !changed {
		t.Fatalf("new bytes: changed=%v err=%v, want true, nil", changed, err)
	}
	assertContent(t, path, "v2")

	// Equal bytes but a wrong mode is a change worth writing.
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	changed, err = WriteIfChanged(path, []byte("v2"), 0)
	if err != nil || !changed {
		t.Fatalf("wrong mode: changed=%v err=%v, want true, nil", changed, err)
	}
	assertMode(t, path, 0o644)
	assertNoTemp(t, dir)
}

func TestRemove(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "spec.yaml")
	writeFile(t, path, "x")
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file still there after Remove: %v", err)
	}
	if err := Remove(path); err != nil {
		t.Errorf("Remove of a missing file: %v, want nil", err)
	}
	if err := Remove(filepath.Join(dir, "no", "such", "dir", "f")); err != nil {
		t.Errorf("Remove under a missing dir: %v, want nil", err)
	}
}

func mountTmpfs(t *testing.T, dir, opts string) {
	t.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Skipf("cannot mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func assertContent(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s holds %q, want %q", path, got, want)
	}
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Mode().Perm(); got != want {
		t.Errorf("%s mode = %o, want %o", path, got, want)
	}
}

// assertNoTemp fails when a temp file of WriteAtomic is left in dir.
func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temp file %s left behind in %s", e.Name(), dir)
		}
	}
}

// Regression: under umask 077 the parents WriteAtomic had to create were
// left 0700 (only the spec dir itself was chmodded to 0755).
func TestWriteAtomicParentsAre0755UnderUmask077(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	base := t.TempDir()
	path := filepath.Join(base, "a", "b", "cdi", "x.yaml")
	if err := WriteAtomic(path, []byte("cdiVersion: 0.5.0\n"), 0); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a", "a/b", "a/b/cdi"} {
		fi, err := os.Stat(filepath.Join(base, d))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v %v, want 0755", d, fi.Mode().Perm(), err)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("spec: %v %v", fi.Mode().Perm(), err)
	}
}
