package hostlibs

import "runtime"

// What an image's stack is checked against is the host's own layout rules:
// pkg/userspace reads a container root with them.

// SonameLibibverbs is the soname every RDMA program links.
const SonameLibibverbs = sonameLibibverbs

// ProviderSubdir is the provider directory's name beside libibverbs.so.1,
// and DriverConfigDir the directory of the providers' .driver files.
const (
	ProviderSubdir  = providerSubdir
	DriverConfigDir = driverConfigDir
)

// StandardDirs are the dynamic linker's trusted directories for this
// machine's architecture, searched after its cache.
func StandardDirs() []string { return standardDirs(runtime.GOARCH) }

// ProviderFile returns NAME and N for a provider file "lib<NAME>-rdmav<N>.so".
func ProviderFile(name string) (provider string, pabi int, ok bool) { return providerFile(name) }

// ProviderABI reads the provider ABI a libibverbs (its bytes) expects.
func ProviderABI(libibverbs []byte) (int, bool) {
	for _, marker := range pabiMarkers {
		if n, ok := findNumberAfter(libibverbs, marker); ok {
			return n, true
		}
	}
	return 0, false
}
