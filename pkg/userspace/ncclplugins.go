package userspace

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/hostlibs"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// NCCL plugins are decided per container like the RDMA stack: an image
// that brings its own net or tuner plugin built it for its own NCCL, and a
// host plugin found first by name would replace it (vLLM on a gIB node
// fails in the gIB tuner), so only an image without one gets the host's.

// Values of apis.AnnotationNCCLPlugins and apis.EnvNCCLPlugins.
const (
	NCCLPluginsAuto = "auto"
	NCCLPluginsNone = "none"
)

// ImagePlugins is what of NCCL's network stack the image's linker finds.
type ImagePlugins struct {
	// Path is the first NCCL plugin library ("" when the image has none),
	// FoundBy how.
	Path, FoundBy string
	// Libfabric is the image's own libfabric, looked for only where the
	// host offers its own with EFA devices (ProbeLibfabric).
	Libfabric ImageLibrary
}

// ImageLibrary is where the image's linker finds a library ("" for none),
// and how.
type ImageLibrary struct{ Path, FoundBy string }

// ProbeNCCLPlugins looks for a libnccl-net*.so* or libnccl-tuner*.so* where
// the image's dynamic linker looks, in Probe's order: LD_LIBRARY_PATH, the
// image's ld.so.cache, the standard directories. NCCL dlopens plugins by
// name, so any such file there is one it could load.
func ProbeNCCLPlugins(img ImageFS, env []string) ImagePlugins {
	lib := probeLibrary(img, env, isNCCLPlugin, nil)
	return ImagePlugins{Path: lib.Path, FoundBy: lib.FoundBy}
}

// ProbeLibfabric looks for a libfabric.so* where the image's linker looks
// and in the host's libfabric dirs inside the image (an image built on
// AWS's EFA installer has its own there): one found is the image's, with
// the providers it was built with.
func ProbeLibfabric(img ImageFS, env []string, hostDirs []string) ImageLibrary {
	return probeLibrary(img, env, hostlibs.IsLibfabric, hostDirs)
}

// probeLibrary finds the first library whose name matches, in Probe's
// order, then in extraDirs: the host's own directories for it, which the
// image may have too.
func probeLibrary(img ImageFS, env []string, match func(name string) bool, extraDirs []string) ImageLibrary {
	for _, dir := range ldLibraryPath(env) {
		if p := libraryIn(img, dir, match); p != "" {
			return ImageLibrary{p, "LD_LIBRARY_PATH"}
		}
	}
	// A cache entry may be what an earlier start of this container cached
	// of a lent directory, now an empty mount point: only a library counts.
	cached, _ := cachedPaths(img, match)
	for _, p := range cached {
		if isLibrary(img, p) {
			return ImageLibrary{p, "the image's /etc/ld.so.cache"}
		}
	}
	for _, dir := range hostlibs.StandardDirs() {
		if p := libraryIn(img, dir, match); p != "" {
			return ImageLibrary{p, "a standard library directory"}
		}
	}
	for _, dir := range extraDirs {
		if p := libraryIn(img, dir, match); p != "" {
			return ImageLibrary{p, "the host's directory for it, in the image"}
		}
	}
	return ImageLibrary{}
}

// libraryIn is the path of the first matching library in dir, or "".
func libraryIn(img ImageFS, dir string, match func(name string) bool) string {
	names, _ := img.ReadDir(dir)
	for _, name := range names {
		if p := path.Join(dir, name); match(name) && isLibrary(img, p) {
			return p
		}
	}
	return ""
}

// isLibrary reports whether p is an ELF library of this machine.
func isLibrary(img ImageFS, p string) bool {
	head, err := img.ReadFile(p, elfHeaderLen)
	return err == nil && notNativeELF(head) == ""
}

func isNCCLPlugin(name string) bool {
	return (strings.HasPrefix(name, hostlibs.NCCLNetPrefix) || strings.HasPrefix(name, hostlibs.NCCLTunerPrefix)) && strings.Contains(name, ".so")
}

// PluginsDecision is what one container gets of the host's NCCL offer.
type PluginsDecision struct {
	// Dirs are the host plugin (and libfabric) directories added to the
	// linker cache.
	Dirs []string
	// Files are host files lent read-only at the same path: the plugins
	// and the libraries beside them (but NCCL's own), libfabric, the
	// topology file.
	Files []string
	// Vars go into the container's nccl.conf: NCCL_NET_PLUGIN and
	// NCCL_TUNER_PLUGIN for the lent plugins, FI_PROVIDER and
	// FI_EFA_USE_DEVICE_RDMA with libfabric, then the carried keys. NCCL
	// sets every key of its nccl.conf in its environment where unset, so
	// libfabric inside it reads the FI_* ones too.
	Vars []model.NCCLConfVar
	// Reason says why, in one sentence, for the hook log.
	Reason string
}

// ChoosePlugins reads the container's override: NCCLPluginsAuto (the
// default) or NCCLPluginsNone, and where it was set. A DRA claim's none
// (apis.EnvClaimNCCLPlugins, which the claim's CDI device sets in the
// containers that use it) wins over the annotation and the container's
// own variable: where a claim and a pod disagree, the stricter word
// stands. A claim's auto leaves the choice to them.
func ChoosePlugins(annotations map[string]string, env []string) (string, string, error) {
	if v, ok := envValue(env, apis.EnvClaimNCCLPlugins); ok {
		source := "DRA claim config ncclPlugins (" + apis.EnvClaimNCCLPlugins + ")"
		switch v {
		case NCCLPluginsNone:
			return NCCLPluginsNone, source, nil
		case NCCLPluginsAuto:
		default:
			return "", "", fmt.Errorf("%s %q: want %s or %s", source, v, NCCLPluginsAuto, NCCLPluginsNone)
		}
	}
	v, source, ok := override(annotations, env, apis.AnnotationNCCLPlugins, apis.EnvNCCLPlugins)
	if !ok {
		return NCCLPluginsAuto, "the default", nil
	}
	if v != NCCLPluginsAuto && v != NCCLPluginsNone {
		return "", "", fmt.Errorf("%s %q: want %s or %s", source, v, NCCLPluginsAuto, NCCLPluginsNone)
	}
	return v, source, nil
}

// DecidePlugins decides for one container: nothing when it opts out
// (choice NCCLPluginsNone); the carried keys and their files alone when
// its image has a plugin of its own (the topology is the host's whatever
// NCCL runs); otherwise the host's plugins too, with the libraries beside
// them but never the host's NCCL, and the variables that make NCCL load
// them. The libraries are lent one by one rather than with their
// directory: ldconfig ranks a lent directory before the image's own, so a
// libnccl.so.2 in it would be the one the image's programs load.
//
// efa are the EFA devices the container gets. The host's libfabric goes
// with them, with FI_PROVIDER=efa, unless the image has a libfabric of its
// own: the host's plugin was built against the host's libfabric. A plugin
// dir that needs libfabric (model.NCCLPluginDir.NeedsLibfabric:
// aws-ofi-nccl) goes only where the host's libfabric goes, so a container
// without EFA devices on an EFA node never gets a plugin that cannot load;
// it is kept back with the reason, and the other dirs (gIB's) are lent as
// anywhere.
func DecidePlugins(host model.HostNCCL, choice, source string, image ImagePlugins, efa []model.Device) PluginsDecision {
	var d PluginsDecision
	if choice == NCCLPluginsNone {
		d.Reason = fmt.Sprintf("NCCL plugins none (%s): none of the host's NCCL plugins or nccl.conf keys", source)
		return d
	}
	withLibfabric := len(efa) > 0 && len(host.Libfabric) > 0 && image.Libfabric.Path == ""
	switch {
	case len(host.PluginDirs) == 0:
		d.Reason = "the host has no NCCL plugins in nccl_plugins.dirs"
	case image.Path != "":
		d.Reason = fmt.Sprintf("the image carries an NCCL plugin at %s (found by %s): its own plugins run, the host's are not lent", image.Path, image.FoundBy)
	default:
		var lent []model.NCCLPluginDir
		var keptBack []string
		for _, dir := range host.PluginDirs {
			if dir.NeedsLibfabric && !withLibfabric {
				keptBack = append(keptBack, dir.Path)
				continue
			}
			lent = append(lent, dir)
		}
		if len(lent) > 0 {
			d.lendPlugins(lent)
		}
		if len(keptBack) > 0 {
			d.Reason = joinReasons(d.Reason, fmt.Sprintf("%s kept back: its plugins need libfabric, which goes only with the host's libfabric to a container that gets EFA devices, and %s",
				strings.Join(keptBack, ", "), noLibfabric(host, image, efa)))
		}
		if withLibfabric {
			d.lendLibfabric(host.Libfabric, efa)
		}
	}
	d.Files = append(d.Files, host.Files...)
	d.Vars = append(d.Vars, host.Conf...)
	if len(host.Conf) > 0 {
		names := make([]string, len(host.Conf))
		for i, v := range host.Conf {
			names[i] = v.Name
		}
		d.Reason += "; the host's nccl.conf " + strings.Join(names, ", ") + " carried"
	}
	return d
}

// noLibfabric says why a container does not get the host's libfabric.
func noLibfabric(host model.HostNCCL, image ImagePlugins, efa []model.Device) string {
	switch {
	case len(host.Libfabric) == 0:
		return "the host has no libfabric in nccl_plugins.libfabric_dirs"
	case len(efa) == 0:
		return "this container gets none"
	}
	return fmt.Sprintf("the image carries libfabric at %s (found by %s): its own EFA stack runs", image.Libfabric.Path, image.Libfabric.FoundBy)
}

func joinReasons(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// lendPlugins lends the plugin dirs' files but NCCL's own, and names the
// plugins in NCCL_NET_PLUGIN and NCCL_TUNER_PLUGIN.
func (d *PluginsDecision) lendPlugins(dirs []model.NCCLPluginDir) {
	var net, tuner, keptBack []string
	for _, dir := range dirs {
		d.Dirs = append(d.Dirs, dir.Path)
		for _, names := range [][]string{dir.Net, dir.Tuner, dir.Libs} {
			for _, name := range names {
				d.Files = append(d.Files, path.Join(dir.Path, name))
			}
		}
		for _, name := range dir.NCCL {
			keptBack = append(keptBack, path.Join(dir.Path, name))
		}
		net = appendPluginNames(net, hostlibs.NCCLNetPrefix, dir.Net)
		tuner = appendPluginNames(tuner, hostlibs.NCCLTunerPrefix, dir.Tuner)
	}
	d.Vars = appendPluginVar(d.Vars, "NCCL_NET_PLUGIN", net)
	d.Vars = appendPluginVar(d.Vars, "NCCL_TUNER_PLUGIN", tuner)
	d.Reason = fmt.Sprintf("the image has no NCCL plugin its linker finds: the host's %s lent", strings.Join(d.Dirs, ", "))
	if len(keptBack) > 0 {
		// Lent with its directory, the host's NCCL would enter the
		// linker cache ahead of the image's own and replace it.
		d.Reason += fmt.Sprintf(" without the NCCL beside them (%s): the image's own NCCL runs", strings.Join(keptBack, ", "))
	}
}

// lendLibfabric lends the host's libfabric files with their directories
// in the linker cache, picks libfabric's EFA provider, and turns GPUDirect
// RDMA on when every EFA device the container gets has RDMA read
// (model.Device.EFARDMARead): libfabric refuses the switch on a device
// without it.
func (d *PluginsDecision) lendLibfabric(files []string, efa []model.Device) {
	for _, f := range files {
		d.Files = append(d.Files, f)
		if dir := path.Dir(f); !slices.Contains(d.Dirs, dir) {
			d.Dirs = append(d.Dirs, dir)
		}
	}
	d.Vars = append(d.Vars, model.NCCLConfVar{Name: "FI_PROVIDER", Value: "efa"})
	var noRead []string
	for _, dev := range efa {
		if !dev.EFARDMARead() {
			noRead = append(noRead, fmt.Sprintf("%s (%s)", dev.Name, orUnknown(dev.PCIDevice)))
		}
	}
	d.Reason += fmt.Sprintf("; the host's libfabric (%s) lent for %d EFA device(s) with FI_PROVIDER=efa", strings.Join(files, ", "), len(efa))
	if len(noRead) > 0 {
		d.Reason += "; GPUDirect RDMA left off, no RDMA read on " + strings.Join(noRead, ", ")
		return
	}
	d.Vars = append(d.Vars, model.NCCLConfVar{Name: "FI_EFA_USE_DEVICE_RDMA", Value: "1"})
	d.Reason += " and FI_EFA_USE_DEVICE_RDMA=1"
}

func orUnknown(pciDevice string) string {
	if pciDevice == "" {
		return "PCI device unknown"
	}
	return pciDevice
}

// appendPluginNames adds the names NCCL_*_PLUGIN takes for each library:
// libnccl-net-gib.so is "gib". The default name (libnccl-net.so), which
// NCCL loads unasked, and versioned files (.so.1, which NCCL never
// dlopens by itself) add none.
func appendPluginNames(names []string, prefix string, files []string) []string {
	for _, f := range files {
		name, ok := strings.CutSuffix(strings.TrimPrefix(f, prefix+"-"), ".so")
		if ok && name != "" && !strings.HasPrefix(f, prefix+".") && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

// appendPluginVar writes one plugin variable: a list is what NCCL 2.27
// and later read; an older NCCL takes the one name.
func appendPluginVar(vars []model.NCCLConfVar, name string, plugins []string) []model.NCCLConfVar {
	if len(plugins) == 0 {
		return vars
	}
	return append(vars, model.NCCLConfVar{Name: name, Value: strings.Join(plugins, ",")})
}
