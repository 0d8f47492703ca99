package ldsandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Bounds on one walk of an image's linker config, that is on one
// container's start. Real images read a dozen small files and list one
// directory (ld.so.conf.d) of a few dozen entries; a hostile one must not
// keep the walk, which runs as root and is charged to the runtime's cgroup,
// not the pod's, busy for long or growing without end.
const (
	// maxConfSize bounds one linker config file; real ones are a few lines.
	maxConfSize = 1 << 20
	// maxConfTotal bounds the bytes read from all of them together: a
	// chain of files each just under maxConfSize would otherwise be read,
	// and held while the files it includes are walked, 512 times over.
	maxConfTotal = 4 << 20
	// maxIncludes bounds the include matches walked, whatever each one is:
	// a file, a directory, a name that leads nowhere or cannot be opened.
	// A file that includes the next one twice, 30 deep, is 2^30 opens for
	// ldconfig without any loop.
	maxIncludes = 512
	// maxGlobSteps bounds the expansion of all include patterns together:
	// each pattern level, each directory listed and each entry it lists is
	// a step, matching or not. /d/*/*/*/*/*/* over /d/0../d/49, all links
	// back to /d, is 50^6 names for filepath.Glob.
	maxGlobSteps = 1 << 14
	// maxPatternLen and maxPatternComponent bound one include pattern, so
	// that matching it against a name stays cheap: no path longer than
	// PATH_MAX opens, and no name is longer than NAME_MAX.
	maxPatternLen       = unix.PathMax
	maxPatternComponent = 255
)

// checkConfGraph walks the linker config name, a path in the directory
// root (the sandbox's "/" after pivot_root), through its include lines as
// ldconfig will, and refuses what would keep ldconfig or the walk itself
// busy: a FIFO, socket or device anywhere in the graph, a file over
// maxConfSize, an include loop, or any other bound above reached. Missing
// or unreadable files are left to ldconfig, which skips them with a
// warning. Every path resolves in root (openat2 RESOLVE_IN_ROOT, no magic
// links): an absolute link or ".." stays in it.
func checkConfGraph(root, name string) error {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("linker config: container root %s: %w", root, err)
	}
	defer unix.Close(fd)
	w := confWalk{root: fd, onPath: map[[2]uint64]bool{}}
	var st, self unix.Stat_t
	w.isProcessRoot = unix.Fstat(fd, &st) == nil && unix.Stat("/", &self) == nil && st.Dev == self.Dev && st.Ino == self.Ino
	return w.walk(name, "", "")
}

type confWalk struct {
	root          int                // O_PATH descriptor of the container root
	isProcessRoot bool               // root is this process's "/" (the sandbox after pivot_root)
	onPath        map[[2]uint64]bool // files on the include chain being read
	includes      int                // includes walked, of any kind
	bytes         int                // bytes read from all files
	steps         int                // glob steps taken
}

// walk reads name, which from's include pattern matched (the first file:
// from and pattern empty), and what it includes.
func (w *confWalk) walk(name, from, pattern string) error {
	if w.includes++; w.includes > maxIncludes {
		return fmt.Errorf("linker config %s: include %q: more than %d includes (files, directories and names that lead nowhere alike); fix the image", from, pattern, maxIncludes)
	}
	data, id, err := w.read(name)
	if errors.Is(err, errSkip) {
		return nil
	}
	if err == nil && w.onPath[id] {
		err = fmt.Errorf("linker config %s includes itself: an include loop; fix the image", name)
	}
	if err != nil {
		if from != "" {
			err = fmt.Errorf("%w (included from %s)", err, from)
		}
		return err
	}
	w.onPath[id] = true
	defer delete(w.onPath, id)
	for p := range includes(string(data)) {
		full := p
		if !filepath.IsAbs(full) {
			full = filepath.Join(filepath.Dir(name), full)
		}
		err := w.glob(name, p, full, func(m string) error { return w.walk(m, name, p) })
		if err != nil {
			return err
		}
	}
	return nil
}

// glob calls fn with each name that pattern matches in the root, in the
// order filepath.Glob lists them, and returns fn's first error; pattern is
// the include pattern raw of file, made absolute, and errors name those
// two. It differs from filepath.Glob in three ways: names resolve in the
// root; a pattern without metacharacters is passed on whether or not it
// exists, for walk to count; and its work is bounded by maxGlobSteps,
// shared by every pattern of the walk, with matches handed on as they are
// found instead of collected. A malformed pattern matches nothing, as in
// ldconfig.
func (w *confWalk) glob(file, raw, pattern string, fn func(string) error) error {
	if len(pattern) > maxPatternLen || longComponent(pattern) {
		return fmt.Errorf("linker config %s: include %q: a pattern over %d bytes, or with a component over %d; fix the image", file, raw, maxPatternLen, maxPatternComponent)
	}
	if _, err := filepath.Match(pattern, ""); err != nil {
		return w.spend(1, file, raw) // it matches nothing, but was read
	}
	return w.expand(file, raw, pattern, fn)
}

func longComponent(pattern string) bool {
	for c := range strings.SplitSeq(pattern, "/") {
		if len(c) > maxPatternComponent {
			return true
		}
	}
	return false
}

// expand is filepath.Glob's recursion: the pattern's directory part is
// expanded first, and its last component matched in each directory found.
func (w *confWalk) expand(file, raw, pattern string, fn func(string) error) error {
	if err := w.spend(1, file, raw); err != nil {
		return err
	}
	if !hasMeta(pattern) {
		return fn(pattern)
	}
	dir, base := filepath.Split(pattern)
	if dir != "/" {
		dir = strings.TrimSuffix(dir, "/")
	}
	if !hasMeta(dir) {
		return w.matchIn(file, raw, dir, base, fn)
	}
	if dir == pattern {
		return nil // as filepath.Glob: no recursion on itself
	}
	return w.expand(file, raw, dir, func(d string) error { return w.matchIn(file, raw, d, base, fn) })
}

// matchIn calls fn with each name in dir that base matches, sorted. A dir
// that is missing, not a directory or unreadable has none.
func (w *confWalk) matchIn(file, raw, dir, base string, fn func(string) error) error {
	f, err := w.open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil
	}
	var names []string
	for {
		chunk, err := f.Readdirnames(256)
		names = append(names, chunk...)
		if serr := w.spend(len(chunk), file, raw); serr != nil {
			f.Close()
			return serr
		}
		if err != nil {
			break // io.EOF, or an I/O error: what was read is what ldconfig's glob would list at most
		}
	}
	f.Close()
	slices.Sort(names)
	for _, n := range names {
		if ok, _ := filepath.Match(base, n); ok {
			if err := fn(filepath.Join(dir, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *confWalk) spend(n int, file, raw string) error {
	if w.steps += n; w.steps > maxGlobSteps {
		return fmt.Errorf("linker config %s: include %q: expanding the include patterns examined more than %d directory entries; fix the image", file, raw, maxGlobSteps)
	}
	return nil
}

func hasMeta(pattern string) bool { return strings.ContainsAny(pattern, `*?[\`) }

// open opens name in the root, resolved as if the root were "/", never
// through a magic link, and never blocking on a FIFO.
func (w *confWalk) open(name string, flags int) (*os.File, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	}
	for try := 0; ; try++ {
		fd, err := unix.Openat2(w.root, name, &how)
		switch {
		case err == nil:
			return os.NewFile(uintptr(fd), name), nil
		case (err == unix.EAGAIN || err == unix.EINTR) && try < 8:
			continue // a rename or mount raced the lookup
		case err == unix.ENOSYS && w.isProcessRoot:
			// Before Linux 5.6. The sandbox has pivoted into the root and
			// masked its proc and sysfs: the process's own lookup stays in
			// it too.
			fd, err = unix.Open(name, flags|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, err
			}
			return os.NewFile(uintptr(fd), name), nil
		}
		return nil, err
	}
}

// errSkip marks a config file ldconfig itself will skip with a warning.
var errSkip = errors.New("skipped")

// read reads one config file without blocking on a FIFO and without
// reading past maxConfSize or the walk's maxConfTotal; id is its device
// and inode.
func (w *confWalk) read(name string) (data []byte, id [2]uint64, err error) {
	f, err := w.open(name, unix.O_RDONLY)
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
	room := min(maxConfSize, maxConfTotal-w.bytes)
	data, err = io.ReadAll(io.LimitReader(f, int64(room)+1))
	w.bytes += len(data)
	switch {
	case err != nil:
		return nil, id, fmt.Errorf("linker config %s: %w", name, err)
	case len(data) > maxConfSize:
		return nil, id, fmt.Errorf("linker config %s is over %d bytes; fix the image", name, maxConfSize)
	case len(data) > room:
		return nil, id, fmt.Errorf("linker config %s: the included files are over %d bytes in all; fix the image", name, maxConfTotal)
	}
	return data, id, nil
}

// includes yields the patterns of the "include" lines, parsed as ldconfig
// does: "#" starts a comment, the keyword is followed by blanks, and one
// line may name several patterns.
func includes(conf string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for line := range strings.SplitSeq(conf, "\n") {
			line, _, _ = strings.Cut(line, "#")
			line = strings.TrimLeft(line, " \t")
			rest, ok := strings.CutPrefix(line, "include")
			if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
				continue
			}
			for p := range strings.FieldsSeq(rest) {
				if !yield(p) {
					return
				}
			}
		}
	}
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
