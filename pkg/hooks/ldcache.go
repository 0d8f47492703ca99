package hooks

import (
	"context"
	"errors"
	"fmt"
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

	mountNS, err := c.MountNS()
	if err != nil {
		return err
	}
	if mountNS != nil {
		defer mountNS.Close()
	}
	sandbox, err := ldsandbox.New(ldsandbox.Options{
		Root: c.Path(), Folders: folders, Ldconfig: opts.Ldconfig, Timeout: opts.Timeout,
		MountNS: mountNS, Owner: c.Root.owner,
	})
	if err != nil {
		return err
	}
	defer sandbox.Close()

	conf := "# Written by rdma-cdi update-ldcache: RDMA libraries injected by CDI\n" + strings.Join(folders, "\n") + "\n"
	if err := c.WriteFile(LDConfPath, []byte(conf), 0o644); err != nil {
		if errors.Is(err, ErrReadOnly) {
			log.Warnf("%v; linker cache not updated", err)
			return nil
		}
		return err
	}

	msg, err := sandbox.Run(ctx)
	if err != nil {
		if strings.Contains(msg, "Read-only file system") {
			log.Warnf("read-only file system; linker cache not updated: %s", msg)
			return nil
		}
		return err
	}
	if msg != "" {
		log.Debugf("ldconfig: %s", msg)
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
