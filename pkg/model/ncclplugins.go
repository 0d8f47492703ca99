package model

import (
	"slices"
	"strings"
)

// HostNCCL is what the host offers a container's NCCL besides the HCAs:
// the cloud's plugin libraries, chosen keys of its own nccl.conf, and the
// files those keys name. Paths are the host's, and a container gets each
// at the same path.
type HostNCCL struct {
	// PluginDirs hold NCCL net or tuner plugins, in config order.
	PluginDirs []NCCLPluginDir
	// Conf are the carried keys of the host's nccl.conf, in config order.
	Conf []NCCLConfVar
	// Files are the host files Conf names (NCCL_TOPO_FILE), each checked
	// to be a regular file.
	Files []string
	// Libfabric are the host's libfabric.so* files (AWS's EFA install),
	// which the aws-ofi-nccl plugin is linked against: a container that
	// gets EFA devices gets them with the plugins, and a plugin dir that
	// needs them (NCCLPluginDir.NeedsLibfabric) goes only with them.
	Libfabric []string
}

// NCCLPluginDir is one host directory and the libraries in it.
type NCCLPluginDir struct {
	Path string
	// Net and Tuner are the file names: libnccl-net*.so*, libnccl-tuner*.so*.
	Net, Tuner []string
	// Libs are the dir's other libraries, which the plugins may link
	// against; NCCL is NCCL's own (libnccl.so*), which a cloud ships
	// beside the plugins it built against it.
	Libs, NCCL []string
	// NeedsLibfabric is set when a net or tuner plugin of the dir names
	// libfabric among the libraries it needs (ELF DT_NEEDED), as
	// aws-ofi-nccl's do: without a libfabric beside it the plugin does not
	// load.
	NeedsLibfabric bool
}

// NCCLConfVar is one KEY=VALUE line of an nccl.conf.
type NCCLConfVar struct{ Name, Value string }

// Empty reports whether the host offers nothing.
func (h HostNCCL) Empty() bool { return len(h.PluginDirs) == 0 && len(h.Conf) == 0 }

// CleanAbsPath reports whether p is absolute and names no parent
// directory: a path read from a config or the host's nccl.conf that is
// given to a container at the same place must not climb out of where it
// says.
func CleanAbsPath(p string) bool {
	return strings.HasPrefix(p, "/") && !slices.Contains(strings.Split(p, "/"), "..") && !strings.ContainsAny(p, "\n\r\x00")
}
