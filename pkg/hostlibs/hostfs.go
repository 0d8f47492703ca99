package hostlibs

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// maxLinks bounds a symlink chain, as the kernel's ELOOP limit does.
const maxLinks = 40

// hostFS reads the host's files under its root. Paths given to and returned
// by its methods are host paths (absolute, without the root).
type hostFS struct {
	root string
	// dirs memoizes canonicalDir: the same few directories come up for
	// every library.
	dirs map[string]string
}

func newHostFS(root string) *hostFS {
	return &hostFS{root: root, dirs: map[string]string{}}
}

// hostPath is where host path p lies on this machine.
func (fs *hostFS) hostPath(p string) string {
	if fs.root == "/" {
		return p
	}
	return fs.root + p
}

// rel turns a path on this machine back into a host path.
func (fs *hostFS) rel(onMachine string) string {
	if fs.root == "/" {
		return onMachine
	}
	return "/" + strings.TrimLeft(strings.TrimPrefix(onMachine, fs.root), "/")
}

// canonicalDir resolves the symlinks in directory dir inside the root, so
// that /lib/x86_64-linux-gnu on a merged-/usr host becomes
// /usr/lib/x86_64-linux-gnu, and a directory link can never lead out of the
// root (securejoin clamps it there).
func (fs *hostFS) canonicalDir(dir string) string {
	dir = path.Clean(dir)
	if c, ok := fs.dirs[dir]; ok {
		return c
	}
	c := dir
	if joined, err := securejoin.SecureJoin(fs.root, dir); err == nil {
		c = fs.rel(joined)
	}
	fs.dirs[dir] = c
	return c
}

// exists reports whether host path p exists (a dangling link counts).
func (fs *hostFS) exists(p string) bool {
	p = path.Join(fs.canonicalDir(path.Dir(p)), path.Base(p))
	_, err := os.Lstat(fs.hostPath(p))
	return err == nil
}

// readDir returns the sorted names in host directory dir.
func (fs *hostFS) readDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(fs.hostPath(dir))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names, nil
}

// chainLink is one file of a symlink chain; target is "" for the regular
// file that ends it.
type chainLink struct {
	path, target string
}

// resolveChain follows host path p, whose directory must be canonical,
// through its symlinks to a regular file, inside the root. It returns every
// file on the way, p first. A dangling link, a link leading out of the root,
// a loop, or an end that is not a regular file is an error naming the link.
func (fs *hostFS) resolveChain(p string) ([]chainLink, error) {
	var chain []chainLink
	for cur := p; ; {
		if len(chain) > maxLinks {
			return nil, fmt.Errorf("%s: more than %d levels of symbolic links", p, maxLinks)
		}
		info, err := os.Lstat(fs.hostPath(cur))
		if err != nil {
			if len(chain) == 0 {
				return nil, fmt.Errorf("%s: %w", cur, err)
			}
			last := chain[len(chain)-1]
			return nil, fmt.Errorf("dangling symlink %s -> %s", last.path, last.target)
		}
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(fs.hostPath(cur))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", cur, err)
			}
			next, ok := followLink(path.Dir(cur), target)
			if !ok {
				return nil, fmt.Errorf("symlink %s -> %s points outside the host root", cur, target)
			}
			chain = append(chain, chainLink{path: cur, target: target})
			cur = path.Join(fs.canonicalDir(path.Dir(next)), path.Base(next))
		case info.Mode().IsRegular():
			return append(chain, chainLink{path: cur}), nil
		default:
			return nil, fmt.Errorf("%s is not a regular file (%s)", cur, info.Mode().Type())
		}
	}
}

// followLink returns the host path a link in canonical directory dir points
// to. Absolute targets are host paths, so they stay in the root; relative
// ones must not climb above it with "..".
func followLink(dir, target string) (string, bool) {
	if path.IsAbs(target) {
		return path.Clean(target), true
	}
	depth := strings.Count(strings.Trim(dir, "/"), "/") + 1
	if dir == "/" {
		depth = 0
	}
	for _, part := range strings.Split(target, "/") {
		switch part {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return "", false
			}
		default:
			depth++
		}
	}
	return path.Join(dir, target), true
}
