package ldsandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxConfSize bounds one linker config file; real ones are a few lines.
const maxConfSize = 1 << 20

// maxIncludes bounds the files one walk of the include graph reads: a
// file that includes the next one twice, 30 deep, is 2^30 opens for
// ldconfig without any loop. Real images have a dozen.
const maxIncludes = 512

// checkConfGraph walks the image's linker config from name through its
// include lines, as ldconfig will, and refuses what would keep ldconfig
// busy until it is killed: a FIFO, socket or device anywhere in the graph,
// a file over maxConfSize, an include loop, or more than maxIncludes
// files. Missing or unreadable files are left to ldconfig, which skips
// them with a warning.
func checkConfGraph(name string) error {
	w := confWalk{onPath: map[[2]uint64]bool{}}
	return w.walk(name, "")
}

type confWalk struct {
	onPath map[[2]uint64]bool // files on the include chain being read
	read   int
}

func (w *confWalk) walk(name, from string) error {
	data, id, err := readConf(name)
	if errors.Is(err, errSkip) {
		return nil
	}
	if err == nil && w.onPath[id] {
		err = fmt.Errorf("linker config %s includes itself: an include loop; fix the image", name)
	}
	if w.read++; err == nil && w.read > maxIncludes {
		err = fmt.Errorf("linker config %s: more than %d include files; fix the image", name, maxIncludes)
	}
	if err != nil {
		if from != "" {
			err = fmt.Errorf("%w (included from %s)", err, from)
		}
		return err
	}
	w.onPath[id] = true
	defer delete(w.onPath, id)
	for _, pattern := range includes(string(data)) {
		if !filepath.IsAbs(pattern) {
			pattern = filepath.Join(filepath.Dir(name), pattern)
		}
		matches, _ := filepath.Glob(pattern) // a bad pattern matches nothing, as in ldconfig
		for _, m := range matches {
			if err := w.walk(m, name); err != nil {
				return err
			}
		}
	}
	return nil
}

// errSkip marks a config file ldconfig itself will skip with a warning.
var errSkip = errors.New("skipped")

// readConf reads one config file without blocking on a FIFO and without
// reading past maxConfSize; id is its device and inode.
func readConf(name string) (data []byte, id [2]uint64, err error) {
	f, err := os.OpenFile(name, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, id, errSkip
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, id, errSkip
	}
	st := fi.Sys().(*syscall.Stat_t)
	id = [2]uint64{st.Dev, st.Ino}
	if fi.IsDir() {
		return nil, id, errSkip // ldconfig warns that it cannot read it
	}
	if !fi.Mode().IsRegular() {
		return nil, id, fmt.Errorf("linker config %s is a %s, not a file: ldconfig would block or read it without end; fix the image", name, kind(fi.Mode()))
	}
	data, err = io.ReadAll(io.LimitReader(f, maxConfSize+1))
	if err != nil {
		return nil, id, fmt.Errorf("linker config %s: %w", name, err)
	}
	if len(data) > maxConfSize {
		return nil, id, fmt.Errorf("linker config %s is over %d bytes; fix the image", name, maxConfSize)
	}
	return data, id, nil
}

// includes lists the patterns of the "include" lines, parsed as ldconfig
// does: "#" starts a comment, the keyword is followed by blanks, and one
// line may name several patterns.
func includes(conf string) []string {
	var patterns []string
	for _, line := range strings.Split(conf, "\n") {
		line, _, _ = strings.Cut(line, "#")
		line = strings.TrimLeft(line, " \t")
		rest, ok := strings.CutPrefix(line, "include")
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		patterns = append(patterns, strings.Fields(rest)...)
	}
	return patterns
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}
