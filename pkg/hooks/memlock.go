package hooks

import (
	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/rlimit"
)

// Memlock raises RLIMIT_MEMLOCK of the container's init to want
// (config.Unlimited for no limit). It is a createRuntime hook: the runtime
// applies config.json's process.rlimits after it, so a container whose
// config lists RLIMIT_MEMLOCK keeps that value and is left alone here.
//
// Raising the hard limit needs CAP_SYS_RESOURCE. Without it the soft limit
// is raised to the current hard limit instead, and the log says why
// (rlimit.Raise, which the config editors decide by too). A limit is never
// lowered.
func Memlock(c *Container, want uint64, log *logrus.Entry) error {
	if c.Spec.Process != nil {
		for _, rl := range c.Spec.Process.Rlimits {
			if rl.Type == "RLIMIT_MEMLOCK" {
				log.Infof("config.json process.rlimits sets RLIMIT_MEMLOCK (soft %d, hard %d): left to the runtime", rl.Soft, rl.Hard)
				return nil
			}
		}
	}
	before, after, why, err := rlimit.Raise(c.Pid, want)
	if why != "" {
		log.Warnf("pid %d: %s; the soft limit is raised to the hard limit instead", c.Pid, why)
	}
	if err != nil {
		return err
	}
	if after == before {
		log.Debugf("RLIMIT_MEMLOCK of pid %d already %s", c.Pid, rlimit.Format(before))
		return nil
	}
	log.Infof("RLIMIT_MEMLOCK of pid %d: %s -> %s", c.Pid, rlimit.Format(before), rlimit.Format(after))
	return nil
}
