// Package rlimit decides which RLIMIT_MEMLOCK a container can be given
// from where rdma-cdi runs: an OCI config that names a limit the runtime
// cannot set fails the container's start ("error setting rlimit type 8").
package rlimit

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ApplicableMemlock returns the RLIMIT_MEMLOCK that a runtime started by
// this process (the precreate hook's engine, or the runtime the wrapper
// execs, which inherit this process's limits) can set: want itself, or
// this process's hard limit when want is above it and the hard limit may
// not be raised here (no CAP_SYS_RESOURCE in the initial user namespace).
// That is the memlock hook's fallback: the soft limit raised to the hard
// one. why explains a lowered value; it is "" otherwise.
func ApplicableMemlock(want uint64) (limit uint64, why string) {
	var cur unix.Rlimit
	if err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, nil, &cur); err != nil || want <= cur.Max {
		return want, ""
	}
	// Try the raise on this process, then put the limit back: only doing
	// it tells whether the kernel allows it here.
	raised := unix.Rlimit{Cur: cur.Cur, Max: want}
	err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &raised, nil)
	if err == nil {
		_ = unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &cur, nil)
		return want, ""
	}
	return cur.Max, fmt.Sprintf("RLIMIT_MEMLOCK %s cannot be set here: the hard limit is %s and raising it is not permitted (%v; it needs CAP_SYS_RESOURCE); the container gets %s as its soft and hard limit",
		String(want), String(cur.Max), err, String(cur.Max))
}

// String writes a limit as prlimit does: "unlimited" or bytes.
func String(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return fmt.Sprintf("%d", v)
}
