package hooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// LDConfPath is the file update-ldcache writes in the container, so that a
// later ldconfig run inside (a package install) keeps the folders.
const LDConfPath = "/etc/ld.so.conf.d/00-rdma-cdi.conf"

// DefaultLdconfig is the host's ldconfig.
const DefaultLdconfig = "/sbin/ldconfig"

// hookEnv is the whole environment of anything a hook runs: nothing is
// inherited, so an image's LD_PRELOAD or LD_LIBRARY_PATH can never reach a
// host binary.
var hookEnv = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}

// LDCacheOptions steer UpdateLDCache.
type LDCacheOptions struct {
	// Folders are the in-container library dirs the CDI spec mounted.
	Folders []string
	// Ldconfig is the host's ldconfig (default DefaultLdconfig).
	Ldconfig string
	// Timeout bounds the ldconfig run (default 30s).
	Timeout time.Duration
}

// UpdateLDCache makes the container's dynamic linker find opts.Folders.
//
// Design. The hook writes LDConfPath in-root through pathrs-lite, then runs
// the HOST's ldconfig as `ldconfig -r ROOT FOLDER...` with an empty
// environment (PATH only). A createContainer hook runs before pivot_root,
// so the host's ldconfig is still reachable; nothing from the image is
// executed. glibc's ldconfig chroot()s into ROOT first thing when it may
// (CAP_SYS_CHROOT), so every path it then opens or writes, the
// /etc/ld.so.cache it renames into place and the soname links it makes
// included, resolves inside the root: an absolute symlink such as
// /etc/ld.so.cache -> /host/file or /etc -> /host/dir lands in the root, and
// ".." stops at it. Without CAP_SYS_CHROOT, ldconfig would instead prefix
// paths in user space, which is not a confinement, so the hook refuses to
// run it. Writing ld.so.cache in Go instead would mean re-implementing
// ldconfig's scan (ELF sonames, hwcaps subdirs, the image's own conf and
// cache format versions) for every glibc the images carry; the host's
// ldconfig already does that, confined by the kernel.
//
// The folders are also passed on the command line, so they are cached
// even when the image's /etc/ld.so.conf does not include ld.so.conf.d.
//
// A root that config.json marks read-only, a read-only file system, or an
// image without /etc (no glibc to configure) is a warning and no change:
// the libraries are still mounted, and found in standard dirs.
func UpdateLDCache(ctx context.Context, c *Container, opts LDCacheOptions, log *logrus.Entry) error {
	folders, err := cleanFolders(opts.Folders)
	if err != nil {
		return err
	}
	if len(folders) == 0 {
		log.Debug("no --folder given: nothing to add to the linker cache")
		return nil
	}
	if c.ReadOnly() {
		log.Warnf("container root is read-only (config.json root.readonly): linker cache not updated; libraries in %s are found only if the image's cache already lists them", strings.Join(folders, ", "))
		return nil
	}
	if ok, err := c.Exists("/etc"); err != nil {
		return err
	} else if !ok {
		log.Warn("image has no /etc (no glibc linker cache to update); skipped")
		return nil
	}
	ldconfig := opts.Ldconfig
	if ldconfig == "" {
		ldconfig = DefaultLdconfig
	}
	if !path.IsAbs(ldconfig) {
		return fmt.Errorf("ldconfig %q: want an absolute host path", ldconfig)
	}
	if err := canChroot(); err != nil {
		return err
	}

	conf := "# Written by rdma-cdi update-ldcache: RDMA libraries injected by CDI\n" + strings.Join(folders, "\n") + "\n"
	if err := c.WriteFile(LDConfPath, []byte(conf), 0o644); err != nil {
		if errors.Is(err, ErrReadOnly) {
			log.Warnf("%v; linker cache not updated", err)
			return nil
		}
		return err
	}

	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := append([]string{"-r", c.Path()}, folders...)
	cmd := exec.CommandContext(ctx, ldconfig, args...)
	cmd.Env = hookEnv
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	msg := strings.TrimSpace(out.String())
	if err != nil {
		if strings.Contains(msg, "Read-only file system") {
			log.Warnf("%s: read-only file system; linker cache not updated: %s", ldconfig, msg)
			return nil
		}
		return fmt.Errorf("%s %s: %w: %s", ldconfig, strings.Join(args, " "), err, msg)
	}
	if msg != "" {
		log.Debugf("%s: %s", ldconfig, msg)
	}
	log.Infof("linker cache of %s lists %s", c.Path(), strings.Join(folders, ", "))
	return nil
}

// cleanFolders checks the folders: absolute, one line each, deduplicated.
func cleanFolders(in []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, f := range in {
		if !path.IsAbs(f) || strings.ContainsAny(f, "\n\r\x00") {
			return nil, fmt.Errorf("--folder %q: want an absolute path inside the container", f)
		}
		f = path.Clean(f)
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out, nil
}

// canChroot checks CAP_SYS_CHROOT in the effective set: glibc's ldconfig
// confines itself only when its chroot() succeeds.
func canChroot() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[unix.CAP_SYS_CHROOT/32].Effective&(1<<(unix.CAP_SYS_CHROOT%32)) == 0 {
		return errors.New("no CAP_SYS_CHROOT: ldconfig -r could not confine itself to the container root; refusing to run it")
	}
	return nil
}
