package hooks

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strings"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// LentFile is one file of the host's RDMA user space: where it goes in the
// container and where it lies on the host.
type LentFile struct {
	Path     string
	HostPath string
	// Dir is set for a directory (an NCCL plugin dir), lent whole.
	Dir bool
}

// ParseLentFile reads the hook's "--lend CONTAINERPATH=HOSTPATH".
func ParseLentFile(arg string) (LentFile, error) {
	ctr, host, ok := strings.Cut(arg, "=")
	if !ok || !path.IsAbs(ctr) || !path.IsAbs(host) || strings.ContainsRune(arg, 0) {
		return LentFile{}, fmt.Errorf("--lend %q: want CONTAINERPATH=HOSTPATH, both absolute", arg)
	}
	return LentFile{Path: path.Clean(ctr), HostPath: path.Clean(host)}, nil
}

// lentMountAttrs make every lent file read-only, with no setuid or device
// meaning.
const lentMountAttrs = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV

// Lend bind-mounts the host's files into the container and returns how
// many it mounted.
//
// Each host file becomes a detached mount (open_tree) in the hook's own
// namespace, where the host paths mean what the spec says; the mount point
// is found or made in-root through the container's view of its root; and
// the mount is attached there (move_mount) from inside the container's
// mount namespace. No container path is ever resolved by the kernel's
// mount(2), which would follow an image's symlinks out of the root.
//
// Without replace, an image file is never covered: a path the image
// already has (a file or a link) keeps the image's, and only missing
// paths, or empty files (the mount points a previous start of this
// container left), get the host's. With replace (mode host on an image
// with a stack) the image's file is covered, at its in-root resolved path.
func Lend(c *Container, files []LentFile, replace bool, log *logrus.Entry) (int, error) {
	type pending struct {
		file   LentFile
		tree   int
		target *os.File
	}
	var todo []pending
	defer func() {
		for _, p := range todo {
			unix.Close(p.tree)
			p.target.Close()
		}
	}()
	for _, f := range files {
		mountPoint := c.mountPoint
		if f.Dir {
			mountPoint = c.dirMountPoint
		}
		target, err := mountPoint(f.Path, replace)
		if err != nil {
			return 0, err
		}
		if target == nil {
			log.Debugf("kept the image's own %s", f.Path)
			continue
		}
		tree, err := detachedReadOnlyBind(f.HostPath)
		if err != nil {
			target.Close()
			return 0, err
		}
		todo = append(todo, pending{f, tree, target})
	}
	if len(todo) == 0 {
		return 0, nil
	}
	ns, err := c.MountNS()
	if err != nil {
		return 0, err
	}
	err = inMountNS(ns, func() error {
		for _, p := range todo {
			if err := unix.MoveMount(p.tree, "", int(p.target.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
				return fmt.Errorf("mount the host's %s at %s in container %s: %w", p.file.HostPath, p.file.Path, c.State.ID, err)
			}
		}
		return nil
	})
	return len(todo), err
}

// detachedReadOnlyBind makes a read-only bind mount of a host file that is
// attached nowhere yet.
func detachedReadOnlyBind(hostPath string) (int, error) {
	tree, err := unix.OpenTree(unix.AT_FDCWD, hostPath, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("host file %s to lend: %w", hostPath, err)
	}
	attr := unix.MountAttr{Attr_set: lentMountAttrs}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(tree)
		return -1, fmt.Errorf("make the mount of %s read-only: %w", hostPath, err)
	}
	return tree, nil
}

// mountPoint returns an O_PATH handle of where p's lent file is to be
// mounted in the root, or nil when the image's own file stays.
func (r *Root) mountPoint(p string, replace bool) (*os.File, error) {
	full := inRoot(p)
	dir, base := path.Split(full)
	dh, err := pathrs.MkdirAllHandle(r.fd, dir, 0o755)
	if err != nil {
		return nil, r.wrap("create directory", dir, err)
	}
	defer dh.Close()
	var st unix.Stat_t
	err = unix.Fstatat(int(dh.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		fd, err := unix.Openat(int(dh.Fd()), base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return nil, r.wrap("create mount point", full, err)
		}
		unix.Close(fd)
	case err != nil:
		return nil, r.wrap("inspect", full, err)
	case st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == 0:
		// A mount point left by an earlier start of this container.
	case !replace:
		return nil, nil
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		// The image's link stays a link; what it leads to (in-root) is covered.
		h, err := pathrs.OpenatInRoot(r.fd, full)
		if err != nil {
			return nil, r.wrap("resolve", full, err)
		}
		if err := notKernelFS(h, full); err != nil {
			h.Close()
			return nil, err
		}
		if err := checkRegular(h, full); err != nil {
			h.Close()
			return nil, err
		}
		return h, nil
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, kindError(st.Mode, full)
	}
	fd, err := unix.Openat(int(dh.Fd()), base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, r.wrap("open mount point", full, err)
	}
	f := os.NewFile(uintptr(fd), full)
	if err := checkRegular(f, full); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// dirMountPoint returns an O_PATH handle of the directory where p's lent
// directory is to be mounted, made in-root where missing, or nil when the
// image has a directory of its own there with something in it: that is
// never covered (replace is for the RDMA stack's files alone).
func (r *Root) dirMountPoint(p string, _ bool) (*os.File, error) {
	full := inRoot(p)
	h, err := pathrs.MkdirAllHandle(r.fd, full, 0o755)
	if err != nil {
		return nil, r.wrap("create directory", full, err)
	}
	if err := notKernelFS(h, full); err != nil {
		h.Close()
		return nil, err
	}
	d, err := pathrs.Reopen(h, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		h.Close()
		return nil, r.wrap("open directory", full, err)
	}
	names, err := d.Readdirnames(1)
	d.Close()
	if len(names) > 0 || err != nil && !errors.Is(err, io.EOF) {
		h.Close()
		return nil, err
	}
	return h, nil
}

// inMountNS runs fn in the mount namespace ns (nil: the caller's own). On
// a thread of its own that never returns to Go's pool: setns(2) changes
// the mount namespace only of a thread with a filesystem context of its
// own, and such a thread must not run other goroutines afterwards.
func inMountNS(ns *os.File, fn func() error) error {
	if ns == nil {
		return fn()
	}
	defer ns.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread exits with this goroutine
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			done <- fmt.Errorf("unshare the filesystem context: %w", err)
			return
		}
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNS); err != nil {
			done <- fmt.Errorf("entering the container's mount namespace: %w", err)
			return
		}
		done <- fn()
	}()
	return <-done
}
