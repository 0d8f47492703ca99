package hostlibs

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// NCCL plugin library names as NCCL's loader builds them:
// libnccl-net.so, libnccl-net-<name>.so, and the tuner's likewise.
const (
	NCCLNetPrefix   = "libnccl-net"
	NCCLTunerPrefix = "libnccl-tuner"
	ncclLib         = "libnccl.so"
	// LibfabricLib is libfabric's library name, as aws-ofi-nccl links it.
	LibfabricLib = "libfabric.so"
)

// ncclFileKeys are nccl.conf keys whose value is a host file NCCL reads:
// a container is given the file with the key.
var ncclFileKeys = []string{"NCCL_TOPO_FILE", "NCCL_GRAPH_FILE"}

// maxHostNCCLConf bounds the host's nccl.conf: a real one is a few lines.
const maxHostNCCLConf = 1 << 20

// NCCLOptions steer FindNCCL.
type NCCLOptions struct {
	// HostRoot is where the host's "/" is seen ("" or "/": here).
	HostRoot string
	// Dirs are the plugin directories to search; missing ones are skipped.
	Dirs []string
	// ConfFile is the host's nccl.conf; CarryKeys its keys to carry.
	ConfFile  string
	CarryKeys []string
	// LibfabricDirs are searched for libfabric.so*; missing ones are
	// skipped.
	LibfabricDirs []string
}

// FindNCCL finds the host's NCCL plugins in opts.Dirs, its libfabric in
// opts.LibfabricDirs and the carried keys of its nccl.conf. What cannot be
// used (a path with "..", a topology file that is missing or not a
// regular file) is left out, with a warning.
func FindNCCL(opts NCCLOptions) (model.HostNCCL, []string) {
	var h model.HostNCCL
	var warnings []string
	under := func(p string) string { return filepath.Join(opts.HostRoot, p) }
	// libraries lists the regular *.so* files of a directory; a directory
	// that is missing is no warning: the defaults name every cloud's.
	libraries := func(what, dir string) []string {
		if !model.CleanAbsPath(dir) {
			warnings = append(warnings, fmt.Sprintf("%s %q: not an absolute path without ..: skipped", what, dir))
			return nil
		}
		entries, err := os.ReadDir(under(dir))
		if err != nil {
			if !os.IsNotExist(err) {
				warnings = append(warnings, fmt.Sprintf("%s %s: %v", what, dir, err))
			}
			return nil
		}
		var names []string
		for _, e := range entries {
			if name := e.Name(); strings.Contains(name, ".so") && isRegular(under(path.Join(dir, name))) {
				names = append(names, name)
			}
		}
		return names
	}
	for _, dir := range opts.Dirs {
		d := model.NCCLPluginDir{Path: path.Clean(dir)}
		for _, name := range libraries("NCCL plugin dir", dir) {
			switch {
			case strings.HasPrefix(name, NCCLNetPrefix):
				d.Net = append(d.Net, name)
				d.NeedsLibfabric = d.NeedsLibfabric || linksLibfabric(under(path.Join(dir, name)))
			case strings.HasPrefix(name, NCCLTunerPrefix):
				d.Tuner = append(d.Tuner, name)
				d.NeedsLibfabric = d.NeedsLibfabric || linksLibfabric(under(path.Join(dir, name)))
			case name == ncclLib || strings.HasPrefix(name, ncclLib+"."):
				d.NCCL = append(d.NCCL, name)
			default:
				d.Libs = append(d.Libs, name)
			}
		}
		if len(d.Net)+len(d.Tuner) > 0 && !slices.ContainsFunc(h.PluginDirs, func(o model.NCCLPluginDir) bool { return o.Path == d.Path }) {
			h.PluginDirs = append(h.PluginDirs, d)
		}
	}
	for _, dir := range opts.LibfabricDirs {
		for _, name := range libraries("libfabric dir", dir) {
			if p := path.Join(dir, name); IsLibfabric(name) && !slices.Contains(h.Libfabric, p) {
				h.Libfabric = append(h.Libfabric, p)
			}
		}
	}
	if opts.ConfFile == "" || len(opts.CarryKeys) == 0 {
		return h, warnings
	}
	values, err := readConfValues(under(opts.ConfFile))
	if err != nil {
		if !os.IsNotExist(err) {
			warnings = append(warnings, fmt.Sprintf("host nccl.conf %s: %v", opts.ConfFile, err))
		}
		return h, warnings
	}
	for _, key := range opts.CarryKeys {
		v, ok := values[key]
		if !ok {
			continue
		}
		if slices.Contains(ncclFileKeys, key) {
			if !model.CleanAbsPath(v) || !isRegular(under(v)) {
				warnings = append(warnings, fmt.Sprintf("host nccl.conf %s: %s=%s is not an absolute path without .. to a regular file: not carried", opts.ConfFile, key, v))
				continue
			}
			v = path.Clean(v)
			h.Files = append(h.Files, v)
		}
		h.Conf = append(h.Conf, model.NCCLConfVar{Name: key, Value: v})
	}
	return h, warnings
}

// linksLibfabric reports whether the ELF library at p needs libfabric
// (a DT_NEEDED entry libfabric.so*). A file that is no ELF, or whose
// dynamic section cannot be read, needs nothing NCCL could load it with.
func linksLibfabric(p string) bool {
	f, err := elf.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	needed, err := f.ImportedLibraries()
	return err == nil && slices.ContainsFunc(needed, IsLibfabric)
}

// IsLibfabric reports whether a file name is libfabric's library:
// libfabric.so, libfabric.so.1, libfabric.so.1.25.0, but not libtool's
// libfabric.so.1.25.0.la beside it.
func IsLibfabric(name string) bool {
	version, ok := strings.CutPrefix(name, LibfabricLib)
	return ok && strings.Trim(version, ".0123456789") == "" && !strings.HasSuffix(version, ".") && (version == "" || version[0] == '.')
}

// readConfValues reads an nccl.conf as NCCL does: KEY=VALUE lines, '#'
// comments; a later line of a key wins.
func readConfValues(file string) (map[string]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxHostNCCLConf))
	if err != nil {
		return nil, err
	}
	values := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && k != "" {
			values[k] = strings.TrimSpace(v)
		}
	}
	return values, sc.Err()
}

// isRegular reports whether p leads to a regular file.
func isRegular(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
