package hooks

import (
	"time"

	"github.com/sirupsen/logrus"
)

// TookField is the log field, in milliseconds, of how long a part of a
// hook took: the load of the container, each step, the lend and the
// linker cache update within user-space, and the whole hook. They are
// logged at debug level (--log-level=debug), one line each, so that a
// container start's cost can be split (bench/podman.sh's breakdown)
// without a profiler on the node.
const TookField = "took_ms"

// logTook logs, at debug level, that what took since began.
func logTook(log *logrus.Entry, began time.Time, what string) {
	if !log.Logger.IsLevelEnabled(logrus.DebugLevel) {
		return
	}
	ms := float64(time.Since(began).Microseconds()) / 1000
	log.WithField(TookField, ms).Debug(what)
}
