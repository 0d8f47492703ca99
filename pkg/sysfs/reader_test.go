package sysfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readAttr is the plain reading the Reader must match: open, read at most
// a page, drop the trailing newline.
func readAttr(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxAttrSize+1))
	if err != nil {
		return "", err
	}
	if len(data) > maxAttrSize {
		return "", fmt.Errorf("read %s: attribute larger than %d bytes", path, maxAttrSize)
	}
	return string(bytes.TrimRight(data, "\n")), nil
}

func mkdirWrite(p, body string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(body), 0o644)
}

func writeAttr(t *testing.T, dir, rel, body string) string {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := mkdirWrite(p, body); err != nil {
		t.Fatal(err)
	}
	return p
}

// The Reader returns what ReadAttr returns, errors included.
func TestReaderMatchesreadAttr(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("x", maxAttrSize+1)
	exact := strings.Repeat("y", maxAttrSize)
	for _, tc := range []struct{ name, body string }{
		{"plain", "4: ACTIVE\n"}, {"no-newline", "RoCE v2"}, {"empty", ""}, {"newlines", "a\n\n\n"},
		{"exact", exact}, {"big", big},
	} {
		p := writeAttr(t, dir, tc.name, tc.body)
		want, wantErr := readAttr(p)
		got, err := NewReader().Read(p)
		if got != want || (err == nil) != (wantErr == nil) {
			t.Errorf("%s: Read = %q, %v; ReadAttr = %q, %v", tc.name, got, err, want, wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %v does not name %s", tc.name, err, p)
		}
	}
}

func TestReaderErrorsNameTheFileAndKeepTheErrno(t *testing.T) {
	dir := t.TempDir()
	r := NewReader()
	missing := filepath.Join(dir, "missing")
	if _, err := r.Read(missing); !IsAbsent(err) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing: %v", err)
	}
	if v, err := r.ReadOptional(missing); v != "" || err != nil {
		t.Errorf("ReadOptional(missing) = %q, %v", v, err)
	}
	sub := filepath.Join(dir, "adir")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(sub); !errors.Is(err, syscall.EISDIR) || !strings.Contains(err.Error(), sub) {
		t.Errorf("directory: %v", err)
	}
}

// A FIFO where an attribute should be fails at once instead of blocking.
func TestReaderDoesNotBlockOnAFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() { _, err := NewReader().Read(p); done <- err }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Read blocked on a FIFO")
	}
}

func TestDirReadsRelativeAndNamesTheWholePath(t *testing.T) {
	dir := t.TempDir()
	writeAttr(t, dir, "ports/1/gids/0", "fe80:0000:0000:0000:0000:0000:0000:0001\n")
	writeAttr(t, dir, "ports/1/gid_attrs/types/0", "RoCE v2\n")
	r := NewReader()
	port, err := r.OpenDir(filepath.Join(dir, "ports/1"))
	if err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	if b, err := port.ReadBytes("gids/0"); err != nil || string(b) != "fe80:0000:0000:0000:0000:0000:0000:0001" {
		t.Errorf("gids/0 = %q, %v", b, err)
	}
	if v, err := port.ReadOptional("gid_attrs/types/0"); err != nil || v != "RoCE v2" {
		t.Errorf("types/0 = %q, %v", v, err)
	}
	if v, err := port.ReadOptional("gid_attrs/ndevs/0"); err != nil || v != "" {
		t.Errorf("absent ndevs/0 = %q, %v", v, err)
	}
	_, err = port.ReadBytes("gids/7")
	if want := filepath.Join(dir, "ports/1/gids/7"); !IsAbsent(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("gids/7: %v, want an absent error naming %s", err, want)
	}
	if _, err := r.OpenDir(filepath.Join(dir, "nope")); err == nil {
		t.Error("OpenDir of a missing dir succeeded")
	}
}

// The returned slice is the reader's buffer; Read copies.
func TestReaderReuseDoesNotCorruptStrings(t *testing.T) {
	dir := t.TempDir()
	a := writeAttr(t, dir, "a", "first\n")
	b := writeAttr(t, dir, "b", "second\n")
	r := NewReader()
	s1, _ := r.Read(a)
	s2, _ := r.Read(b)
	if s1 != "first" || s2 != "second" {
		t.Fatalf("%q %q", s1, s2)
	}
}
