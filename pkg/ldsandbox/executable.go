package ldsandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ExecutableName is the sandbox's own small binary (cmd/rdma-cdi-ldsandbox),
// installed beside the hook. It links this package and little else, so the
// sandbox's process starts in about half the time a re-execution of the
// 5 MB hook takes (BENCHMARKS.md, issue 53); every container start that
// updates the linker cache pays that start once more after the hook's own.
const ExecutableName = "rdma-cdi-ldsandbox"

// selfExe names this process's own binary: the running file even if an
// upgrade replaced the one at its path meanwhile.
const selfExe = "/proc/self/exe"

// openExecutable opens the binary that becomes the sandbox. name "" means
// ExecutableName beside this process's executable, or, where none is
// installed (an older install, the tests' binaries), this binary itself,
// whose main calls RunIfSandbox too. The file is opened once, here, and
// executed through that descriptor (Start): nothing looks the path up
// again between the checks and the exec.
func openExecutable(name string) (*os.File, error) {
	if name != "" {
		return openTrusted(name)
	}
	if self, err := os.Executable(); err == nil {
		f, err := openTrusted(filepath.Join(filepath.Dir(self), ExecutableName))
		if !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
	}
	f, err := os.Open(selfExe)
	if err != nil {
		return nil, fmt.Errorf("ldconfig sandbox: this executable: %w", err)
	}
	return f, nil
}

// openTrusted opens name for execution as root, and refuses it unless it
// is a regular file, not a symlink, that it and its directory belong to
// root (or to the user running this, a rootless engine's hook) and that
// neither is writable by group or others: whoever could change or swap the
// file could run code as root at every container start. That is the trust
// the hook's own binary already needs, in the same directory.
func openTrusted(name string) (*os.File, error) {
	if !filepath.IsAbs(name) {
		return nil, fmt.Errorf("ldconfig sandbox %q: want an absolute path", name)
	}
	dir, err := os.OpenFile(filepath.Dir(name), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ldconfig sandbox: %w", err)
	}
	defer dir.Close()
	fd, err := unix.Openat(int(dir.Fd()), filepath.Base(name), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ldconfig sandbox: %w", &fs.PathError{Op: "open", Path: name, Err: err})
	}
	f := os.NewFile(uintptr(fd), name)
	if err := checkTrusted(dir, name, true); err != nil {
		f.Close()
		return nil, err
	}
	if err := checkTrusted(f, name, false); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func checkTrusted(f *os.File, name string, isDir bool) error {
	what := name
	if isDir {
		what = "the directory of " + name
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("ldconfig sandbox: %s: %w", what, err)
	}
	wantType, typeName := uint32(unix.S_IFREG), "a regular file"
	if isDir {
		wantType, typeName = unix.S_IFDIR, "a directory"
	}
	switch {
	case st.Mode&unix.S_IFMT != wantType:
		return fmt.Errorf("ldconfig sandbox: %s is not %s", what, typeName)
	case st.Uid != 0 && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("ldconfig sandbox: refusing %s: owned by uid %d, not root", what, st.Uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("ldconfig sandbox: refusing %s: writable by group or others (mode %#o)", what, st.Mode&0o7777)
	}
	return nil
}
