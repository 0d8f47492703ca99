package ldsandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func sameFile(t *testing.T, f *os.File, path string) bool {
	t.Helper()
	var a, b unix.Stat_t
	must(t, unix.Fstat(int(f.Fd()), &a))
	must(t, unix.Stat(path, &b))
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// Without an rdma-cdi-ldsandbox beside this executable (the test binary's
// build directory has none) the sandbox is this very binary.
func TestOpenExecutableFallsBackToThisBinary(t *testing.T) {
	f, err := openExecutable("")
	must(t, err)
	defer f.Close()
	if !sameFile(t, f, selfExe) {
		t.Errorf("openExecutable(\"\") opened %s, not this binary", f.Name())
	}
}

// Whoever could change or swap the sandbox's binary could run code as root
// at every container start: openTrusted takes only a regular file that it
// and its directory are root's and writable by root alone.
func TestOpenExecutableRefusesWhatOthersCouldChange(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir, file string)
		refusal string // "" for accepted
	}{
		{"root's, 0755 in a 0755 directory", func(*testing.T, string, string) {}, ""},
		{"group-writable file", func(t *testing.T, _, file string) { must(t, os.Chmod(file, 0o775)) }, "writable by group or others"},
		{"world-writable directory", func(t *testing.T, dir, _ string) { must(t, os.Chmod(dir, 0o1777)) }, "writable by group or others"},
		{"another user's file", func(t *testing.T, _, file string) { must(t, os.Chown(file, 4321, 0)) }, "owned by uid 4321"},
		{"another user's directory", func(t *testing.T, dir, _ string) { must(t, os.Chown(dir, 4321, 0)) }, "owned by uid 4321"},
		{"a symlink to a root file", func(t *testing.T, dir, file string) {
			must(t, os.Rename(file, filepath.Join(dir, "real")))
			must(t, os.Symlink("real", file))
		}, "too many levels of symbolic links"},
		{"a directory", func(t *testing.T, _, file string) {
			must(t, os.Remove(file))
			must(t, os.Mkdir(file, 0o755))
		}, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bin")
			must(t, os.Mkdir(dir, 0o755))
			file := filepath.Join(dir, ExecutableName)
			must(t, os.WriteFile(file, []byte("\x7fELF"), 0o755))
			tc.prepare(t, dir, file)
			f, err := openTrusted(file)
			switch {
			case tc.refusal == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refusal == "":
				f.Close()
			case err == nil:
				f.Close()
				t.Fatalf("accepted; want a refusal with %q", tc.refusal)
			case !strings.Contains(err.Error(), tc.refusal):
				t.Fatalf("refused with %v; want %q", err, tc.refusal)
			}
		})
	}
	if _, err := openTrusted("relative/" + ExecutableName); err == nil {
		t.Error("a relative path was accepted")
	}
}
