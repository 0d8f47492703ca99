package node

// End-to-end test of the host's NCCL plugins and topology file, lent per
// container: an image without plugins gets the plugin dir (in its linker
// cache), the topology file and their nccl.conf lines; a container that
// opts out gets none of it.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

func TestNCCLPluginsPodman(t *testing.T) {
	host := t.TempDir()
	pluginDir := filepath.Join(host, "gib")
	topo := filepath.Join(host, "ndv5-topo.xml")
	conf := filepath.Join(host, "nccl.conf")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(host, 0o755))
	// A stub net plugin (e2e.StubLibrary: ldconfig caches it by name).
	// Beside it, as gIB ships it, the NCCL it was built with: never lent,
	// or it would replace the image's own NCCL in the linker cache.
	for _, lib := range []string{"libnccl-net-stub.so", "libnccl.so.2"} {
		e2e.StubLibrary(t, pluginDir, lib)
	}
	must(os.WriteFile(topo, []byte("<system version=\"1\"/>\n"), 0o644))
	must(os.WriteFile(conf, []byte("NCCL_TOPO_FILE="+topo+"\nNCCL_DEBUG=INFO\n"), 0o644))

	s := e2e.SharedFixtureNode(t, "seed002").GenerateSpec(t, e2e.SpecOptions{Flags: []string{
		"--nccl-plugin-dirs=" + pluginDir, "--nccl-plugins-host-conf=" + conf,
	}})
	p := e2e.Podman(t)
	p.Import(t, e2e.Glibc)
	probe := "ls " + pluginDir + "; cat " + topo + "; cat /etc/nccl.conf; ldconfig -p | grep libnccl; true"
	run := func(t *testing.T, args ...string) string {
		t.Helper()
		return mustPodman(t, p, append(append([]string{"--device", s.Device("all")}, args...), e2e.Glibc.Ref, "sh", "-c", probe)...)
	}

	t.Run("an image without plugins gets the host's", func(t *testing.T) {
		got := run(t)
		t.Logf("in the container:\n%s", got)
		for _, want := range []string{
			"libnccl-net-stub.so\n",                    // the plugin, lent
			"<system version=\"1\"/>",                  // the topology file
			"NCCL_NET_PLUGIN=stub\n",                   // nccl.conf names the plugin
			"NCCL_TOPO_FILE=" + topo + "\n",            // and carries the host's key
			"=> " + pluginDir + "/libnccl-net-stub.so", // the linker cache lists it
		} {
			if !strings.Contains(got, want) {
				t.Errorf("container lacks %q:\n%s\nhook log:\n%s", want, got, readFile(t, s.Node.HookLog))
			}
		}
		if strings.Contains(got, "NCCL_DEBUG") {
			t.Errorf("a key not in carry_keys was carried:\n%s", got)
		}
		if strings.Contains(got, "libnccl.so.2") {
			t.Errorf("the host's own NCCL reached the container:\n%s", got)
		}
	})
	t.Run("an opt-out gets none of it", func(t *testing.T) {
		got := run(t, "--annotation", apis.AnnotationNCCLPlugins+"=none")
		for _, unwanted := range []string{"libnccl-net-stub.so", "<system", "NCCL_NET_PLUGIN", "NCCL_TOPO_FILE"} {
			if strings.Contains(got, unwanted) {
				t.Errorf("opted-out container has %q:\n%s", unwanted, got)
			}
		}
		if !strings.Contains(readFile(t, s.Node.HookLog), "NCCL plugins none (annotation "+apis.AnnotationNCCLPlugins+")") {
			t.Errorf("the hook log does not give the opt-out's reason:\n%s", readFile(t, s.Node.HookLog))
		}
	})
}

// On the aws-p5 fixture node, a container given an EFA device gets the
// host's aws-ofi-nccl with the libfabric it links against (stub ELF
// libraries), in its linker cache, and libfabric's EFA lines in its
// nccl.conf with GPUDirect RDMA (the fixture's EFAs have RDMA read); one
// that opts out gets none of it, nor does an image with a libfabric of its
// own (which the plugin would have to match).
func TestEFALibfabricPodman(t *testing.T) {
	pluginDir, fabricDir := e2e.StubEFAInstall(t)
	s := e2e.SharedFixtureNode(t, "aws-p5").GenerateSpec(t, e2e.SpecOptions{Flags: []string{
		"--nccl-plugin-dirs=" + pluginDir, "--nccl-plugins-libfabric-dirs=" + fabricDir,
	}})
	p := e2e.Podman(t)
	p.Import(t, e2e.Glibc)
	probe := "ls " + pluginDir + " " + fabricDir + "; cat /etc/nccl.conf; ldconfig -p | grep -E 'libfabric|libnccl'; true"
	run := func(t *testing.T, args ...string) string {
		t.Helper()
		return mustPodman(t, p, append(append([]string{"--device", s.Device("rdmap79s0")}, args...), e2e.Glibc.Ref, "sh", "-c", probe)...)
	}

	t.Run("an image with neither gets both", func(t *testing.T) {
		got := run(t)
		t.Logf("in the container:\n%s", got)
		for _, want := range []string{
			"NCCL_NET_PLUGIN=ofi\n",
			"FI_PROVIDER=efa\n",
			"FI_EFA_USE_DEVICE_RDMA=1\n",
			"=> " + pluginDir + "/libnccl-net-ofi.so",
			"=> " + fabricDir + "/libfabric.so.1",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("container lacks %q:\n%s\nhook log:\n%s", want, got, readFile(t, s.Node.HookLog))
			}
		}
		if strings.Contains(got, "NCCL_IB_") {
			t.Errorf("an EFA container got NCCL_IB_*:\n%s", got)
		}
	})
	t.Run("an opt-out gets none of it", func(t *testing.T) {
		got := run(t, "--annotation", apis.AnnotationNCCLPlugins+"=none")
		for _, unwanted := range []string{"libnccl-net-ofi.so", "libfabric.so.1", "FI_PROVIDER", "NCCL_NET_PLUGIN"} {
			if strings.Contains(got, unwanted) {
				t.Errorf("opted-out container has %q:\n%s", unwanted, got)
			}
		}
	})
	t.Run("an image with its own libfabric is left alone", func(t *testing.T) {
		own := e2e.StubLibrary(t, t.TempDir(), "libfabric.so.1")
		name, ref := e2e.UniqueID("ownfabric-"), "localhost/rdma-cdi-ownfabric:"+e2e.UniqueID("t")
		for _, args := range [][]string{
			{"create", "--name", name, e2e.Glibc.Ref, "true"},
			{"cp", own, name + ":/usr/lib/x86_64-linux-gnu/libfabric.so.1"},
			{"commit", "-q", name, ref},
			{"rm", name},
		} {
			if out, err := p.Command(args...).CombinedOutput(); err != nil {
				t.Fatalf("podman %v: %v\n%s", args, err, out)
			}
		}
		t.Cleanup(func() { _ = p.Command("rmi", ref).Run() })
		got := mustPodman(t, p, "--device", s.Device("rdmap79s0"), ref, "sh", "-c", probe)
		for _, unwanted := range []string{"libnccl-net-ofi.so", fabricDir, "FI_PROVIDER", "NCCL_NET_PLUGIN"} {
			if strings.Contains(got, unwanted) {
				t.Errorf("an image with its own libfabric got %q:\n%s", unwanted, got)
			}
		}
		// Debian's /lib is /usr/lib: the probe finds it there first.
		if !regexp.MustCompile(`the image carries libfabric at (/usr)?/lib/x86_64-linux-gnu/libfabric.so.1`).MatchString(readFile(t, s.Node.HookLog)) {
			t.Errorf("the hook log does not give the reason:\n%s", readFile(t, s.Node.HookLog))
		}
	})
}
