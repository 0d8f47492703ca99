package ldsandbox

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ldconfig needs no capability. It runs as the owner of the container
// root's files: uid 0 when the container shares the host's ids (the
// image's /etc and library directories are root's, 0755), the host uid the
// container's root maps to otherwise (Owner, which owns them there). Owner
// permissions let it create /etc/ld.so.cache~, rename it over the cache and
// make soname links; the sandbox tests and the hostile-image e2e tests run
// it so with every capability set empty. Capabilities are per thread, so
// these act on the thread that executes ldconfig.

// dropBoundingAndAmbient empties the thread's bounding set, which bounds
// what an execve can give back to uid 0, and its ambient set. Each drop
// needs CAP_SETPCAP, so this comes before any change of ids.
func dropBoundingAndAmbient() error {
	for c := 0; c < 64; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if err == unix.EINVAL {
			break // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
		}
	}
	// EINVAL: a kernel before 4.3, which has no ambient set.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clearing the ambient capabilities: %w", err)
	}
	return nil
}

// clearCapabilities empties the thread's effective, permitted and
// inheritable sets, after the ids changed (setresuid needs CAP_SETUID).
// With the bounding and ambient sets empty and no_new_privs, the execve of
// ldconfig gives none back, as uid 0 or any other.
func clearCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("clearing the capabilities: %w", err)
	}
	return nil
}
