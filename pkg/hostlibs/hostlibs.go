// Package hostlibs finds the RDMA user-space stack (rdma-core or MLNX_OFED)
// installed under a host root: libibverbs, its providers and their config,
// librdmacm and the libraries they link. Files are returned with their whole
// symlink chains so that mounting every one at its own path keeps sonames
// working in the container.
//
// Libraries are looked up as the host's dynamic linker would: first in the
// host's ld.so.cache, then in the standard directories. Every path, symlink
// targets included, is resolved inside the host root.
package hostlibs

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Sonames the stack is made of.
const (
	SonameLibibverbs  = "libibverbs.so.1"
	sonameLibrdmacm   = "librdmacm.so.1"
	sonameLibnl3      = "libnl-3.so.200"
	sonameLibnlRoute3 = "libnl-route-3.so.200"
	sonameLibnuma     = "libnuma.so.1"
)

// companionLibs are looked up beside libibverbs. Only those another
// injected library links (DT_NEEDED) are required; the others are added
// when present.
var companionLibs = []struct {
	soname string
	role   model.FileRole
}{
	{sonameLibrdmacm, model.RoleLibrdmacm},
	{sonameLibnl3, model.RoleLibnl3},
	{sonameLibnlRoute3, model.RoleLibnlRoute3},
	{sonameLibnuma, model.RoleLibnuma},
}

// providersWithLibs are providers that also ship as real shared libraries,
// with their own soname (providerSoname), that
// libibverbs/lib<name>-rdmav<N>.so points to: those with a direct verbs
// library (efadv, hnsdv, manadv, mlx4dv, mlx5dv, ionicdv). The others are
// only lib<name>-rdmav<N>.so.
var providersWithLibs = []string{"efa", "hns", "ionic", "mana", "mlx4", "mlx5"}

func providerSoname(provider string) string { return "lib" + provider + ".so.1" }

const (
	// DriverConfigDir holds one <name>.driver file per provider.
	DriverConfigDir = "/etc/libibverbs.d"
	// ProviderSubdir is the provider directory's name beside libibverbs.so.1.
	ProviderSubdir = "libibverbs"
	ldCachePath    = "/etc/ld.so.cache"
)

// mlnxOFEDMarkers exist only on hosts where MLNX_OFED is installed.
var mlnxOFEDMarkers = []string{"/usr/bin/ofed_info", "/etc/infiniband/info"}

// Options select what Discover reads.
type Options struct {
	// HostRoot is where the host's file system is mounted ("/" by default).
	HostRoot string
	// ExtraPaths are more host files (paths without HostRoot) to inject,
	// returned with Role "extra".
	ExtraPaths []string
	// Disabled returns an empty stack, for images that ship rdma-core.
	Disabled bool
}

// Discover finds the user-space stack under opts.HostRoot. A missing or
// incomplete stack is not an error: it is reported in UserStack.Problems.
// Without libibverbs no file is returned; Flavor is then "" unless an
// MLNX_OFED marker shows a broken MLNX_OFED install.
// Errors are for bad options, such as an ExtraPaths entry that is missing.
func Discover(opts Options) (model.UserStack, error) {
	if opts.Disabled {
		return emptyStack(), nil
	}
	root, err := cleanRoot(opts.HostRoot)
	if err != nil {
		return model.UserStack{}, err
	}
	d := newDiscovery(newHostFS(root))
	d.findStack()
	if err := d.addExtras(opts.ExtraPaths); err != nil {
		return model.UserStack{}, err
	}
	return d.result(), nil
}

func emptyStack() model.UserStack {
	return model.UserStack{Files: []model.HostFile{}, LibraryDirs: []string{}}
}

func cleanRoot(root string) (string, error) {
	if root == "" {
		return "/", nil
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("host root %q: %w", root, err)
	}
	return abs, nil
}

// discovery accumulates the files and problems of one Discover call.
type discovery struct {
	fs      *hostFS
	libs    *libFinder
	files   map[string]model.HostFile // by Path
	found   map[string]bool           // sonames found
	elfs    []string                  // host paths of libraries whose DT_NEEDED must be satisfied
	flavor  model.Flavor
	problem []string
}

func newDiscovery(fs *hostFS) *discovery {
	return &discovery{
		fs:    fs,
		libs:  newLibFinder(fs),
		files: map[string]model.HostFile{},
		found: map[string]bool{},
	}
}

func (d *discovery) addProblem(format string, args ...any) {
	d.problem = append(d.problem, fmt.Sprintf(format, args...))
}

// findStack looks for libibverbs, then everything that must come with it.
func (d *discovery) findStack() {
	d.flavor = d.detectFlavor()
	verbs, ok := d.addLibrary(SonameLibibverbs, model.RoleLibibverbs, "")
	if !ok {
		d.addProblem("%s not found (looked in %s and %s)", SonameLibibverbs,
			ldCachePath, strings.Join(d.libs.dirs, ", "))
		return
	}
	if d.flavor == "" {
		d.flavor = model.FlavorRDMACore
	}
	d.addProviders(verbs)
	d.addDriverConfigs()
	for _, lib := range companionLibs {
		d.addLibrary(lib.soname, lib.role, "")
	}
	d.checkNeeded()
}

func (d *discovery) detectFlavor() model.Flavor {
	for _, marker := range mlnxOFEDMarkers {
		if d.fs.exists(marker) {
			return model.FlavorMLNXOFED
		}
	}
	return ""
}

// library is a library located on the host: the path it was found at (a
// symlink, usually) and the regular file its chain ends at.
type library struct {
	path, real string
}

// addLibrary looks soname up and adds its symlink chain; ok is false when
// it is not installed or its chain is broken (a problem is then recorded).
func (d *discovery) addLibrary(soname string, role model.FileRole, provider string) (library, bool) {
	p, ok := d.libs.find(soname)
	if !ok {
		return library{}, false
	}
	real, ok := d.addChain(p, role, provider)
	if !ok {
		return library{}, false
	}
	d.found[soname] = true
	d.elfs = append(d.elfs, d.fs.hostPath(real))
	return library{path: p, real: real}, true
}

// addChain adds p and every link after it down to the regular file, whose
// path it returns; a broken chain is recorded as a problem. provider names
// the rdma-core provider the files belong to ("" when none).
func (d *discovery) addChain(p string, role model.FileRole, provider string) (string, bool) {
	chain, err := d.fs.resolveChain(p)
	if err != nil {
		d.addProblem("%v", err)
		return "", false
	}
	for _, link := range chain {
		if _, dup := d.files[link.path]; dup {
			continue // reached through another chain: keep the first role
		}
		d.files[link.path] = model.HostFile{
			Path:     link.path,
			HostPath: d.fs.hostPath(link.path),
			Symlink:  link.target,
			Role:     role,
			Provider: provider,
		}
	}
	return chain[len(chain)-1].path, true
}

// addProviders adds the provider libraries and checks that their provider
// ABI matches the one libibverbs was built with.
func (d *discovery) addProviders(verbs library) {
	wantPABI, pabiErr := d.fs.libibverbsPABI(verbs.real)
	if pabiErr != nil {
		d.addProblem("%v", pabiErr)
	}
	for _, provider := range providersWithLibs {
		d.addLibrary(providerSoname(provider), model.RoleProvider, provider)
	}

	dir := d.fs.canonicalDir(path.Join(path.Dir(verbs.path), ProviderSubdir))
	names, err := d.fs.readDir(dir)
	if err != nil {
		d.addProblem("%s (%s) has no provider directory: %v", SonameLibibverbs, verbs.path, err)
		return
	}
	count := 0
	for _, name := range names {
		provider, pabi, ok := ProviderFile(name)
		if !ok {
			continue
		}
		count++
		p := path.Join(dir, name)
		d.addChain(p, model.RoleProvider, provider)
		if pabiErr == nil && pabi != wantPABI {
			d.addProblem("provider %s has ABI rdmav%d but %s (%s) expects rdmav%d",
				p, pabi, SonameLibibverbs, verbs.real, wantPABI)
		}
	}
	if count == 0 {
		d.addProblem("%s (%s) has no providers (no lib*-rdmav<N>.so in %s)", SonameLibibverbs, verbs.path, dir)
	}
}

// addDriverConfigs adds every /etc/libibverbs.d/*.driver file.
func (d *discovery) addDriverConfigs() {
	dir := d.fs.canonicalDir(DriverConfigDir)
	names, err := d.fs.readDir(dir)
	if err != nil {
		d.addProblem("no provider configuration: %v", err)
		return
	}
	for _, name := range names {
		if provider, ok := strings.CutSuffix(name, ".driver"); ok {
			d.addChain(path.Join(dir, name), model.RoleDriverConfig, provider)
		}
	}
}

// checkNeeded records a problem for every stack library that an injected
// library links but that was not found: injecting it would fail to load.
func (d *discovery) checkNeeded() {
	stackLibs := map[string]bool{SonameLibibverbs: true}
	for _, lib := range companionLibs {
		stackLibs[lib.soname] = true
	}
	for _, file := range d.elfs {
		for _, needed := range neededLibs(file) {
			if stackLibs[needed] && !d.found[needed] {
				d.addProblem("%s needs %s, which was not found", d.fs.rel(file), needed)
			}
		}
	}
}

// addExtras adds the user's extra files; any of them missing or broken is
// an error, as the user asked for it by name.
func (d *discovery) addExtras(extras []string) error {
	for _, p := range extras {
		if !path.IsAbs(p) {
			return fmt.Errorf("extra path %q is not absolute", p)
		}
		chain, err := d.fs.resolveChain(path.Join(d.fs.canonicalDir(path.Dir(p)), path.Base(p)))
		if err != nil {
			return fmt.Errorf("extra path %s: %w", p, err)
		}
		for _, link := range chain {
			if _, dup := d.files[link.path]; !dup {
				d.files[link.path] = model.HostFile{
					Path: link.path, HostPath: d.fs.hostPath(link.path), Symlink: link.target, Role: model.RoleExtra,
				}
			}
		}
	}
	return nil
}

// result returns the stack in a stable order: files by path, directories
// and problems sorted.
func (d *discovery) result() model.UserStack {
	stack := emptyStack()
	stack.Flavor = d.flavor
	for _, f := range d.files {
		stack.Files = append(stack.Files, f)
	}
	sortFiles(stack.Files)
	stack.LibraryDirs = libraryDirs(stack.Files)
	stack.Problems = slices.Clone(d.problem)
	slices.Sort(stack.Problems)
	stack.Problems = slices.Compact(stack.Problems)
	return stack
}

func sortFiles(files []model.HostFile) {
	slices.SortFunc(files, func(a, b model.HostFile) int { return strings.Compare(a.Path, b.Path) })
}

// libraryDirs are the directories of the injected shared libraries, for the
// container's linker cache. The provider directory is left out: libibverbs
// dlopens providers by full path, and they must not shadow real sonames.
func libraryDirs(files []model.HostFile) []string {
	var dirs []string
	for _, f := range files {
		if f.Role == model.RoleDriverConfig || !strings.Contains(path.Base(f.Path), ".so") {
			continue
		}
		dir := path.Dir(f.Path)
		if f.Role == model.RoleProvider && path.Base(dir) == ProviderSubdir {
			continue
		}
		dirs = append(dirs, dir)
	}
	slices.Sort(dirs)
	return slices.Compact(dirs)
}
