package hooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/hookevents"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// StateHook is one run of a hook that gets the OCI state on stdin.
type StateHook struct {
	Name     apis.HookName
	Settings Settings
	// ConfigWarnings are the config's keys this binary does not know,
	// logged once the hook's log is set up.
	ConfigWarnings []string
	LogLevel       logrus.Level
	Stdin          io.Reader
	Stderr         io.Writer
}

// Run loads the container of the state on stdin (refusing a state that
// points elsewhere), logs to stderr and the host log file, and runs step.
func (h StateHook) Run(ctx context.Context, step Step) error {
	// Engines show one line of what runc prints: podman the first, others
	// the last, and a successful hook's stderr lands there too, in front of
	// a later runc error. So what the hook logs goes to stderr only when it
	// fails, after the error (which main prints again last); the log file
	// always has it.
	var stderr bytes.Buffer
	log, closer := NewLogger(string(h.Name), &stderr, h.Settings.Config.Hooks.LogFile, h.LogLevel)
	defer closer.Close()
	began := time.Now()
	err := h.run(ctx, log, step)
	logTook(log, began, "done")
	if err != nil {
		fmt.Fprintf(h.Stderr, "rdma-cdi hook %s: %v\n", h.Name, err)
		_, _ = h.Stderr.Write(stderr.Bytes())
	}
	return err
}

// run runs step for the container of the state on stdin, then reports the
// outcome to the agent (hookevents: never waited on).
func (h StateHook) run(ctx context.Context, log *logrus.Entry, step Step) error {
	for _, w := range h.ConfigWarnings {
		log.Warn(w)
	}
	s := h.Settings
	sock := s.Config.Metrics.HookSocket
	report := hookevents.Outcome{Hook: string(h.Name), ContainerID: "unknown"} // until the container loads
	loaded := false
	// Every container these hooks run for got our CDI devices.
	err := config.BlocksRDMA(s.ConfigErr)
	if err != nil {
		log.Error(err)
	} else {
		err = Run(log, h.Stdin, func(c *Container, log *logrus.Entry) error {
			loaded = true
			if sock != "" {
				defer func() { report = c.Outcome(string(h.Name), sysfs.Root(s.Roots.Sysfs)) }()
			}
			return step(ctx, c, log)
		})
	}
	if sock == "" {
		return err
	}
	if err != nil {
		report.FailedStep, report.Reason = failedStep(err, h.Name, loaded), hookevents.Reason(err)
	}
	if sendErr := hookevents.Send(sock, report); sendErr != nil {
		log.Debugf("outcome not reported to the agent (%v)", sendErr)
	}
	return err
}

// failedStep names the step err came from: a steps hook's failing step, a
// one-step hook's own name, or, before the container was loaded, the load.
func failedStep(err error, hook apis.HookName, loaded bool) string {
	var se *stepError
	switch {
	case errors.As(err, &se):
		return string(se.step)
	case loaded:
		return string(hook)
	}
	return hookevents.StepLoad
}
