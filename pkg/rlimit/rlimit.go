// Package rlimit decides which RLIMIT_MEMLOCK a container can be given
// from where rdma-cdi runs. The memlock hook raises the limit of the
// container's init; the config editors (precreate, the runtime wrapper)
// write one into config.json, and one the runtime cannot set fails the
// container's start ("error setting rlimit type 8"). Both decide by Raise.
package rlimit

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Raise raises RLIMIT_MEMLOCK of pid (0: this process) to want, never
// lowering either limit. Raising the hard limit needs CAP_SYS_RESOURCE;
// where the kernel refuses it (EPERM), the soft limit is raised to the
// hard one instead and why says why (it is "" otherwise). after is the
// limit pid has when Raise returns.
func Raise(pid int, want uint64) (before, after unix.Rlimit, why string, err error) {
	if err := unix.Prlimit(pid, unix.RLIMIT_MEMLOCK, nil, &before); err != nil {
		return before, before, "", fmt.Errorf("read RLIMIT_MEMLOCK of pid %d: %w", pid, err)
	}
	target := unix.Rlimit{Cur: max(before.Cur, want), Max: max(before.Max, want)}
	if target == before {
		return before, before, "", nil
	}
	err = unix.Prlimit(pid, unix.RLIMIT_MEMLOCK, &target, nil)
	if errors.Is(err, unix.EPERM) && target.Max > before.Max {
		// No errno text: podman shows, of a failing hook's stderr, the first
		// line that says "operation not permitted", and this line is only a
		// warning logged beside the hook's real error.
		why = fmt.Sprintf("the RLIMIT_MEMLOCK hard limit %s may not be raised to %s here (EPERM: raising a hard limit needs CAP_SYS_RESOURCE)",
			String(before.Max), String(want))
		target, err = unix.Rlimit{Cur: max(before.Cur, min(want, before.Max)), Max: before.Max}, nil
		if target != before {
			err = unix.Prlimit(pid, unix.RLIMIT_MEMLOCK, &target, nil)
		}
	}
	if err != nil {
		return before, before, why, fmt.Errorf("set RLIMIT_MEMLOCK of pid %d to %s: %w", pid, Format(target), err)
	}
	return before, target, why, nil
}

// ApplicableMemlock returns the RLIMIT_MEMLOCK that a runtime started by
// this process (the precreate hook's engine, or the runtime the wrapper
// execs, which inherit this process's limits) can set, as soft and hard
// limit: want itself, or this process's hard limit when want is above it
// and Raise finds that the hard limit may not be raised here. Only trying
// tells, so Raise runs on this process and the limit is put back. why
// explains a lowered value; it is "" otherwise.
func ApplicableMemlock(want uint64) (limit uint64, why string) {
	before, after, why, err := Raise(0, want)
	if err != nil {
		return want, "" // unknown: the runtime will say
	}
	if after != before {
		_ = unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &before, nil) // lowering is always allowed
	}
	if after.Max >= want {
		return want, ""
	}
	return after.Max, fmt.Sprintf("%s; the container gets %s as its soft and hard limit", why, String(after.Max))
}

// String writes a limit as prlimit does: "unlimited" or bytes.
func String(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return fmt.Sprintf("%d", v)
}

// Format writes both limits of r.
func Format(r unix.Rlimit) string { return "soft " + String(r.Cur) + ", hard " + String(r.Max) }
