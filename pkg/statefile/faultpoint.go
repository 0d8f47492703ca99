package statefile

import (
	"os"
	"path/filepath"
	"syscall"

	"github.com/rdma-cdi/rdma-cdi/pkg/specio"
)

// FaultPoint names a place around a state file's save where a fault test
// of a real deployment has the process die: the owner of the file defines
// its points as constants (dradriver.PrepareBeforeCheckpoint, ...).
type FaultPoint string

// CrashOnce ends the process when the environment variable env names
// point and point's marker in dir does not exist yet: at once, with
// SIGKILL's exit status and no cleanup (no deferred call, no socket
// removed). The marker (dir/.crashed-<point>) keeps it to once, so the
// restarted process goes on. Not a SIGKILL to itself: an agent that is
// its container's PID 1 would not die of it, as the kernel drops a fatal
// signal the namespace's init sends itself.
func CrashOnce(env, dir string, point FaultPoint) {
	if point == "" || os.Getenv(env) != string(point) {
		return
	}
	marker := filepath.Join(dir, ".crashed-"+string(point))
	if _, err := os.Lstat(marker); err == nil {
		return
	}
	if err := specio.WriteAtomic(marker, nil, 0o600); err != nil {
		return
	}
	os.Exit(128 + int(syscall.SIGKILL))
}
