package hostlibs

import "runtime"

// What an image's stack is checked against is the host's own layout rules
// (these, SonameLibibverbs, ProviderSubdir, DriverConfigDir, ProviderFile):
// pkg/userspace reads a container root with them.

// StandardDirs are the dynamic linker's trusted directories for this
// machine's architecture, searched after its cache.
func StandardDirs() []string { return standardDirs(runtime.GOARCH) }

// ProviderABI reads the provider ABI a libibverbs (its bytes) expects.
func ProviderABI(libibverbs []byte) (int, bool) {
	for _, marker := range pabiMarkers {
		if n, ok := findNumberAfter(libibverbs, marker); ok {
			return n, true
		}
	}
	return 0, false
}
