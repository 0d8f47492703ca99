// Package stalemount tells when a path the agent reads through a bind mount
// of one host file or directory no longer is the host's.
//
// A DaemonSet mounts single host paths (/dev/infiniband, /etc/ld.so.cache,
// /etc/libibverbs.d) instead of the host's /. Such a mount holds the inode it
// was made from: when the host replaces the file (ldconfig writes a new cache
// and renames it over the old one) or removes and recreates the directory
// (the kernel drops /dev/infiniband when the last HCA driver unloads), the
// agent keeps reading the old, unlinked one and never sees the change. Its
// link count is then 0, which a path on the host itself never shows: stat
// through a path always finds the current file. The agent exits on it, and
// the kubelet's restart mounts the current one.
package stalemount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Stale reports whether path leads to a file or directory that was removed
// from its file system (link count 0); a path that does not exist is not
// stale.
func Stale(path string) (bool, error) {
	info, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return false, fmt.Errorf("%s: no link count", path)
	}
	return st.Nlink == 0, nil
}

// Error names the stale path.
type Error struct{ Path string }

func (e Error) Error() string {
	return fmt.Sprintf("%s was removed or replaced on the host since this agent started (its mount still holds the old one): exiting, so that a restart mounts the current one", e.Path)
}

// Watch checks paths every interval until ctx ends (nil) or one is stale
// (an Error). A path that cannot be checked is skipped: another check
// reports it.
func Watch(ctx context.Context, interval time.Duration, paths ...string) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if p := firstStale(paths); p != "" {
			return Error{Path: p}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func firstStale(paths []string) string {
	for _, p := range paths {
		if stale, err := Stale(p); err == nil && stale {
			return p
		}
	}
	return ""
}
