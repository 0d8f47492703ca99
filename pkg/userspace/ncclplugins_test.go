package userspace_test

import (
	"debug/elf"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/hooks"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/userspace"
)

func (im *image) probePlugins(env ...string) userspace.ImagePlugins {
	im.t.Helper()
	r, err := hooks.OpenRoot(im.root)
	if err != nil {
		im.t.Fatal(err)
	}
	defer r.Close()
	return userspace.ProbeNCCLPlugins(r.ImageView(), env)
}

func TestProbeNCCLPlugins(t *testing.T) {
	lib := elfHeader(elf.ELFCLASS64, nativeMachine())
	t.Run("none", func(t *testing.T) {
		im := newImage(t)
		im.file(multiarch()+"/libnccl.so.2", lib)
		if got := im.probePlugins(); got.Path != "" {
			t.Errorf("found %+v in an image without plugins", got)
		}
	})
	t.Run("a standard directory", func(t *testing.T) {
		im := newImage(t)
		im.file(multiarch()+"/libnccl-tuner-mine.so", lib)
		if got := im.probePlugins(); got.Path != multiarch()+"/libnccl-tuner-mine.so" || got.FoundBy != "a standard library directory" {
			t.Errorf("found %+v", got)
		}
	})
	t.Run("LD_LIBRARY_PATH", func(t *testing.T) {
		im := newImage(t)
		im.file("/opt/ofi/lib/libnccl-net-ofi.so", lib)
		if got := im.probePlugins("LD_LIBRARY_PATH=/opt/ofi/lib"); got.Path != "/opt/ofi/lib/libnccl-net-ofi.so" || got.FoundBy != "LD_LIBRARY_PATH" {
			t.Errorf("found %+v", got)
		}
	})
	t.Run("the image's cache", func(t *testing.T) {
		im := newImage(t)
		im.file("/usr/local/gib/lib64/libnccl-net-gib.so", lib)
		im.cache("/usr/local/gib/lib64/libnccl-net-gib.so")
		if got := im.probePlugins(); got.Path != "/usr/local/gib/lib64/libnccl-net-gib.so" {
			t.Errorf("found %+v", got)
		}
	})
	// A restarted container: its cache lists the lent directory's plugin,
	// whose mount is gone. It is no plugin of the image's.
	t.Run("a cached mount point", func(t *testing.T) {
		im := newImage(t)
		im.file("/home/kubernetes/bin/gib/.keep", "")
		im.cache("/home/kubernetes/bin/gib/libnccl-net-gib.so")
		if got := im.probePlugins(); got.Path != "" {
			t.Errorf("found %+v", got)
		}
	})
}

func gibHost() model.HostNCCL {
	return model.HostNCCL{
		PluginDirs: []model.NCCLPluginDir{
			{Path: "/home/kubernetes/bin/gib", Net: []string{"libnccl-net-gib.so", "libnccl-net.so"}, Tuner: []string{"libnccl-tuner-gib.so"}, Libs: []string{"libgib-helper.so.1"}, NCCL: []string{"libnccl.so.2"}},
			{Path: "/opt/amazon/aws-ofi-nccl/lib", Net: []string{"libnccl-net-ofi.so", "libnccl-net-ofi.so.1"}},
		},
		Conf:  []model.NCCLConfVar{{Name: "NCCL_TOPO_FILE", Value: "/opt/microsoft/ndv5-topo.xml"}},
		Files: []string{"/opt/microsoft/ndv5-topo.xml"},
	}
}

func TestDecidePlugins(t *testing.T) {
	topo := model.NCCLConfVar{Name: "NCCL_TOPO_FILE", Value: "/opt/microsoft/ndv5-topo.xml"}
	t.Run("lend to an image without plugins", func(t *testing.T) {
		d := userspace.DecidePlugins(gibHost(), userspace.NCCLPluginsAuto, "the default", userspace.ImagePlugins{}, nil)
		// Every library of the dirs but gIB's libnccl.so.2, which would
		// replace the image's own NCCL in its linker cache.
		want := userspace.PluginsDecision{
			Dirs: []string{"/home/kubernetes/bin/gib", "/opt/amazon/aws-ofi-nccl/lib"},
			Files: []string{
				"/home/kubernetes/bin/gib/libnccl-net-gib.so", "/home/kubernetes/bin/gib/libnccl-net.so",
				"/home/kubernetes/bin/gib/libnccl-tuner-gib.so", "/home/kubernetes/bin/gib/libgib-helper.so.1",
				"/opt/amazon/aws-ofi-nccl/lib/libnccl-net-ofi.so", "/opt/amazon/aws-ofi-nccl/lib/libnccl-net-ofi.so.1",
				"/opt/microsoft/ndv5-topo.xml",
			},
			Vars: []model.NCCLConfVar{{Name: "NCCL_NET_PLUGIN", Value: "gib,ofi"}, {Name: "NCCL_TUNER_PLUGIN", Value: "gib"}, topo},
		}
		reason := d.Reason
		d.Reason = ""
		if !reflect.DeepEqual(d, want) {
			t.Errorf("got %+v, want %+v", d, want)
		}
		if !strings.Contains(reason, "without the NCCL beside them (/home/kubernetes/bin/gib/libnccl.so.2)") {
			t.Errorf("reason %q does not name the NCCL kept back", reason)
		}
	})
	t.Run("an image with its own plugin keeps it", func(t *testing.T) {
		d := userspace.DecidePlugins(gibHost(), userspace.NCCLPluginsAuto, "the default", userspace.ImagePlugins{Path: "/usr/lib/libnccl-net-mine.so", FoundBy: "x"}, nil)
		if len(d.Dirs) != 0 || !reflect.DeepEqual(d.Vars, []model.NCCLConfVar{topo}) || len(d.Files) != 1 {
			t.Errorf("got %+v: want the topology file alone", d)
		}
	})
	t.Run("opt-out", func(t *testing.T) {
		choice, source, err := userspace.ChoosePlugins(map[string]string{"rdma.example.com/nccl-plugins": "none"}, []string{"RDMA_CDI_NCCL_PLUGINS=auto"})
		if err != nil || choice != userspace.NCCLPluginsNone {
			t.Fatalf("ChoosePlugins = %q, %v", choice, err)
		}
		d := userspace.DecidePlugins(gibHost(), choice, source, userspace.ImagePlugins{}, nil)
		if len(d.Dirs)+len(d.Files)+len(d.Vars) != 0 || d.Reason == "" {
			t.Errorf("got %+v: want nothing, with a reason", d)
		}
	})
	t.Run("a bad value is an error", func(t *testing.T) {
		if _, _, err := userspace.ChoosePlugins(nil, []string{"RDMA_CDI_NCCL_PLUGINS=off"}); err == nil {
			t.Error("off accepted")
		}
		if _, _, err := userspace.ChoosePlugins(nil, []string{"RDMA_CDI_CLAIM_NCCL_PLUGINS=off"}); err == nil {
			t.Error("a claim's off accepted")
		}
	})
}

// A DRA claim's ncclPlugins reaches the hook as RDMA_CDI_CLAIM_NCCL_PLUGINS
// (its CDI device): none is honored as the annotation's none is, and wins
// where the annotation or the container's variable says auto; the claim's
// auto leaves the choice to them.
func TestChoosePluginsClaimConfig(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		env         []string
		want        string
		source      string
	}{
		{"claim none alone", nil, []string{"RDMA_CDI_CLAIM_NCCL_PLUGINS=none"}, "none", "DRA claim config ncclPlugins"},
		{"claim none over annotation auto", map[string]string{"rdma.example.com/nccl-plugins": "auto"}, []string{"RDMA_CDI_CLAIM_NCCL_PLUGINS=none"}, "none", "DRA claim config ncclPlugins"},
		{"claim none over env auto", nil, []string{"RDMA_CDI_NCCL_PLUGINS=auto", "RDMA_CDI_CLAIM_NCCL_PLUGINS=none"}, "none", "DRA claim config ncclPlugins"},
		{"claim auto, annotation none", map[string]string{"rdma.example.com/nccl-plugins": "none"}, []string{"RDMA_CDI_CLAIM_NCCL_PLUGINS=auto"}, "none", "annotation rdma.example.com/nccl-plugins"},
		{"claim auto alone", nil, []string{"RDMA_CDI_CLAIM_NCCL_PLUGINS=auto"}, "auto", "the default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			choice, source, err := userspace.ChoosePlugins(tc.annotations, tc.env)
			if err != nil || choice != tc.want || !strings.HasPrefix(source, tc.source) {
				t.Fatalf("ChoosePlugins = %q from %q, %v; want %q from %s", choice, source, err, tc.want, tc.source)
			}
			d := userspace.DecidePlugins(gibHost(), choice, source, userspace.ImagePlugins{}, nil)
			if lent := len(d.Dirs)+len(d.Files)+len(d.Vars) > 0; lent != (tc.want == "auto") {
				t.Errorf("decision %+v for %s", d, tc.want)
			}
			if tc.want == "none" && !strings.Contains(d.Reason, source) {
				t.Errorf("reason %q does not name %s", d.Reason, source)
			}
		})
	}
}

func TestProbeLibfabric(t *testing.T) {
	lib := elfHeader(elf.ELFCLASS64, nativeMachine())
	hostDirs := []string{"/opt/amazon/efa/lib", "/opt/amazon/efa/lib64"}
	probe := func(im *image, env ...string) userspace.ImageLibrary {
		r, err := hooks.OpenRoot(im.root)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		return userspace.ProbeLibfabric(r.ImageView(), env, hostDirs)
	}
	t.Run("none", func(t *testing.T) {
		im := newImage(t)
		im.file(multiarch()+"/libibverbs.so.1", lib)
		if got := probe(im); got.Path != "" {
			t.Errorf("found %+v in an image without libfabric", got)
		}
	})
	t.Run("a distribution's", func(t *testing.T) {
		im := newImage(t)
		im.file(multiarch()+"/libfabric.so.1", lib)
		if got := probe(im); got.Path != multiarch()+"/libfabric.so.1" {
			t.Errorf("found %+v", got)
		}
	})
	// An image built on AWS's EFA installer, found though neither its
	// env nor its cache names the directory.
	t.Run("the EFA installer's", func(t *testing.T) {
		im := newImage(t)
		im.file("/opt/amazon/efa/lib64/libfabric.so.1", lib)
		if got := probe(im); got.Path != "/opt/amazon/efa/lib64/libfabric.so.1" {
			t.Errorf("found %+v", got)
		}
	})
	// What an earlier start lent is an empty mount point now.
	t.Run("a lent file's mount point", func(t *testing.T) {
		im := newImage(t)
		im.file("/opt/amazon/efa/lib/libfabric.so.1", "")
		im.cache("/opt/amazon/efa/lib/libfabric.so.1")
		if got := probe(im); got.Path != "" {
			t.Errorf("found %+v", got)
		}
	})
}

// efaHost is an AWS node's offer: aws-ofi-nccl, whose plugins need
// libfabric, and the EFA installer's libfabric.
func efaHost() model.HostNCCL {
	return model.HostNCCL{
		PluginDirs: []model.NCCLPluginDir{{Path: "/opt/amazon/aws-ofi-nccl/lib", Net: []string{"libnccl-net-ofi.so", "libnccl-net.so"}, Tuner: []string{"libnccl-tuner-ofi.so"}, NeedsLibfabric: true}},
		Libfabric:  []string{"/opt/amazon/efa/lib/libfabric.so", "/opt/amazon/efa/lib/libfabric.so.1"},
	}
}

func efaDevices(pciDevices ...string) []model.Device {
	var out []model.Device
	for i, id := range pciDevices {
		out = append(out, model.Device{Name: "rdmap" + string(rune('a'+i)), Driver: "efa", PCIVendor: model.PCIVendorAmazon, PCIDevice: id})
	}
	return out
}

func TestDecidePluginsOnEFA(t *testing.T) {
	plugins := []model.NCCLConfVar{{Name: "NCCL_NET_PLUGIN", Value: "ofi"}, {Name: "NCCL_TUNER_PLUGIN", Value: "ofi"}}
	provider := model.NCCLConfVar{Name: "FI_PROVIDER", Value: "efa"}
	gdr := model.NCCLConfVar{Name: "FI_EFA_USE_DEVICE_RDMA", Value: "1"}
	auto := func(image userspace.ImagePlugins, efa []model.Device) userspace.PluginsDecision {
		return userspace.DecidePlugins(efaHost(), userspace.NCCLPluginsAuto, "the default", image, efa)
	}
	t.Run("an image with neither gets both", func(t *testing.T) {
		d := auto(userspace.ImagePlugins{}, efaDevices("0xefa1", "0xefa2"))
		want := userspace.PluginsDecision{
			Dirs: []string{"/opt/amazon/aws-ofi-nccl/lib", "/opt/amazon/efa/lib"},
			Files: []string{
				"/opt/amazon/aws-ofi-nccl/lib/libnccl-net-ofi.so", "/opt/amazon/aws-ofi-nccl/lib/libnccl-net.so",
				"/opt/amazon/aws-ofi-nccl/lib/libnccl-tuner-ofi.so",
				"/opt/amazon/efa/lib/libfabric.so", "/opt/amazon/efa/lib/libfabric.so.1",
			},
			Vars: append(slices.Clone(plugins), provider, gdr),
		}
		reason := d.Reason
		d.Reason = ""
		if !reflect.DeepEqual(d, want) {
			t.Errorf("got %+v, want %+v", d, want)
		}
		if !strings.Contains(reason, "FI_EFA_USE_DEVICE_RDMA=1") {
			t.Errorf("reason %q does not say GPUDirect RDMA is on", reason)
		}
	})
	// The first generation has no RDMA read: one such device among the
	// container's keeps the switch off for all.
	for _, tc := range [][]string{{"0xefa0"}, {"0xefa1", "0xefa0"}, {"0xefa2", ""}} {
		t.Run("no GPUDirect switch with "+strings.Join(tc, ","), func(t *testing.T) {
			d := auto(userspace.ImagePlugins{}, efaDevices(tc...))
			if !reflect.DeepEqual(d.Vars, append(slices.Clone(plugins), provider)) || !strings.Contains(d.Reason, "no RDMA read on") {
				t.Errorf("got %+v: want FI_PROVIDER alone, with the reason", d)
			}
		})
	}
	t.Run("an image with its own libfabric is untouched", func(t *testing.T) {
		d := auto(userspace.ImagePlugins{Libfabric: userspace.ImageLibrary{Path: "/usr/lib/libfabric.so.1", FoundBy: "x"}}, efaDevices("0xefa1"))
		if len(d.Dirs)+len(d.Files)+len(d.Vars) != 0 || !strings.Contains(d.Reason, "/usr/lib/libfabric.so.1") {
			t.Errorf("got %+v: want nothing, with the image's libfabric named", d)
		}
	})
	t.Run("an image with its own plugin is untouched", func(t *testing.T) {
		d := auto(userspace.ImagePlugins{Path: "/opt/ofi/libnccl-net-ofi.so", FoundBy: "x"}, efaDevices("0xefa1"))
		if len(d.Dirs)+len(d.Files)+len(d.Vars) != 0 {
			t.Errorf("got %+v: want nothing", d)
		}
	})
	t.Run("opt-out", func(t *testing.T) {
		d := userspace.DecidePlugins(efaHost(), userspace.NCCLPluginsNone, "x", userspace.ImagePlugins{}, efaDevices("0xefa1"))
		if len(d.Dirs)+len(d.Files)+len(d.Vars) != 0 {
			t.Errorf("got %+v: want nothing", d)
		}
	})
	// A container without EFA devices gets neither aws-ofi-nccl, which
	// would not load without libfabric, nor libfabric, nor a line for
	// them; the reason names the dir kept back.
	t.Run("no EFA device", func(t *testing.T) {
		d := auto(userspace.ImagePlugins{}, nil)
		if len(d.Dirs)+len(d.Files)+len(d.Vars) != 0 || !strings.Contains(d.Reason, "/opt/amazon/aws-ofi-nccl/lib kept back") || !strings.Contains(d.Reason, "this container gets none") {
			t.Errorf("got %+v: want nothing, with the kept-back dir and why", d)
		}
	})
	t.Run("no host libfabric", func(t *testing.T) {
		host := efaHost()
		host.Libfabric = nil
		d := userspace.DecidePlugins(host, userspace.NCCLPluginsAuto, "the default", userspace.ImagePlugins{}, efaDevices("0xefa1"))
		if len(d.Dirs)+len(d.Files)+len(d.Vars) != 0 || !strings.Contains(d.Reason, "the host has no libfabric") {
			t.Errorf("got %+v: want nothing, with the missing libfabric named", d)
		}
	})
}

// On a node that offers aws-ofi-nccl (its plugins need libfabric) and a
// plugin dir that does not (gIB's), the EFA container gets both dirs and
// libfabric; a container without EFA devices on the same node gets the
// other dir alone: no aws-ofi-nccl, no libfabric, no FI_* line.
func TestDecidePluginsOnEFAWithAnotherPluginDir(t *testing.T) {
	host := efaHost()
	gib := model.NCCLPluginDir{Path: "/home/kubernetes/bin/gib", Net: []string{"libnccl-net-gib.so"}, Tuner: []string{"libnccl-tuner-gib.so"}}
	host.PluginDirs = append([]model.NCCLPluginDir{gib}, host.PluginDirs...)
	decide := func(efa []model.Device) userspace.PluginsDecision {
		return userspace.DecidePlugins(host, userspace.NCCLPluginsAuto, "the default", userspace.ImagePlugins{}, efa)
	}
	t.Run("an EFA container gets both", func(t *testing.T) {
		d := decide(efaDevices("0xefa2"))
		dirs := []string{"/home/kubernetes/bin/gib", "/opt/amazon/aws-ofi-nccl/lib", "/opt/amazon/efa/lib"}
		vars := []model.NCCLConfVar{{Name: "NCCL_NET_PLUGIN", Value: "gib,ofi"}, {Name: "NCCL_TUNER_PLUGIN", Value: "gib,ofi"}, {Name: "FI_PROVIDER", Value: "efa"}, {Name: "FI_EFA_USE_DEVICE_RDMA", Value: "1"}}
		if !reflect.DeepEqual(d.Dirs, dirs) || !reflect.DeepEqual(d.Vars, vars) || !slices.Contains(d.Files, "/opt/amazon/aws-ofi-nccl/lib/libnccl-net-ofi.so") || !slices.Contains(d.Files, "/opt/amazon/efa/lib/libfabric.so.1") {
			t.Errorf("got %+v: want both plugin dirs and libfabric", d)
		}
		if strings.Contains(d.Reason, "kept back") {
			t.Errorf("reason %q keeps something back", d.Reason)
		}
	})
	t.Run("a container without EFA devices gets the other dir alone", func(t *testing.T) {
		d := decide(nil)
		want := userspace.PluginsDecision{
			Dirs:  []string{"/home/kubernetes/bin/gib"},
			Files: []string{"/home/kubernetes/bin/gib/libnccl-net-gib.so", "/home/kubernetes/bin/gib/libnccl-tuner-gib.so"},
			Vars:  []model.NCCLConfVar{{Name: "NCCL_NET_PLUGIN", Value: "gib"}, {Name: "NCCL_TUNER_PLUGIN", Value: "gib"}},
		}
		reason := d.Reason
		d.Reason = ""
		if !reflect.DeepEqual(d, want) {
			t.Errorf("got %+v, want %+v", d, want)
		}
		if !strings.Contains(reason, "the host's /home/kubernetes/bin/gib lent") || !strings.Contains(reason, "/opt/amazon/aws-ofi-nccl/lib kept back: its plugins need libfabric") {
			t.Errorf("reason %q does not say what was lent and what kept back", reason)
		}
	})
	// An image with its own libfabric keeps it: aws-ofi-nccl, built
	// against the host's, stays back; the other dir is lent.
	t.Run("an image with its own libfabric", func(t *testing.T) {
		d := userspace.DecidePlugins(host, userspace.NCCLPluginsAuto, "the default", userspace.ImagePlugins{Libfabric: userspace.ImageLibrary{Path: "/usr/lib/libfabric.so.1", FoundBy: "x"}}, efaDevices("0xefa2"))
		if !reflect.DeepEqual(d.Dirs, []string{"/home/kubernetes/bin/gib"}) || slices.ContainsFunc(d.Vars, func(v model.NCCLConfVar) bool { return strings.HasPrefix(v.Name, "FI_") }) || !strings.Contains(d.Reason, "the image carries libfabric at /usr/lib/libfabric.so.1") {
			t.Errorf("got %+v: want gIB's dir alone, with the image's libfabric named", d)
		}
	})
}
