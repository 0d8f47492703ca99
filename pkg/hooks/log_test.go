package hooks

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestOpenLogFileRotates: a log past MaxLogSize becomes path.1 (an older
// .1 replaced) and the hook writes to a new file; a smaller one is
// appended to in place.
func TestOpenLogFileRotates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log", "hooks.log")
	f, err := OpenLogFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("first\n")
	f.Close()
	f, err = OpenLogFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("second\n")
	f.Close()
	if b, _ := os.ReadFile(path); string(b) != "first\nsecond\n" {
		t.Fatalf("a small log was not appended to: %q", b)
	}
	big := bytes.Repeat([]byte("x"), MaxLogSize)
	if err := os.WriteFile(path+".1", []byte("older\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, big, 0o640); err != nil {
		t.Fatal(err)
	}
	f, err = OpenLogFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("after\n")
	f.Close()
	if b, _ := os.ReadFile(path); string(b) != "after\n" {
		t.Errorf("after rotation the log holds %d bytes, want only the new line", len(b))
	}
	if b, _ := os.ReadFile(path + ".1"); !bytes.Equal(b, big) {
		t.Errorf("%s.1 holds %d bytes, want the rotated %d", path, len(b), len(big))
	}
}
