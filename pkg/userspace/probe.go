package userspace

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"runtime"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/hostlibs"
	"github.com/rdma-cdi/rdma-cdi/pkg/hostlibs/ldcache"
)

// ImageFS reads a container root. Every path is resolved inside the root
// (symlinks included, as the image's own linker would follow them), so a
// hostile image can point nothing at the host.
type ImageFS interface {
	// ReadFile reads the first max bytes (or fewer) of the regular file p
	// leads to; a missing one is an error matching fs.ErrNotExist.
	ReadFile(p string, max int64) ([]byte, error)
	// ReadDir lists the entry names of the directory p leads to.
	ReadDir(p string) ([]string, error)
}

// Bounds on what is read of an image, which may be hostile: a real
// libibverbs is ~100 KiB, its private ABI's name near the start, and a real
// ld.so.cache well under a MiB. Each candidate costs one ELF header read;
// only the one found is read further. A cache (or LD_LIBRARY_PATH) that
// names one path a million times is one candidate, and no more than
// maxCandidates are looked at.
const (
	elfHeaderLen   = 64
	maxLibraryRead = 4 << 20
	maxCacheRead   = ldcache.MaxFileSize
	maxCandidates  = 32
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
		head, err := img.ReadFile(c.path, elfHeaderLen)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			s.Unreadable = append(s.Unreadable, err.Error())
			continue
		}
		if why := notNativeELF(head); why != "" {
			if len(head) > 0 {
				s.Unreadable = append(s.Unreadable, c.path+" "+why)
			}
			continue
		}
		s.Libibverbs, s.FoundBy = c.path, c.by
		if data, err := img.ReadFile(c.path, maxLibraryRead); err == nil {
			s.PABI, _ = hostlibs.ProviderABI(data)
		}
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

// notNativeELF says why an ELF header is not a library this machine's
// linker loads ("" when it is one): an i686 libibverbs in a multilib
// image is no stack for its x86_64 programs.
func notNativeELF(head []byte) string {
	const eiClass, eMachine = 4, 18
	if len(head) < eMachine+2 || !bytes.HasPrefix(head, []byte(elf.ELFMAG)) {
		return "is not an ELF file"
	}
	native, ok := nativeMachine[runtime.GOARCH]
	if !ok {
		return ""
	}
	if elf.Class(head[eiClass]) != elf.ELFCLASS64 || elf.Machine(binary.LittleEndian.Uint16(head[eMachine:])) != native {
		return "is an ELF file of another architecture"
	}
	return ""
}

// nativeMachine is the ELF machine of each 64-bit little-endian GOARCH.
var nativeMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "ppc64le": elf.EM_PPC64}

type candidate struct{ path, by string }

// candidates are the paths the image's linker would try, in its order,
// each once, at most maxCandidates.
func candidates(img ImageFS, env []string, s *ImageStack) []candidate {
	var out []candidate
	seen := map[string]bool{}
	add := func(p, by string) {
		if !seen[p] && len(out) < maxCandidates {
			seen[p] = true
			out = append(out, candidate{p, by})
		}
	}
	for _, dir := range ldLibraryPath(env) {
		add(path.Join(dir, hostlibs.SonameLibibverbs), "LD_LIBRARY_PATH")
	}
	cached, err := cachedPaths(img, func(name string) bool { return name == hostlibs.SonameLibibverbs })
	if err != nil {
		s.Unreadable = append(s.Unreadable, err.Error())
	}
	for _, p := range cached {
		add(p, "the image's /etc/ld.so.cache")
	}
	for _, dir := range hostlibs.StandardDirs() {
		add(path.Join(dir, hostlibs.SonameLibibverbs), "a standard library directory")
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

// cachedPaths are the image's ld.so.cache entries of this architecture
// whose name matches, in cache order.
func cachedPaths(img ImageFS, match func(name string) bool) ([]string, error) {
	data, err := img.ReadFile("/etc/ld.so.cache", maxCacheRead+1)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(data) > maxCacheRead {
		return nil, fmt.Errorf("the image's /etc/ld.so.cache is larger than %d bytes", maxCacheRead)
	}
	entries, err := ldcache.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("the image's /etc/ld.so.cache: %w", err)
	}
	native, known := ldcache.NativeFlags()
	var out []string
	for _, e := range entries {
		if match(e.Name) && path.IsAbs(e.Path) && (!known || e.Flags == native) {
			out = append(out, path.Clean(e.Path))
		}
	}
	return out, nil
}
