package cdispec

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// lentFile is one file the hook lends an image without an RDMA stack of
// its own: its path in the container and on the host.
type lentFile struct{ path, hostPath string }

// arg is the hook's --lend value.
func (f lentFile) arg() string { return f.path + "=" + f.hostPath }

// lentFiles are the names the host's libraries are loaded by: each
// symlink of the stack, and each regular file that no symlink of the stack
// leads to. The spec itself mounts none of them: whether an image gets
// them depends on what the image carries, which only the hook can see
// (pkg/userspace).
//
// The linker looks libraries up by SONAME (libibverbs.so.1), which on the
// host is a link to the real file (libibverbs.so.1.14.x), and libibverbs
// dlopens providers through links in libibverbs/. The image may have
// neither. A bind mount's source is resolved by the kernel, so mounting the
// link gives the target's content at the link's path: a regular file where
// the host has a link. The real file's own versioned name is loaded by
// nobody once its links are mounted, so it is left out: every mount costs
// each container start it is lent to (a third of a start's added time on
// a 52-mount spec, BENCHMARKS.md).
//
// A link whose target is not itself in the stack is still mounted (the host
// resolves it), but reported: hostlibs should have listed the target.
func lentFiles(files []model.HostFile) ([]lentFile, []string, error) {
	sorted, err := sortedFiles(files)
	if err != nil {
		return nil, nil, err
	}
	inStack := make(map[string]bool, len(sorted))
	for _, f := range sorted {
		inStack[f.Path] = true
	}
	linkedTo := map[string]bool{}
	var warnings []string
	for _, f := range sorted {
		if target := linkTarget(f); target != "" {
			linkedTo[target] = true
			if !inStack[target] {
				warnings = append(warnings, fmt.Sprintf("%s links to %s, which is not in the RDMA user-space stack", f.Path, target))
			}
		}
	}
	lent := make([]lentFile, 0, len(sorted))
	for _, f := range sorted {
		if f.Symlink == "" && linkedTo[f.Path] {
			continue
		}
		lent = append(lent, lentFile{path: f.Path, hostPath: hostPathOf(f)})
	}
	return lent, warnings, nil
}

// sortedFiles checks paths, drops exact duplicates and sorts by container
// path for a stable spec.
func sortedFiles(files []model.HostFile) ([]model.HostFile, error) {
	out := make([]model.HostFile, 0, len(files))
	seen := make(map[string]string, len(files))
	for _, f := range files {
		if !filepath.IsAbs(f.Path) {
			return nil, fmt.Errorf("stack file path %q is not absolute", f.Path)
		}
		f.Path = filepath.Clean(f.Path)
		host := hostPathOf(f)
		if prev, dup := seen[f.Path]; dup {
			if prev != host {
				return nil, fmt.Errorf("stack file %s listed twice, from %s and %s", f.Path, prev, host)
			}
			continue
		}
		seen[f.Path] = host
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b model.HostFile) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// hostPathOf is where the engine finds the file; discovery leaves HostPath
// empty only when it equals Path.
func hostPathOf(f model.HostFile) string {
	if f.HostPath == "" {
		return f.Path
	}
	return filepath.Clean(f.HostPath)
}

// linkTarget is the absolute container path a symlink points to, "" for a
// regular file.
func linkTarget(f model.HostFile) string {
	if f.Symlink == "" {
		return ""
	}
	if filepath.IsAbs(f.Symlink) {
		return filepath.Clean(f.Symlink)
	}
	return filepath.Join(filepath.Dir(f.Path), f.Symlink)
}

// sortedUnique returns the cleaned, sorted, de-duplicated strings.
func sortedUnique(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		out = append(out, filepath.Clean(s))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
