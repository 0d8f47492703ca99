// Package specio writes and removes CDI spec files atomically.
//
// Engines re-read spec dirs on change (inotify) or on every container start,
// so a reader must never see a half-written file: the data goes to a temp
// file in the same directory, is synced, given its final mode, and renamed
// over the target. The temp file's name does not end in .yaml or .json, so
// CDI caches ignore it while it exists.
//
// Symlinks: a spec dir that is itself a symlink (or has one among its
// parents, as /var/run -> /run does on most distributions) is followed, not
// refused. Only root can point /etc/cdi or /var/run/cdi elsewhere, and
// immutable-OS images do so on purpose. A symlink at the target file is
// never written through: rename(2) replaces the link itself.
package specio

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// DefaultMode is the mode of a spec file: engines and users read it, only
// root writes it. cdi.Cache.WriteSpec would leave 0600.
const DefaultMode os.FileMode = 0o644

// dirMode is the mode of a spec dir that WriteAtomic has to create.
const dirMode os.FileMode = 0o755

// DefaultPath is the spec file name for a vendor/class pair:
// DIR/<vendor>-<class>.yaml, or .json when format is "json".
func DefaultPath(dir, vendor, class, format string) string {
	ext := ".yaml"
	if format == "json" {
		ext = ".json"
	}
	return filepath.Join(dir, vendor+"-"+class+ext)
}

// WriteAtomic replaces path with data, or leaves the previous file as it was.
// mode is set explicitly (not through the umask); 0 means DefaultMode.
// Errors name the target path and the step that failed.
func WriteAtomic(path string, data []byte, mode os.FileMode) error {
	if mode == 0 {
		mode = DefaultMode
	}
	dir := filepath.Dir(path)
	if err := ensureDir(dir); err != nil {
		return stepError("create directory for", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return stepError("create temp file for", path, err)
	}
	tmpName := tmp.Name()
	if err := fillAndClose(tmp, data, mode); err != nil {
		_ = os.Remove(tmpName)
		return stepError(err.step, path, err.err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		_ = os.Remove(tmpName)
		return stepError("rename temp file over", path, err)
	}
	// The rename is durable only once the directory entry is on disk.
	if err := syncDir(dir); err != nil {
		return stepError("sync directory of", path, err)
	}
	return nil
}

// WriteIfChanged writes data to path only when the file's bytes differ (or it
// does not exist), so engines watching the dir see no event for a no-op
// regeneration. A file with the same bytes but another mode is rewritten.
func WriteIfChanged(path string, data []byte, mode os.FileMode) (changed bool, err error) {
	if mode == 0 {
		mode = DefaultMode
	}
	if same, err := sameContent(path, data, mode); err != nil {
		return false, err
	} else if same {
		return false, nil
	}
	if err := WriteAtomic(path, data, mode); err != nil {
		return false, err
	}
	return true, nil
}

// Remove deletes the spec file at path; a missing file is not an error.
func Remove(path string) error {
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return stepError("remove", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return stepError("sync directory of", path, err)
	}
	return nil
}

// sameContent reports whether path is a regular file holding exactly data
// with the given permission bits.
func sameContent(path string, data []byte, mode os.FileMode) (bool, error) {
	info, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, stepError("stat", path, err)
	}
	if !info.Mode().IsRegular() || info.Mode().Perm() != mode.Perm() || info.Size() != int64(len(data)) {
		return false, nil
	}
	old, err := os.ReadFile(path)
	if err != nil {
		return false, stepError("read", path, err)
	}
	return bytes.Equal(old, data), nil
}

// ensureDir creates dir and its missing parents, each with mode 0755
// whatever the umask (under umask 077 MkdirAll alone would leave the parents
// 0700, unreadable to engines that are not root).
func ensureDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		missing = append(missing, d)
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return unwrapPath(err)
	}
	for _, d := range missing {
		if err := os.Chmod(d, dirMode); err != nil {
			return unwrapPath(err)
		}
	}
	return nil
}

// failedStep carries which step of filling the temp file failed.
type failedStep struct {
	step string
	err  error
}

// fillAndClose writes data, sets the mode and syncs the temp file, then
// closes it. The close error matters: some filesystems report ENOSPC only
// there.
func fillAndClose(f *os.File, data []byte, mode os.FileMode) *failedStep {
	fail := func(step string, err error) *failedStep {
		_ = f.Close()
		return &failedStep{step, err}
	}
	if _, err := f.Write(data); err != nil {
		return fail("write", err)
	}
	// fchmod is not subject to the umask; CreateTemp made the file 0600.
	if err := f.Chmod(mode.Perm()); err != nil {
		return fail("chmod", err)
	}
	if err := f.Sync(); err != nil {
		return fail("sync", err)
	}
	if err := f.Close(); err != nil {
		return &failedStep{"close", err}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return unwrapPath(err)
	}
	defer d.Close()
	return unwrapPath(d.Sync())
}

// stepError reads "STEP PATH: ERRNO-TEXT". The temp file's own name is left
// out: it is gone by the time anyone reads the message.
func stepError(step, path string, err error) error {
	return fmt.Errorf("%s %s: %w", step, path, unwrapPath(err))
}

// unwrapPath drops the *PathError/*LinkError wrapper so messages name the
// spec path once, while errors.Is(err, syscall.ENOSPC) keeps working.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}
