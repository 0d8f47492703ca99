package hooks

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/ldsandbox"
)

// ErrReadOnly marks a write refused because the container's root is
// read-only (EROFS, or root.readonly in config.json).
var ErrReadOnly = errors.New("container root is read-only")

// Root is a container's root filesystem, held open. Every path below it is
// resolved by pathrs-lite as if the root were "/" (openat2
// RESOLVE_IN_ROOT, or its checked fallback): absolute symlinks and ".."
// stay inside. The final component of a file is never followed: a symlink,
// directory, FIFO or device where a regular file is expected is refused.
type Root struct {
	path string
	fd   *os.File // O_PATH|O_DIRECTORY
	dev  uint64
	ino  uint64
	// owner, when set, owns the files WriteFile makes: the container's
	// root as the host numbers it, for a hook outside its user namespace.
	owner *ldsandbox.Owner
	// log, when set, hears what WriteFile leaves undone without failing.
	log logrus.FieldLogger
}

// OpenRoot opens dir as a container root. The host's own root is refused:
// a hook must never treat "/" as a container.
func OpenRoot(dir string) (*Root, error) {
	fd, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("container root: %w", err)
	}
	var st, host unix.Stat_t
	if err := unix.Fstat(int(fd.Fd()), &st); err != nil {
		fd.Close()
		return nil, fmt.Errorf("container root %s: %w", dir, err)
	}
	if err := unix.Stat("/", &host); err == nil && host.Dev == st.Dev && host.Ino == st.Ino {
		fd.Close()
		return nil, fmt.Errorf("container root %s is the host's root directory", dir)
	}
	return &Root{path: dir, fd: fd, dev: st.Dev, ino: st.Ino}, nil
}

// Path is the root's host path.
func (r *Root) Path() string { return r.path }

// Close releases the root.
func (r *Root) Close() error { return r.fd.Close() }

// same reports whether st is the root directory itself.
func (r *Root) same(st *unix.Stat_t) bool { return st.Dev == r.dev && st.Ino == r.ino }

// inRoot cleans p into an absolute in-root path: "../../x" is "/x".
func inRoot(p string) string { return path.Clean("/" + p) }

// Exists reports whether p names something in the root (symlinks resolved
// in-root).
func (r *Root) Exists(p string) (bool, error) {
	h, err := pathrs.OpenatInRoot(r.fd, inRoot(p))
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s in container root: %w", inRoot(p), err)
	}
	h.Close()
	return true, nil
}

// ReadFile reads the regular file p, at most max bytes. A missing file (or
// parent) returns an error matching os.ErrNotExist.
func (r *Root) ReadFile(p string, max int64) ([]byte, error) {
	full := inRoot(p)
	dir, base := path.Split(full)
	dh, err := pathrs.OpenatInRoot(r.fd, dir)
	if err != nil {
		return nil, r.wrap("open", dir, err)
	}
	defer dh.Close()
	if err := checkFinal(dh, base, full); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(int(dh.Fd()), base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, r.wrap("open", full, err)
	}
	f := os.NewFile(uintptr(fd), full)
	defer f.Close()
	if err := checkRegular(f, full); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s in container root: %w", full, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s in container root: larger than %d bytes", full, max)
	}
	return data, nil
}

// WriteFile replaces p atomically with data: a temporary file in the same
// (in-root resolved) directory, then renameat. Missing parents are created
// 0755. An existing p must be a regular file: a symlink is refused, not
// followed, and so are directories, FIFOs, sockets and devices.
func (r *Root) WriteFile(p string, data []byte, mode os.FileMode) (err error) {
	full := inRoot(p)
	dir, base := path.Split(full)
	if base == "" {
		return fmt.Errorf("%s: not a file path", p)
	}
	dh, err := pathrs.MkdirAllHandle(r.fd, dir, 0o755)
	if err != nil {
		return r.wrap("create directory", dir, err)
	}
	defer dh.Close()
	dfd := int(dh.Fd())
	if err := checkFinal(dh, base, full); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	tmp, err := tempName(base)
	if err != nil {
		return err
	}
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return r.wrap("create", path.Join(dir, tmp), err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	defer func() {
		if err != nil {
			_ = unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(mode)
	}
	if werr == nil && r.owner != nil {
		werr = f.Chown(r.owner.UID, r.owner.GID)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return r.wrap("write", full, werr)
	}
	if err := unix.Renameat(dfd, tmp, dfd, base); err != nil {
		return r.wrap("rename into", full, err)
	}
	if !removeStaleTemps(dfd, base, time.Now()) && r.log != nil {
		r.log.Warnf("%s in container root: stopped looking for stale temporary files after %d entries of %s", full, maxStaleTempScan, dir)
	}
	return nil
}

// staleTempAge is how old a temporary file must be to count as left behind
// by a hook that was killed between create and rename; a younger one may
// belong to a hook still running.
const staleTempAge = time.Minute

// maxStaleTempScan bounds the entries removeStaleTemps lists: the image's
// directory (its /etc) may hold millions, and a real one holds a few
// hundred. A temporary file left beyond it stays, as it did before the
// sweep existed.
const maxStaleTempScan = 4096

// removeStaleTemps unlinks base's old temporary files in the directory dfd,
// so a container whose hook was once killed mid-write (and is started
// again) does not keep them. Best effort: the write already succeeded.
// Names come from the directory itself, so nothing outside it is reached,
// and unlinkat never follows a link. The directory is read in chunks, at
// most maxStaleTempScan entries; done is false when it stopped there.
func removeStaleTemps(dfd int, base string, now time.Time) (done bool) {
	fd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true
	}
	dir := os.NewFile(uintptr(fd), base)
	defer dir.Close()
	prefix := tempPrefix(base)
	for seen := 0; seen < maxStaleTempScan; {
		names, err := dir.Readdirnames(min(256, maxStaleTempScan-seen))
		seen += len(names)
		for _, name := range names {
			if !strings.HasPrefix(name, prefix) {
				continue
			}
			var st unix.Stat_t
			if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
				continue
			}
			if now.Sub(time.Unix(st.Mtim.Unix())) >= staleTempAge {
				_ = unix.Unlinkat(dfd, name, 0)
			}
		}
		if err != nil {
			return true // io.EOF: all of it; an I/O error: best effort
		}
	}
	names, _ := dir.Readdirnames(1)
	return len(names) == 0
}

func tempPrefix(base string) string { return ".rdma-cdi-" + base + "." }

func (r *Root) wrap(op, p string, err error) error {
	if errors.Is(err, unix.EROFS) {
		return fmt.Errorf("%s %s in container root %s: %w", op, p, r.path, ErrReadOnly)
	}
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%s %s in container root %s: %w", op, p, r.path, os.ErrNotExist)
	}
	return fmt.Errorf("%s %s in container root %s: %w", op, p, r.path, err)
}

// checkFinal inspects the last component without following it.
func checkFinal(dir *os.File, base, full string) error {
	var st unix.Stat_t
	err := unix.Fstatat(int(dir.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%s in container root: %w", full, os.ErrNotExist)
	}
	if err != nil {
		return fmt.Errorf("%s in container root: %w", full, err)
	}
	return kindError(st.Mode, full)
}

func checkRegular(f *os.File, full string) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("%s in container root: %w", full, err)
	}
	return kindError(st.Mode, full)
}

func kindError(mode uint32, full string) error {
	var kind string
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFLNK:
		kind = "a symlink (refused: hooks never write or read through a link at the final component)"
	case unix.S_IFDIR:
		kind = "a directory"
	case unix.S_IFIFO:
		kind = "a FIFO"
	case unix.S_IFSOCK:
		kind = "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		kind = "a device node"
	default:
		kind = fmt.Sprintf("of unknown type %#o", mode&unix.S_IFMT)
	}
	return fmt.Errorf("%s in container root is %s, not a regular file", full, kind)
}

func tempName(base string) (string, error) {
	// getrandom(2) itself: crypto/rand would link Go's FIPS module, whose
	// package inits every container start pays for a six-byte name.
	var b [6]byte
	n, err := unix.Getrandom(b[:], 0)
	if err == nil && n != len(b) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return "", fmt.Errorf("random name for %s: %w", base, err)
	}
	return tempPrefix(base) + hex.EncodeToString(b[:]), nil
}
