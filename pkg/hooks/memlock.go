package hooks

import (
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/rlimit"
)

// Memlock raises RLIMIT_MEMLOCK of the container's init to want
// (config.Unlimited for no limit). It is a createRuntime hook: the runtime
// applies config.json's process.rlimits after it, so a container whose
// config lists RLIMIT_MEMLOCK keeps that value and is left alone here.
//
// Raising the hard limit needs CAP_SYS_RESOURCE. Without it (EPERM) the
// soft limit is raised to the current hard limit instead, and the log says
// why. A limit is never lowered.
func Memlock(c *Container, want uint64, log *logrus.Entry) error {
	if c.Spec.Process != nil {
		for _, rl := range c.Spec.Process.Rlimits {
			if rl.Type == "RLIMIT_MEMLOCK" {
				log.Infof("config.json process.rlimits sets RLIMIT_MEMLOCK (soft %d, hard %d): left to the runtime", rl.Soft, rl.Hard)
				return nil
			}
		}
	}
	var cur unix.Rlimit
	if err := unix.Prlimit(c.Pid, unix.RLIMIT_MEMLOCK, nil, &cur); err != nil {
		return fmt.Errorf("read RLIMIT_MEMLOCK of pid %d: %w", c.Pid, err)
	}
	target := unix.Rlimit{Cur: max(cur.Cur, want), Max: max(cur.Max, want)}
	if target == cur {
		log.Debugf("RLIMIT_MEMLOCK of pid %d already %s", c.Pid, fmtLimit(cur))
		return nil
	}
	err := unix.Prlimit(c.Pid, unix.RLIMIT_MEMLOCK, &target, nil)
	if errors.Is(err, unix.EPERM) && target.Max > cur.Max {
		soft := unix.Rlimit{Cur: max(cur.Cur, min(want, cur.Max)), Max: cur.Max}
		log.Warnf("cannot raise the RLIMIT_MEMLOCK hard limit of pid %d above %s (%v: the runtime lacks CAP_SYS_RESOURCE); raising the soft limit to the hard limit instead",
			c.Pid, rlimit.String(cur.Max), err)
		if soft == cur {
			return nil
		}
		target, err = soft, unix.Prlimit(c.Pid, unix.RLIMIT_MEMLOCK, &soft, nil)
	}
	if err != nil {
		return fmt.Errorf("set RLIMIT_MEMLOCK of pid %d to %s: %w", c.Pid, fmtLimit(target), err)
	}
	log.Infof("RLIMIT_MEMLOCK of pid %d: %s -> %s", c.Pid, fmtLimit(cur), fmtLimit(target))
	return nil
}

func fmtLimit(r unix.Rlimit) string {
	return "soft " + rlimit.String(r.Cur) + ", hard " + rlimit.String(r.Max)
}
