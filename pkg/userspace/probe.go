package userspace

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/hostlibs"
	"github.com/rdma-cdi/rdma-cdi/pkg/hostlibs/ldcache"
)

// ImageFS reads a container root. Every path is resolved inside the root
// (symlinks included, as the image's own linker would follow them), so a
// hostile image can point nothing at the host.
type ImageFS interface {
	// ReadFile reads the regular file p leads to, at most max bytes; a
	// missing one is an error matching fs.ErrNotExist.
	ReadFile(p string, max int64) ([]byte, error)
	// ReadDir lists the entry names of the directory p leads to.
	ReadDir(p string) ([]string, error)
}

// Bounds on what is read of an image: a real libibverbs is ~100 KiB and a
// real ld.so.cache well under a MiB; larger files are a broken or hostile
// image, which gets "no stack found there" and nothing worse.
const (
	maxLibraryRead = 64 << 20
	maxCacheRead   = ldcache.MaxFileSize
)

// ImageStack is what a container root carries of the RDMA user space, as
// its own linker would find it.
type ImageStack struct {
	// Libibverbs is where the image's linker loads libibverbs.so.1 from
	// ("" when it finds none), and FoundBy how (LD_LIBRARY_PATH, the
	// image's ld.so.cache, a standard directory).
	Libibverbs string
	FoundBy    string
	// PABI is the provider ABI that libibverbs expects (0 when unknown).
	PABI int
	// ProviderDir holds the providers libibverbs loads; Providers maps each
	// provider name found there to its ABI.
	ProviderDir string
	Providers   map[string]int
	// DriverConfigs are the provider names with a /etc/libibverbs.d entry.
	DriverConfigs map[string]bool
	// Unreadable notes what could not be read (a cache that does not parse,
	// a library that is not ELF); each only narrows the search.
	Unreadable []string
}

// Carries reports whether the image has its own libibverbs.
func (s ImageStack) Carries() bool { return s.Libibverbs != "" }

// Probe looks for libibverbs.so.1 where the image's dynamic linker would,
// in its order: LD_LIBRARY_PATH of the container's process env, the
// image's /etc/ld.so.cache, then the standard directories. A candidate
// counts only if it is a non-empty ELF file: an empty regular file is the
// mount point a lent library left behind in a restarted container, and a
// link to nothing is not a library.
func Probe(img ImageFS, env []string) ImageStack {
	var s ImageStack
	for _, c := range candidates(img, env, &s) {
		data, err := img.ReadFile(c.path, maxLibraryRead)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			s.Unreadable = append(s.Unreadable, err.Error())
			continue
		}
		if !bytes.HasPrefix(data, []byte("\x7fELF")) {
			if len(data) > 0 {
				s.Unreadable = append(s.Unreadable, c.path+" is not an ELF file")
			}
			continue
		}
		s.Libibverbs, s.FoundBy = c.path, c.by
		s.PABI, _ = hostlibs.ProviderABI(data)
		break
	}
	if !s.Carries() {
		return s
	}
	s.ProviderDir = path.Join(path.Dir(s.Libibverbs), hostlibs.ProviderSubdir)
	s.Providers = map[string]int{}
	names, _ := img.ReadDir(s.ProviderDir)
	for _, name := range names {
		if p, pabi, ok := hostlibs.ProviderFile(name); ok {
			s.Providers[p] = pabi
		}
	}
	s.DriverConfigs = map[string]bool{}
	names, _ = img.ReadDir(hostlibs.DriverConfigDir)
	for _, name := range names {
		if p, ok := strings.CutSuffix(name, ".driver"); ok {
			s.DriverConfigs[p] = true
		}
	}
	return s
}

type candidate struct{ path, by string }

func candidates(img ImageFS, env []string, s *ImageStack) []candidate {
	var out []candidate
	for _, dir := range ldLibraryPath(env) {
		out = append(out, candidate{path.Join(dir, hostlibs.SonameLibibverbs), "LD_LIBRARY_PATH"})
	}
	cached, err := cachedPaths(img)
	if err != nil {
		s.Unreadable = append(s.Unreadable, err.Error())
	}
	for _, p := range cached {
		out = append(out, candidate{p, "the image's /etc/ld.so.cache"})
	}
	for _, dir := range hostlibs.StandardDirs() {
		out = append(out, candidate{path.Join(dir, hostlibs.SonameLibibverbs), "a standard library directory"})
	}
	return out
}

// ldLibraryPath is the absolute directories of the process env's
// LD_LIBRARY_PATH (the last assignment, as execve passes it on).
func ldLibraryPath(env []string) []string {
	var value string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_LIBRARY_PATH="); ok {
			value = v
		}
	}
	var dirs []string
	for _, d := range strings.FieldsFunc(value, func(r rune) bool { return r == ':' || r == ';' }) {
		if path.IsAbs(d) {
			dirs = append(dirs, path.Clean(d))
		}
	}
	return dirs
}

// cachedPaths are the image's ld.so.cache entries for libibverbs.so.1 of
// this architecture, in cache order.
func cachedPaths(img ImageFS) ([]string, error) {
	data, err := img.ReadFile("/etc/ld.so.cache", maxCacheRead)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	entries, err := ldcache.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("the image's /etc/ld.so.cache: %w", err)
	}
	native, known := ldcache.NativeFlags()
	var out []string
	for _, e := range entries {
		if e.Name == hostlibs.SonameLibibverbs && path.IsAbs(e.Path) && (!known || e.Flags == native) {
			out = append(out, path.Clean(e.Path))
		}
	}
	return out, nil
}
