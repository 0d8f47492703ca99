package sysfs

import (
	"bytes"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Reader reads attributes with three system calls each (open, one read,
// close) into one reused buffer. os.Open would add fcntl and epoll calls
// per file to register it with the poller, and io.ReadAll a second read to
// see EOF; a node's GID tables are thousands of attributes, so discovery
// uses a Reader. A Reader is not safe for concurrent use.
//
// One read is enough: a sysfs attribute is produced whole by the kernel on
// the first read (at most a page), and a regular file (a fixture) returns
// short only at its end.
type Reader struct {
	buf [maxAttrSize + 1]byte
}

// NewReader returns a Reader.
func NewReader() *Reader { return new(Reader) }

// ReadBytes returns the attribute at path with the trailing newlines
// removed. The slice is valid until the next call. Errors are the same as
// ReadAttr's: *os.PathError values that name the file and keep the errno.
func (r *Reader) ReadBytes(path string) ([]byte, error) {
	return r.readAt(unix.AT_FDCWD, "", path)
}

// readAt reads name relative to the directory dirfd, whose path is dir
// (for errors only).
func (r *Reader) readAt(dirfd int, dir, name string) ([]byte, error) {
	var fd int
	var err error
	for {
		// O_NONBLOCK: a FIFO where an attribute should be fails instead of
		// blocking discovery.
		fd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: joinRel(dir, name), Err: err}
	}
	var n int
	for {
		n, err = unix.Read(fd, r.buf[:])
		if err != unix.EINTR {
			break
		}
	}
	_ = unix.Close(fd)
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: joinRel(dir, name), Err: err}
	}
	if n > maxAttrSize {
		return nil, fmt.Errorf("read %s: attribute larger than %d bytes", joinRel(dir, name), maxAttrSize)
	}
	return bytes.TrimRight(r.buf[:n], "\n"), nil
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// Dir is a directory held open, whose attributes a Reader reads relative to
// it: the kernel then resolves two path components per attribute instead
// of the whole path, class symlink included (a third less time per GID
// slot). Errors still name the whole path.
type Dir struct {
	r    *Reader
	fd   int
	path string
}

// OpenDir opens the directory at path (an O_PATH handle). Close it.
func (r *Reader) OpenDir(path string) (*Dir, error) {
	for {
		fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return &Dir{r: r, fd: fd, path: path}, nil
	}
}

// Path is the directory's path.
func (d *Dir) Path() string { return d.path }

// Close releases the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// ReadBytes is Reader.ReadBytes of rel, a path relative to the directory.
func (d *Dir) ReadBytes(rel string) ([]byte, error) { return d.r.readAt(d.fd, d.path, rel) }

// ReadOptional is Reader.ReadOptional of rel.
func (d *Dir) ReadOptional(rel string) (string, error) {
	b, err := d.ReadBytes(rel)
	if IsAbsent(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Read is ReadBytes as a string (a copy).
func (r *Reader) Read(path string) (string, error) {
	b, err := r.ReadBytes(path)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// ReadOptional is Read that maps an absent attribute to "" (see IsAbsent).
func (r *Reader) ReadOptional(path string) (string, error) {
	s, err := r.Read(path)
	if IsAbsent(err) {
		return "", nil
	}
	return s, err
}
