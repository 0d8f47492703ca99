package hooks

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"
)

// NewLogger returns a logger for hook name that writes to stderr (which
// engines show when a hook fails) and appends to logFile on the host, whose
// directory is created 0755 and the file 0640. A log file that cannot be
// opened is reported on stderr and skipped: logging never blocks a
// container. The closer closes the file.
func NewLogger(name string, stderr io.Writer, logFile string, level logrus.Level) (*logrus.Entry, io.Closer) {
	log := logrus.New()
	log.SetLevel(level)
	log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, DisableColors: true})
	log.SetOutput(stderr)
	var closer io.Closer = nopCloser{}
	if logFile != "" {
		f, err := openLogFile(logFile)
		if err != nil {
			log.WithField("hook", name).Warnf("hook log file: %v; logging to stderr only", err)
		} else {
			log.SetOutput(io.MultiWriter(stderr, f))
			closer = f
		}
	}
	return log.WithField("hook", name), closer
}

func openLogFile(path string) (*os.File, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%q is not an absolute path", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }
