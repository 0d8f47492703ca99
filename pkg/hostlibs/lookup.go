package hostlibs

import (
	"errors"
	"os"
	"path"
	"runtime"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/hostlibs/ldcache"
)

// multiarchTriplets name the Debian-style library directories per GOARCH.
var multiarchTriplets = map[string]string{
	"amd64":   "x86_64-linux-gnu",
	"arm64":   "aarch64-linux-gnu",
	"ppc64le": "powerpc64le-linux-gnu",
	"s390x":   "s390x-linux-gnu",
}

// standardDirs are searched when the cache lacks a library, as the dynamic
// linker falls back to its trusted directories.
func standardDirs(goarch string) []string {
	var dirs []string
	if triplet, ok := multiarchTriplets[goarch]; ok {
		dirs = append(dirs, "/lib/"+triplet, "/usr/lib/"+triplet)
	}
	return append(dirs, "/lib64", "/usr/lib64", "/usr/lib", "/lib")
}

// libFinder locates libraries by soname on the host.
type libFinder struct {
	fs *hostFS
	// cached lists, per soname, the paths the host's ld.so.cache gives for
	// the running architecture, in cache order (the linker's preference).
	cached map[string][]string
	dirs   []string
}

func newLibFinder(fs *hostFS) *libFinder {
	return &libFinder{fs: fs, cached: loadCache(fs), dirs: standardDirs(runtime.GOARCH)}
}

// wantedSonames are the only cache entries kept.
func wantedSonames() map[string]bool {
	wanted := map[string]bool{SonameLibibverbs: true}
	for _, lib := range companionLibs {
		wanted[lib.soname] = true
	}
	for _, provider := range providersWithLibs {
		wanted[providerSoname(provider)] = true
	}
	return wanted
}

// loadCache reads the host's ld.so.cache, keeping the baseline (no hwcaps)
// entries of our architecture for the sonames we look for. A missing cache
// is normal (lookups fall back to the standard dirs); a broken one is
// logged and treated as missing.
func loadCache(fs *hostFS) map[string][]string {
	chain, err := fs.resolveChain(path.Join(fs.canonicalDir(path.Dir(ldCachePath)), path.Base(ldCachePath)))
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			logrus.Warnf("hostlibs: ignoring the host's ld.so.cache: %v", err)
		}
		return nil
	}
	entries, err := ldcache.ReadFile(fs.hostPath(chain[len(chain)-1].path))
	if err != nil {
		logrus.Warnf("hostlibs: ignoring the host's ld.so.cache: %v", err)
		return nil
	}
	native, archKnown := ldcache.NativeFlags()
	wanted := wantedSonames()
	cached := map[string][]string{}
	for _, e := range entries {
		if !wanted[e.Name] || e.HWCap != 0 || (archKnown && e.Flags != native) || !path.IsAbs(e.Path) {
			continue
		}
		cached[e.Name] = append(cached[e.Name], e.Path)
	}
	return cached
}

// find returns the host path of soname, its directory made canonical: the
// first cache entry that exists, else the first standard dir holding it.
func (f *libFinder) find(soname string) (string, bool) {
	for _, p := range f.cached[soname] {
		if c, ok := f.existing(path.Dir(p), path.Base(p)); ok {
			return c, true
		}
	}
	for _, dir := range f.dirs {
		if c, ok := f.existing(dir, soname); ok {
			return c, true
		}
	}
	return "", false
}

func (f *libFinder) existing(dir, name string) (string, bool) {
	p := path.Join(f.fs.canonicalDir(dir), name)
	_, err := os.Lstat(f.fs.hostPath(p))
	return p, err == nil
}
