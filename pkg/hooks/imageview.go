package hooks

import (
	"errors"
	"fmt"
	"io"
	"os"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/userspace"
)

// ImageView is the root as the image's own linker sees it: symlinks are
// followed, but in-root (RESOLVE_IN_ROOT), so an absolute link or ".."
// never leaves the container root. It only reads.
func (r *Root) ImageView() userspace.ImageFS { return imageView{r} }

type imageView struct{ r *Root }

// open resolves p in-root, following links, and reopens it for reading
// if it is of the kind wanted (unix.S_IFREG or unix.S_IFDIR). The kind is
// checked on the O_PATH handle, which opens nothing: a device node of the
// image (a watchdog arms on open) or a FIFO is never opened by the hook.
// Reopen goes through that handle, so what it opens is the file checked.
func (v imageView) open(p string, kind uint32, flags int) (*os.File, error) {
	full := inRoot(p)
	h, err := pathrs.OpenatInRoot(v.r.fd, full)
	if err != nil {
		return nil, v.r.wrap("open", full, err)
	}
	defer h.Close()
	if err := notKernelFS(h, full); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(h.Fd()), &st); err != nil {
		return nil, v.r.wrap("inspect", full, err)
	}
	if st.Mode&unix.S_IFMT != kind {
		if kind == unix.S_IFDIR {
			return nil, fmt.Errorf("%s in container root is not a directory", full)
		}
		return nil, kindError(st.Mode, full)
	}
	f, err := pathrs.Reopen(h, flags|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC)
	if err != nil {
		return nil, v.r.wrap("open", full, err)
	}
	return f, nil
}

func (v imageView) ReadFile(p string, max int64) ([]byte, error) {
	f, err := v.open(p, unix.S_IFREG, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max))
	if err != nil {
		return nil, fmt.Errorf("read %s in container root: %w", inRoot(p), err)
	}
	return data, nil
}

func (v imageView) ReadDir(p string) ([]string, error) {
	f, err := v.open(p, unix.S_IFDIR, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// A directory of a hostile image may be huge: a bounded read is enough
	// to find a provider or a .driver file.
	names, err := f.Readdirnames(4096)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return names, err
}

// kernelFS are the file systems whose files are the kernel's, not the
// image's: before pivot_root the container's /proc and /sys are mounted in
// its root and not yet masked, and reading /proc/kmsg or a PCI resource
// file as the host's root acts on the host.
var kernelFS = map[int64]string{
	unix.PROC_SUPER_MAGIC: "procfs", unix.SYSFS_MAGIC: "sysfs", unix.CGROUP_SUPER_MAGIC: "cgroupfs",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2", unix.DEBUGFS_MAGIC: "debugfs", unix.TRACEFS_MAGIC: "tracefs",
	unix.SECURITYFS_MAGIC: "securityfs", unix.BPF_FS_MAGIC: "bpffs", unix.PSTOREFS_MAGIC: "pstore",
	unix.EFIVARFS_MAGIC: "efivarfs", unix.DEVPTS_SUPER_MAGIC: "devpts",
}

// notKernelFS refuses a handle on one of kernelFS: a link of the image
// that leads there is no library, cache or directory of its own.
func notKernelFS(h *os.File, full string) error {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(h.Fd()), &fs); err != nil {
		return fmt.Errorf("%s in container root: %w", full, err)
	}
	if name, ok := kernelFS[int64(fs.Type)]; ok {
		return fmt.Errorf("%s in container root is on %s, not a file of the image", full, name)
	}
	return nil
}
