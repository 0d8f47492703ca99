package stalemount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// An open file's /proc/self/fd link leads to its inode even after the path
// is gone, as a bind mount of it does.
func fdPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

func TestStaleFileReplacedByRename(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "ld.so.cache")
	if err := os.WriteFile(cache, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if stale, err := Stale(fdPath(f)); err != nil || stale {
		t.Fatalf("the current file: stale %v, err %v", stale, err)
	}
	// ldconfig's way: a new file renamed over the old one.
	if err := os.WriteFile(cache+"~", []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(cache+"~", cache); err != nil {
		t.Fatal(err)
	}
	if stale, err := Stale(fdPath(f)); err != nil || !stale {
		t.Fatalf("the replaced file: stale %v, err %v", stale, err)
	}
	if stale, err := Stale(cache); err != nil || stale {
		t.Fatalf("the path itself (the new file): stale %v, err %v", stale, err)
	}
}

func TestStaleDirectoryRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "infiniband")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil { // the kernel makes it again
		t.Fatal(err)
	}
	if stale, err := Stale(fdPath(d)); err != nil || !stale {
		t.Fatalf("the removed directory: stale %v, err %v", stale, err)
	}
}

func TestMissingIsNotStale(t *testing.T) {
	if stale, err := Stale(filepath.Join(t.TempDir(), "none")); err != nil || stale {
		t.Fatalf("stale %v, err %v", stale, err)
	}
}

func TestWatchEndsOnStalePath(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	done := make(chan error, 1)
	go func() { done <- Watch(context.Background(), 10*time.Millisecond, p, fdPath(f)) }()
	select {
	case err := <-done:
		t.Fatalf("Watch ended before anything changed: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var stale Error
		if !errors.As(err, &stale) || stale.Path != fdPath(f) {
			t.Fatalf("Watch: %v, want the stale path %s named", err, fdPath(f))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not see the removed file")
	}
}

func TestWatchEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Watch(ctx, time.Hour, t.TempDir()); err != nil {
		t.Fatalf("Watch after cancel: %v", err)
	}
}
