package hooks

import (
	"debug/elf"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/userspace"
)

// elfLib is enough of a library of this machine for the image probe.
func elfLib() string {
	h := make([]byte, 64)
	copy(h, elf.ELFMAG)
	h[4], h[5] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB)
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]
	h[18], h[19] = byte(machine), byte(machine>>8)
	return string(h)
}

// gibHostRoot is a host with gIB's plugins and Azure's topology file named
// in its nccl.conf.
func gibHostRoot(t *testing.T) (string, config.NCCLPlugins) {
	root := t.TempDir()
	for p, data := range map[string]string{
		"/home/kubernetes/bin/gib/libnccl-net-gib.so":   elfLib(),
		"/home/kubernetes/bin/gib/libnccl-tuner-gib.so": elfLib(),
		"/opt/microsoft/ndv5-topo.xml":                  "<system/>",
		"/etc/nccl.conf":                                "NCCL_TOPO_FILE=/opt/microsoft/ndv5-topo.xml\nNCCL_DEBUG=WARN\n",
	} {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		must(t, os.WriteFile(filepath.Join(root, p), []byte(data), 0o644))
	}
	return root, config.DefaultNCCLPlugins()
}

func TestNCCLPluginsDecision(t *testing.T) {
	host, cfg := gibHostRoot(t)
	log, buf := testLog()
	t.Run("an image without plugins", func(t *testing.T) {
		d, err := NCCLPlugins(newBundle(t).load(t), cfg, model.Roots{Host: host}, nil, log)
		must(t, err)
		files := []string{"/home/kubernetes/bin/gib/libnccl-net-gib.so", "/home/kubernetes/bin/gib/libnccl-tuner-gib.so", "/opt/microsoft/ndv5-topo.xml"}
		if !reflect.DeepEqual(d.Dirs, []string{"/home/kubernetes/bin/gib"}) || !reflect.DeepEqual(d.Files, files) {
			t.Errorf("got %+v", d)
		}
		lends := pluginLends(d, host)
		if len(lends) != 3 || lends[0].Dir || lends[0].HostPath != filepath.Join(host, files[0]) || lends[0].Path != files[0] {
			t.Errorf("lends %+v", lends)
		}
		var names []string
		for _, v := range pluginVars(d) {
			names = append(names, v.Name+"="+v.Value)
		}
		if strings.Join(names, " ") != "NCCL_NET_PLUGIN=gib NCCL_TUNER_PLUGIN=gib NCCL_TOPO_FILE=/opt/microsoft/ndv5-topo.xml" {
			t.Errorf("vars %q", names)
		}
	})
	t.Run("an image with its own plugin", func(t *testing.T) {
		b := newBundle(t)
		b.write(t, "/usr/lib64/libnccl-net-mine.so", elfLib())
		d, err := NCCLPlugins(b.load(t), cfg, model.Roots{Host: host}, nil, log)
		must(t, err)
		if len(d.Dirs) != 0 || len(d.Files) != 1 || !strings.Contains(d.Reason, "/usr/lib64/libnccl-net-mine.so") {
			t.Errorf("got %+v", d)
		}
	})
	t.Run("opted out by annotation", func(t *testing.T) {
		b := newBundle(t)
		b.Spec.Annotations = map[string]string{"rdma.example.com/nccl-plugins": "none"}
		b.save(t)
		d, err := NCCLPlugins(b.load(t), cfg, model.Roots{Host: host}, nil, log)
		must(t, err)
		if len(d.Dirs)+len(d.Files)+len(d.Vars) != 0 {
			t.Errorf("got %+v", d)
		}
	})
	// A DRA claim's ncclPlugins: none arrives as its CDI device's
	// variable and wins over the pod's annotation auto.
	t.Run("opted out by a claim config over the annotation", func(t *testing.T) {
		b := newBundle(t)
		b.Spec.Annotations = map[string]string{"rdma.example.com/nccl-plugins": "auto"}
		b.Spec.Process.Env = append(b.Spec.Process.Env, "RDMA_CDI_CLAIM_NCCL_PLUGINS=none")
		b.save(t)
		log, buf := testLog()
		d, err := NCCLPlugins(b.load(t), cfg, model.Roots{Host: host}, nil, log)
		must(t, err)
		if len(d.Dirs)+len(d.Files)+len(d.Vars) != 0 || !strings.Contains(buf.String(), "NCCL plugins none (DRA claim config ncclPlugins (RDMA_CDI_CLAIM_NCCL_PLUGINS))") {
			t.Errorf("got %+v, want nothing with the claim named\n%s", d, buf)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		off := cfg
		off.Enabled = false
		d, err := NCCLPlugins(newBundle(t).load(t), off, model.Roots{Host: host}, nil, log)
		must(t, err)
		if len(d.Dirs)+len(d.Files)+len(d.Vars) != 0 {
			t.Errorf("got %+v", d)
		}
	})
	if !strings.Contains(buf.String(), "the image has no NCCL plugin its linker finds") {
		t.Errorf("log lacks the reason:\n%s", buf)
	}
}

// The nccl-conf step writes the decision's variables after its own, and
// the site's tunables win over them.
func TestNCCLConfWithPlugins(t *testing.T) {
	b := ncclBundle(t, uverbs(1))
	c := loadIn(t, b, startInNetNS(t, b.Rootfs, "10.1.0.6/24"))
	opts := ncclOpts(t)
	opts.NCCL.Tunables = map[string]string{"NCCL_TUNER_PLUGIN": "none"}
	opts.Plugins = func() (userspace.PluginsDecision, error) {
		host, cfg := gibHostRoot(t)
		log, _ := testLog()
		return NCCLPlugins(c, cfg, model.Roots{Host: host}, nil, log)
	}
	log, buf := testLog()
	must(t, WriteNCCLConf(c, opts, log))
	got, err := os.ReadFile(filepath.Join(b.Rootfs, "etc/nccl.conf"))
	must(t, err)
	for _, want := range []string{"NCCL_IB_HCA=mlx5_1:1\n", "NCCL_NET_PLUGIN=gib\n", "NCCL_TOPO_FILE=/opt/microsoft/ndv5-topo.xml\n", "NCCL_TUNER_PLUGIN=none\n"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("nccl.conf lacks %q:\n%s\nlog: %s", want, got, buf)
		}
	}
	if strings.Contains(string(got), "NCCL_TUNER_PLUGIN=gib") {
		t.Errorf("the site's tunable lost to the plugin:\n%s", got)
	}
}

// dirMountPoint makes the lent directory's mount point, and never covers
// an image's own directory with something in it.
func TestDirMountPoint(t *testing.T) {
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "opt/empty"), 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "opt/full"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "opt/full/own"), nil, 0o644))
	r, err := OpenRoot(dir)
	must(t, err)
	defer r.Close()
	for _, tc := range []struct {
		path string
		want bool
	}{{"/home/kubernetes/bin/gib", true}, {"/opt/empty", true}, {"/opt/full", false}} {
		h, err := r.dirMountPoint(tc.path, false)
		must(t, err)
		if (h != nil) != tc.want {
			t.Errorf("%s: handle %v, want one: %v", tc.path, h, tc.want)
		}
		if h != nil {
			h.Close()
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "home/kubernetes/bin/gib")); err != nil || !fi.IsDir() {
		t.Errorf("mount point: %v %v", fi, err)
	}
}
