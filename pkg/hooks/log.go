package hooks

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// NewLogger returns a logger for hook name that writes to stderr (which
// engines show when a hook fails) and appends to logFile on the host, whose
// directory is created 0755 and the file 0640. A log file that cannot be
// opened is reported on stderr, first, and skipped: logging never blocks a
// container. The closer closes the file.
func NewLogger(name string, stderr io.Writer, logFile string, level logrus.Level) (*logrus.Entry, io.Closer) {
	log := logrus.New()
	log.SetLevel(level)
	log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, DisableColors: true})
	log.SetOutput(stderr)
	var closer io.Closer = nopCloser{}
	if logFile != "" {
		f, err := OpenLogFile(logFile)
		if err != nil {
			log.WithField("hook", name).Warnf("hook log file %s not opened (%s); logging to stderr only", logFile, logFileProblem(err))
		} else {
			log.SetOutput(io.MultiWriter(stderr, f))
			closer = f
		}
	}
	return log.WithField("hook", name), closer
}

// MaxLogSize bounds a host log file: every container start appends to it,
// for the node's life. Past it the file becomes path.1 (the previous .1
// dropped) and a new one starts, so the two never hold more than twice it.
// Hooks that rotate at once lose at most the lines one of them wrote to the
// file the other moved.
const MaxLogSize = 16 << 20

// OpenLogFile opens a host log file for appending: an absolute path, its
// directory created 0755, the file 0640, rotated first when it has grown
// past MaxLogSize.
func OpenLogFile(path string) (*os.File, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%q is not an absolute path", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if st, err := os.Lstat(path); err == nil && st.Mode().IsRegular() && st.Size() >= MaxLogSize {
		_ = os.Rename(path, path+".1") // best effort: a failed rotation still logs
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
}

// logFileProblem says why the log file could not be opened by the errno's
// name, not its text: podman shows a failed hook by the first line of its
// stderr that reads "permission denied", "operation not permitted" or "no
// such file or directory" (libpod getOCIRuntimeError), and this side note
// must not be taken for the hook's error. In a user-namespaced container
// the hook is the container's root, an unprivileged uid on the host, which
// the host's log file never admits: that is said too.
func logFileProblem(err error) string {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return err.Error()
	}
	why := unix.ErrnoName(errno)
	if why == "" {
		why = fmt.Sprintf("errno %d", int(errno))
	}
	if hostUID, ok := userNamespaceHostUID(); ok {
		why += fmt.Sprintf(", the hook runs as host uid %d: root of a user-namespaced container", hostUID)
	}
	return why
}

// userNamespaceHostUID is the host uid this process runs as when it is in
// a user namespace other than the host's (whose uid_map is the identity
// map of every uid).
func userNamespaceHostUID() (int, bool) {
	data, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return 0, false
	}
	uid := os.Geteuid()
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var inside, outside, count int
		if n, _ := fmt.Sscan(line, &inside, &outside, &count); n != 3 {
			continue
		}
		if inside == 0 && outside == 0 && count == math.MaxUint32 {
			return 0, false
		}
		if uid >= inside && uid-inside < count {
			return outside + uid - inside, true
		}
	}
	return 0, false
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }
