package statefile

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

type body struct {
	Names []string `json:"names"`
}

// decodersInto reads versions 1 and 2 into got; version 1 spelled the
// list "list".
func decodersInto(got *body) Decoders {
	return Decoders{
		1: func(b []byte) error {
			var v1 struct {
				List []string `json:"list"`
			}
			err := json.Unmarshal(b, &v1)
			got.Names = v1.List
			return err
		},
		2: func(b []byte) error { return json.Unmarshal(b, got) },
	}
}

func TestSaveWritesTheVersionEnvelopeAndLoadReadsIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	if err := Save(path, 0o600, 2, body{Names: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if want := `{"version":2,"names":["a","b"]}`; string(b) != want {
		t.Errorf("file %s, want %s", b, want)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", info.Mode())
	}
	var got body
	if err := Load(path, 0, decodersInto(&got)); err != nil || len(got.Names) != 2 {
		t.Fatalf("load: %+v %v", got, err)
	}
	// An older version goes to its own decoder.
	if err := os.WriteFile(path, []byte(`{"version":1,"list":["x"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got = body{}
	if err := Load(path, 0, decodersInto(&got)); err != nil || len(got.Names) != 1 || got.Names[0] != "x" {
		t.Fatalf("version 1: %+v %v", got, err)
	}
	if b, _ := Encode(3, struct{}{}); string(b) != `{"version":3}` {
		t.Errorf("empty body: %s", b)
	}
	if _, err := Encode(1, []string{"not an object"}); err == nil {
		t.Error("a list body was encoded")
	}
}

func TestLoadNamesTheFileAndTheVersionsItKnows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(path, []byte(`{"version":7}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var got body
	err := Load(path, 0, decodersInto(&got))
	var unknown *UnknownVersionError
	if !errors.As(err, &unknown) || unknown.Version != 7 || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "1, 2") {
		t.Fatalf("got %v", err)
	}
	for name, content := range map[string]string{"not JSON": "{", "no version": `{"names":[]}`, "a list": "[]"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := Load(path, 0, decodersInto(&got)); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A FIFO, a symlink and a file above the bound are refused at once: a
// reader never blocks on a FIFO nor takes more than the bound.
func TestReadRefusesWhatIsNotABoundedRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte(`{"version":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 101), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, p := range []string{fifo, link, dir} {
			if _, err := Read(p, 0); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), p) {
				t.Errorf("%s: %v, want ErrNotRegular naming it", p, err)
			}
		}
		if _, err := Read(big, 100); !errors.Is(err, ErrTooLarge) {
			t.Errorf("101 bytes under a bound of 100: %v", err)
		}
		if b, err := Read(big, 101); err != nil || len(b) != 101 {
			t.Errorf("101 bytes under a bound of 101: %d %v", len(b), err)
		}
		if _, err := Read(filepath.Join(dir, "none"), 0); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("missing: %v", err)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Read blocked")
	}
}

// The owner's load sets a bad file aside and says where; the copy keeps
// the bytes, a later save does not touch it, and a second bad file does
// not replace the first copy.
func TestLoadOrSetAsideKeepsTheBadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "records.json")
	var got body
	if err := LoadOrSetAside(path, 0, decodersInto(&got)); err != nil {
		t.Fatalf("missing file: %v", err)
	}
	var asides []string
	for _, content := range []string{`{"version":2,"names":[`, `{"version":9}`} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		err := LoadOrSetAside(path, 0, decodersInto(&got))
		var set *SetAsideError
		if !errors.As(err, &set) || set.Aside == "" || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), set.Aside) {
			t.Fatalf("%s: %v", content, err)
		}
		if b, _ := os.ReadFile(set.Aside); string(b) != content {
			t.Errorf("set aside as %s: %q, want %q", set.Aside, b, content)
		}
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the bad file is still at %s", path)
		}
		asides = append(asides, set.Aside)
		if err := Save(path, 0o600, 2, body{}); err != nil {
			t.Fatal(err)
		}
	}
	if found, _ := filepath.Glob(SetAsidePattern(path)); len(found) != 2 || asides[0] == asides[1] {
		t.Errorf("set-aside copies %v (reported %v), want two", found, asides)
	}

	// A FIFO is moved aside too, without being opened for long.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	var set *SetAsideError
	if err := LoadOrSetAside(path, 0, decodersInto(&got)); !errors.As(err, &set) || !errors.Is(err, ErrNotRegular) {
		t.Fatalf("FIFO: %v", err)
	}
}

func TestSetAsideNeverReplacesAnEarlierCopy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.json")
	now := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	var asides []string
	for _, content := range []string{"first", "second"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		aside, err := SetAside(path, now)
		if err != nil {
			t.Fatal(err)
		}
		asides = append(asides, aside)
	}
	if asides[0] == asides[1] {
		t.Fatalf("both set aside as %s", asides[0])
	}
	for i, want := range []string{"first", "second"} {
		if b, _ := os.ReadFile(asides[i]); string(b) != want {
			t.Errorf("%s holds %q, want %q", asides[i], b, want)
		}
	}
}

// A path under a file (ENOTDIR) is reported, not looped on.
func TestLoadOrSetAsideUnderAFile(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(parent, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var got body
	err := LoadOrSetAside(filepath.Join(parent, "state.json"), 0, decodersInto(&got))
	var set *SetAsideError
	if !errors.As(err, &set) || set.Aside != "" || set.SetAsideErr == nil || !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("got %v", err)
	}
}
