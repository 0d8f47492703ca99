package model

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// UserStack is the RDMA user-space stack found on the host (rdma-core or
// MLNX_OFED): what a container needs mounted to open the HCAs.
type UserStack struct {
	// Flavor is rdma-core, MLNX_OFED or "" when nothing was found.
	Flavor Flavor `json:"flavor,omitempty"`
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

// Rehomed returns the stack with every HostPath under root instead: the
// same files as seen by a process whose view of the host root is root (a
// container engine on the host, when rdma-cdi reads the host at /host).
func (s UserStack) Rehomed(root string) UserStack {
	files := make([]HostFile, len(s.Files))
	for i, f := range s.Files {
		f.HostPath = path.Join(root, f.Path)
		files[i] = f
	}
	s.Files = files
	return s
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
	// Role says why the file is there.
	Role FileRole `json:"role"`
	// Provider names the rdma-core provider ("mlx5") a provider library or
	// driver config belongs to; "" for the other files.
	Provider string `json:"provider,omitempty"`
}

// Flavor is the kind of user-space stack.
type Flavor string

// Flavors of user-space stack.
const (
	FlavorRDMACore Flavor = "rdma-core"
	FlavorMLNXOFED Flavor = "mlnx-ofed"
)

// FileRole says why a file belongs to the user-space stack.
type FileRole string

// Roles of the files.
const (
	RoleLibibverbs   FileRole = "libibverbs"
	RoleProvider     FileRole = "provider"
	RoleDriverConfig FileRole = "driver-config"
	RoleLibrdmacm    FileRole = "librdmacm"
	RoleLibnl3       FileRole = "libnl-3"
	RoleLibnlRoute3  FileRole = "libnl-route-3"
	RoleLibnuma      FileRole = "libnuma"
	RoleExtra        FileRole = "extra"
)

// UserSpaceMode says whose RDMA user space a container runs (pkg/userspace
// decides, per container).
type UserSpaceMode string

const (
	// UserSpaceAuto runs the image's stack when it has one, else lends the host's.
	UserSpaceAuto UserSpaceMode = "auto"
	// UserSpaceHost lends the host's set even to an image with its own, over it.
	UserSpaceHost UserSpaceMode = "host"
	// UserSpaceImage never lends: the image runs what it carries, or nothing.
	UserSpaceImage UserSpaceMode = "image"
)

// UserSpaceModes lists the valid modes, default first.
var UserSpaceModes = []UserSpaceMode{UserSpaceAuto, UserSpaceHost, UserSpaceImage}

// ParseUserSpaceMode accepts a mode name, case-insensitively.
func ParseUserSpaceMode(s string) (UserSpaceMode, error) {
	m := UserSpaceMode(strings.ToLower(strings.TrimSpace(s)))
	if slices.Contains(UserSpaceModes, m) {
		return m, nil
	}
	return "", fmt.Errorf("RDMA user-space mode %q: want auto, host or image", s)
}
