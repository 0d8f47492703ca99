// Package statefile keeps the node's small JSON state files: the DRA
// driver's checkpoint, the pod network's records of what was moved into
// pods, and the list of sandboxes the container hook reads. All three
// outlive the process that writes them and are read back by another one
// (a new agent after a crash or an upgrade, a hook at every container
// start), so they share one set of rules:
//
//   - a file is {"version": N, ...}: each file versions its own schema,
//     and a reader names the file and the versions it knows when it meets
//     another;
//   - a read opens without blocking and without following a symlink,
//     takes regular files only and at most a bounded number of bytes: a
//     FIFO or a huge file put in a state directory must not hang or
//     exhaust the reader;
//   - a save is atomic (pkg/specio: temp file, fsync, rename, fsync of the
//     directory): a crash leaves the old file or the new one;
//   - an owner that cannot use its file sets it aside (LoadOrSetAside)
//     beside the original, never overwrites it: the pod network's records
//     are the only account of which netdevs sit in pods.
//
// It depends on the standard library and pkg/specio only: the container
// hook links it.
package statefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/specio"
)

// DefaultMaxSize bounds a read when the caller gives no bound: far above
// what a node's state comes to (a few hundred pods and claims).
const DefaultMaxSize int64 = 16 << 20

// ErrNotRegular is Read's error for a path that holds no regular file (a
// FIFO, a device, a directory, a symlink).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is Read's error for a file above its bound.
var ErrTooLarge = errors.New("larger than the bound")

// Decoders read the versions of a file this program knows, by version:
// each gets the whole file (its "version" member included) and fills the
// caller's state.
type Decoders map[int]func(data []byte) error

// UnknownVersionError is a file of a version no decoder reads: written by
// a newer release (a downgrade), or not this file at all.
type UnknownVersionError struct {
	Path    string
	Version int
	Known   []int
}

func (e *UnknownVersionError) Error() string {
	known := make([]string, len(e.Known))
	for i, v := range e.Known {
		known[i] = strconv.Itoa(v)
	}
	return fmt.Sprintf("%s: version %d, this program reads version %s", e.Path, e.Version, strings.Join(known, ", "))
}

// SetAsideError is LoadOrSetAside's report of a file it could not use:
// why (Err), and where the file is now (Aside; "" when moving it failed,
// SetAsideErr says why). The caller starts from an empty state and must
// log it: whatever the file recorded is left for a person to act on.
type SetAsideError struct {
	Path        string
	Aside       string
	Err         error
	SetAsideErr error
}

func (e *SetAsideError) Error() string {
	if e.Aside == "" {
		return fmt.Sprintf("%v; and setting it aside: %v", e.Err, e.SetAsideErr)
	}
	return fmt.Sprintf("%v; set aside as %s", e.Err, e.Aside)
}

func (e *SetAsideError) Unwrap() error { return e.Err }

// Read returns the bytes of path, a regular file of at most maxSize bytes
// (0: DefaultMaxSize). It never blocks on a FIFO (O_NONBLOCK) and never
// reads through a symlink at path (O_NOFOLLOW). A missing file is an error
// that errors.Is(err, fs.ErrNotExist) recognizes. Errors name path.
func Read(path string, maxSize int64) ([]byte, error) {
	if maxSize <= 0 {
		maxSize = DefaultMaxSize
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s: %w (a symlink)", path, ErrNotRegular)
	}
	if err != nil {
		return nil, err // *PathError names path
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, info.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > maxSize {
		return nil, fmt.Errorf("%s: %w of %d bytes", path, ErrTooLarge, maxSize)
	}
	return b, nil
}

// Decode hands data, read from path, to the decoder of its version. A
// file that is not a JSON object with a numeric "version" is an error, as
// is a version no decoder reads (*UnknownVersionError). Errors name path.
func Decode(path string, data []byte, decoders Decoders) error {
	var envelope struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &envelope); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if envelope.Version == nil {
		return fmt.Errorf("%s: no version", path)
	}
	decode, ok := decoders[*envelope.Version]
	if !ok {
		known := make([]int, 0, len(decoders))
		for v := range decoders {
			known = append(known, v)
		}
		slices.Sort(known)
		return &UnknownVersionError{Path: path, Version: *envelope.Version, Known: known}
	}
	if err := decode(data); err != nil {
		return fmt.Errorf("%s: version %d: %w", path, *envelope.Version, err)
	}
	return nil
}

// Load is Read then Decode: for a reader that does not own the file (the
// container hook), which reports a bad file and leaves it where it is.
func Load(path string, maxSize int64, decoders Decoders) error {
	data, err := Read(path, maxSize)
	if err != nil {
		return err
	}
	return Decode(path, data, decoders)
}

// LoadOrSetAside is Load for the file's owner. A missing file is no error
// and calls no decoder: the caller's state stays empty. A file that
// cannot be read or decoded is renamed beside itself (SetAside) and
// reported as a *SetAsideError; the caller goes on from an empty state,
// and its next Save starts a new file without destroying the old one.
func LoadOrSetAside(path string, maxSize int64, decoders Decoders) error {
	err := Load(path, maxSize, decoders)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	aside, aerr := SetAside(path, time.Now())
	return &SetAsideError{Path: path, Aside: aside, Err: err, SetAsideErr: aerr}
}

// asideInfix separates a set-aside file's name from the time it was set
// aside: pod-network.json.corrupt-20250304T050607.123456789Z.
const asideInfix = ".corrupt-"

// SetAside renames path to PATH.corrupt-<UTC time of now> in the same
// directory (a rename, so a FIFO or a huge file moves as cheaply as a
// small one) and returns the new path. An earlier set-aside copy is never
// replaced.
func SetAside(path string, now time.Time) (string, error) {
	base := path + asideInfix + now.UTC().Format("20060102T150405.000000000Z")
	aside := base
	for i := 1; ; i++ {
		if _, err := os.Lstat(aside); err != nil {
			break // free, or the rename below says why not
		}
		aside = base + "." + strconv.Itoa(i)
	}
	if err := os.Rename(path, aside); err != nil {
		return "", err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return aside, fmt.Errorf("sync directory of %s: %w", path, err)
	}
	return aside, nil
}

// SetAsidePattern is a filepath.Glob pattern of path's set-aside copies.
func SetAsidePattern(path string) string { return path + asideInfix + "*" }

// Save replaces path atomically with {"version": version, ...body's
// members}. body must encode as a JSON object (a struct or a map); it
// carries no version of its own. mode is the file's permission bits.
func Save(path string, mode os.FileMode, version int, body any) error {
	b, err := Encode(version, body)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return specio.WriteAtomic(path, b, mode)
}

// Encode is the bytes Save writes: body's JSON object with the version
// as its first member.
func Encode(version int, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[0] != '{' {
		return nil, fmt.Errorf("state file body %T is not a JSON object", body)
	}
	out := make([]byte, 0, len(b)+24)
	out = append(out, `{"version":`...)
	out = strconv.AppendInt(out, int64(version), 10)
	if len(b) > 2 { // not {}
		out = append(out, ',')
	}
	return append(out, b[1:]...), nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
