package hooks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/ldsandbox"
)

// LDConfPath is the file update-ldcache writes in the container, so that a
// later ldconfig run inside (a package install) keeps the folders.
const LDConfPath = "/etc/ld.so.conf.d/00-rdma-cdi.conf"

// LDCacheOptions steer UpdateLDCache.
type LDCacheOptions struct {
	// Folders are the in-container library dirs the CDI spec mounted.
	Folders []string
	// Ldconfig is the host's ldconfig (default: ldsandbox picks it).
	Ldconfig string
	// Timeout bounds the ldconfig run (default ldsandbox.DefaultTimeout).
	Timeout time.Duration
}

// UpdateLDCache makes the container's dynamic linker find opts.Folders.
//
// The hook writes LDConfPath in-root through pathrs-lite, then has
// ldsandbox run the HOST's ldconfig confined to the container root (its
// own mount namespace, /proc and /sys masked, pivot_root, nodev, bounded
// rlimits; see that package for why a chroot is not enough). Nothing from
// the image is executed. Writing ld.so.cache in Go instead would mean
// re-implementing ldconfig's scan (ELF sonames, hwcaps subdirs, the image's
// own conf and cache format versions) for every glibc the images carry.
//
// The folders are also passed on the command line, so they are cached
// even when the image's /etc/ld.so.conf does not include ld.so.conf.d.
//
// A root that config.json marks read-only, a read-only file system, or an
// image without /etc (no glibc to configure) is a warning and no change:
// the libraries are still mounted, and found in standard dirs.
func UpdateLDCache(ctx context.Context, c *Container, opts LDCacheOptions, log *logrus.Entry) error {
	u, err := startLDCacheUpdate(ctx, c, opts, log)
	if err != nil {
		return err
	}
	return u.finish()
}

// ldcacheUpdate is an UpdateLDCache begun before the libraries are in
// place: the checks made and the sandbox process starting (it waits), so
// that its start overlaps the lend. skip, when set, is why nothing is to
// be done, logged by finish.
type ldcacheUpdate struct {
	c       *Container
	folders []string
	log     *logrus.Entry
	skip    func()
	sandbox *ldsandbox.Sandbox
	mountNS *os.File
	running *ldsandbox.Running
}

func startLDCacheUpdate(ctx context.Context, c *Container, opts LDCacheOptions, log *logrus.Entry) (*ldcacheUpdate, error) {
	folders, err := cleanFolders(opts.Folders)
	if err != nil {
		return nil, err
	}
	u := &ldcacheUpdate{c: c, folders: folders, log: log}
	if len(folders) == 0 {
		u.skip = func() { log.Debug("no --folder given: nothing to add to the linker cache") }
		return u, nil
	}
	if c.ReadOnly() {
		u.skip = func() {
			log.Warnf("container root is read-only (config.json root.readonly): linker cache not updated; libraries in %s are found only if the image's cache already lists them", strings.Join(folders, ", "))
		}
		return u, nil
	}
	if u.mountNS, err = c.MountNS(); err != nil {
		return nil, err
	}
	u.sandbox, err = ldsandbox.New(ldsandbox.Options{
		Root: c.Path(), Folders: folders, Ldconfig: opts.Ldconfig, Timeout: opts.Timeout,
		MountNS: u.mountNS, Owner: c.Root.owner,
	})
	if err == nil {
		u.running, err = u.sandbox.Start(ctx)
	}
	if err != nil {
		u.release()
		return nil, err
	}
	return u, nil
}

// finish writes LDConfPath, lets the sandbox run ldconfig and reports.
// /etc is looked for only now: the lend makes it for the providers'
// /etc/libibverbs.d in an image that had none.
func (u *ldcacheUpdate) finish() error {
	if u.skip != nil {
		u.skip()
		return nil
	}
	if ok, err := u.c.Exists("/etc"); err != nil || !ok {
		u.abort()
		if err == nil {
			u.log.Warn("image has no /etc (no glibc linker cache to update); skipped")
		}
		return err
	}
	defer u.release()
	conf := "# Written by rdma-cdi update-ldcache: RDMA libraries injected by CDI\n" + strings.Join(u.folders, "\n") + "\n"
	if err := u.c.WriteFile(LDConfPath, []byte(conf), 0o644); err != nil {
		u.running.Abort()
		if errors.Is(err, ErrReadOnly) {
			u.log.Warnf("%v; linker cache not updated", err)
			return nil
		}
		return err
	}
	msg, err := u.running.Proceed()
	if err != nil {
		if strings.Contains(msg, "Read-only file system") {
			u.log.Warnf("read-only file system; linker cache not updated: %s", msg)
			return nil
		}
		// An /etc the image's own root may not write: ldconfig has no
		// capability to write it anyway (pkg/ldsandbox), and the image
		// meant it so.
		if strings.Contains(msg, "Can't create temporary cache file") && strings.Contains(msg, "Permission denied") {
			u.log.Warnf("the image's /etc is not writable by its root; linker cache not updated: %s", msg)
			return nil
		}
		return err
	}
	if msg != "" {
		u.log.Debugf("ldconfig: %s", msg)
	}
	u.log.Infof("linker cache of %s lists %s", u.c.Path(), strings.Join(u.folders, ", "))
	return nil
}

// abort ends an update whose libraries were not put in place.
func (u *ldcacheUpdate) abort() {
	if u.running != nil {
		u.running.Abort()
	}
	u.release()
}

func (u *ldcacheUpdate) release() {
	if u.sandbox != nil {
		u.sandbox.Close()
	}
	if u.mountNS != nil {
		u.mountNS.Close()
	}
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
