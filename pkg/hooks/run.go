package hooks

import (
	"io"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/hookevents"
)

// Run is the frame of every hook: it reads the state from stdin, loads the
// container and calls fn. Every failure is logged (stderr and the log
// file) with the container id when known, and returned so the hook exits
// non-zero.
func Run(log *logrus.Entry, stdin io.Reader, fn func(*Container, *logrus.Entry) error) error {
	began := time.Now()
	st, err := ReadState(stdin)
	if err != nil {
		log.Error(err)
		return hookevents.Invalid(err)
	}
	log = log.WithField("container", st.ID)
	c, err := Load(st)
	if err != nil {
		log.Error(err)
		return err
	}
	defer c.Close()
	log.Debugf("state pid %d is container %s (pid %d in /proc), root %s", st.Pid, st.ID, c.ProcPid, c.Path())
	c.Root.log = log
	logTook(log, began, "loaded")
	if err := fn(c, log); err != nil {
		log.Error(err)
		return err
	}
	return nil
}
