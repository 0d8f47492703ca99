package model

// UserStack is the RDMA user-space stack found on the host (rdma-core or
// MLNX_OFED): what a container needs mounted to open the HCAs.
type UserStack struct {
	// Flavor is "rdma-core", "mlnx-ofed" or "" when nothing was found.
	Flavor string `json:"flavor,omitempty"`
	// Files are every file to mount read-only at the same path in the
	// container: real files and the symlinks that point to them.
	Files []HostFile `json:"files"`
	// LibraryDirs are the directories holding injected libraries, for the
	// container's linker cache.
	LibraryDirs []string `json:"libraryDirs"`
	// Problems are reasons the stack is incomplete (a libibverbs without
	// providers, a provider of another ABI); when non-empty, libraries are
	// reported, not injected.
	Problems []string `json:"problems,omitempty"`
}

// HostFile is one file of the user-space stack, as seen on the host.
type HostFile struct {
	// Path is the absolute path inside the container (and on the host, less any host root).
	Path string `json:"path"`
	// HostPath is where the file lies on the machine running rdma-cdi
	// (differs from Path when a --host-root is given).
	HostPath string `json:"hostPath"`
	// Symlink is the link target when the file is a symlink ("" otherwise).
	Symlink string `json:"symlink,omitempty"`
	// Role says why the file is there: "libibverbs", "provider", "driver-config",
	// "librdmacm", "libnl-3", "libnl-route-3", "libnuma", "extra".
	Role string `json:"role"`
}
