package hooks

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/userspace"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// TestNCCLPluginsOnCloudFixtures: with the default nccl_plugins config, a
// container whose image has no NCCL plugin is lent what each cloud node
// offers under its host root: the gIB plugins on GCP A3 Ultra, the
// topology file the host's nccl.conf names on Azure ND H100 v5, and
// nothing on a node that offers neither. A container without EFA devices
// gets nothing of AWS's aws-ofi-nccl, which needs libfabric, nor
// libfabric (TestEFAOnAWSP5 has those that get EFA devices), and the log
// says why.
func TestNCCLPluginsOnCloudFixtures(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		dirs    []string
		files   []string
		vars    string
	}{
		// gIB's own libnccl.so.2 stays on the host.
		{"gcp-a3-ultra", []string{"/home/kubernetes/bin/gib"}, []string{"/home/kubernetes/bin/gib/libnccl-net-gib.so", "/home/kubernetes/bin/gib/libnccl-tuner-gib.so"}, "NCCL_NET_PLUGIN=gib NCCL_TUNER_PLUGIN=gib"},
		{"azure-ndv5", nil, []string{"/opt/microsoft/ndv5-topo.xml"}, "NCCL_TOPO_FILE=/opt/microsoft/ndv5-topo.xml"},
		{"amd-pollara", nil, nil, ""},
		{"aws-p5", nil, nil, ""},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			tr := buildFixture(t, tc.fixture)
			log, buf := testLog()
			d, err := NCCLPlugins(newBundle(t).load(t), config.DefaultNCCLPlugins(), tr.roots(), nil, log)
			must(t, err)
			if !reflect.DeepEqual(d.Dirs, tc.dirs) || !reflect.DeepEqual(d.Files, tc.files) {
				t.Errorf("lent dirs %v files %v, want %v %v\n%s", d.Dirs, d.Files, tc.dirs, tc.files, buf)
			}
			got := confLines(d)
			if got != tc.vars {
				t.Errorf("nccl.conf lines %q, want %q", got, tc.vars)
			}
			// Only the keys carry_keys names leave the host's nccl.conf.
			if strings.Contains(got, "NCCL_IB_PCI_RELAXED_ORDERING") {
				t.Errorf("a key outside carry_keys was carried: %v", got)
			}
			if strings.Contains(got, "FI_") {
				t.Errorf("libfabric variables without EFA devices: %v", got)
			}
			if tc.fixture == "aws-p5" && !strings.Contains(buf.String(), "/opt/amazon/aws-ofi-nccl/lib kept back: its plugins need libfabric") {
				t.Errorf("the log does not say why aws-ofi-nccl was kept back:\n%s", buf)
			}
		})
	}
}

// fixtureTrees are a fixture's trees with the roots a hook reads them by.
type fixtureTrees struct{ fixture.Trees }

func buildFixture(t *testing.T, name string) fixtureTrees {
	return fixtureTrees{fixture.BuildBundledTrees(t, name, false)}
}

func (tr fixtureTrees) roots() model.Roots {
	return model.Roots{Sysfs: tr.Sys, Dev: tr.Dev, Host: tr.Host}
}

// giveDevices puts the named devices' uverbs nodes in the bundle's
// linux.devices, as the CDI spec's edits do.
func (tr fixtureTrees) giveDevices(t *testing.T, b *testBundle, names ...string) {
	t.Helper()
	res, err := discover.Discover(discover.Options{Roots: tr.roots(), SkipNet: true, NCCLOnly: true})
	must(t, err)
	for _, name := range names {
		d, ok := res.Node.DeviceByName(name)
		if !ok || d.Verbs == nil {
			t.Fatalf("%s: no such device with a uverbs node", name)
		}
		b.Spec.Linux.Devices = append(b.Spec.Linux.Devices, specs.LinuxDevice{Path: d.Verbs.Path, Type: "c", Major: int64(d.Verbs.Major), Minor: int64(d.Verbs.Minor)})
	}
	b.save(t)
}

// TestEFAOnAWSP5: a container given EFA devices of the p5 node gets
// aws-ofi-nccl with the host's libfabric and libfabric's EFA provider with
// GPUDirect RDMA (the p5's EFAs have RDMA read), unless its image has a
// libfabric of its own or it opts out.
func TestEFAOnAWSP5(t *testing.T) {
	tr := buildFixture(t, "aws-p5")
	efaBundle := func(t *testing.T) *testBundle {
		b := newBundle(t)
		tr.giveDevices(t, b, "rdmap79s0", "rdmap80s0")
		return b
	}
	decide := func(t *testing.T, b *testBundle) (userspace.PluginsDecision, string) {
		log, buf := testLog()
		d, err := NCCLPlugins(b.load(t), config.DefaultNCCLPlugins(), tr.roots(), nil, log)
		must(t, err)
		return d, buf.String()
	}
	t.Run("an image with neither", func(t *testing.T) {
		d, log := decide(t, efaBundle(t))
		dirs := []string{"/opt/amazon/aws-ofi-nccl/lib", "/opt/amazon/efa/lib"}
		files := []string{"/opt/amazon/aws-ofi-nccl/lib/libnccl-net-ofi.so", "/opt/amazon/aws-ofi-nccl/lib/libnccl-net.so", "/opt/amazon/efa/lib/libfabric.so.1"}
		if !reflect.DeepEqual(d.Dirs, dirs) || !reflect.DeepEqual(d.Files, files) {
			t.Errorf("lent dirs %v files %v, want %v %v\n%s", d.Dirs, d.Files, dirs, files, log)
		}
		if got := confLines(d); got != "NCCL_NET_PLUGIN=ofi FI_PROVIDER=efa FI_EFA_USE_DEVICE_RDMA=1" {
			t.Errorf("nccl.conf lines %q", got)
		}
		if !strings.Contains(log, "for 2 EFA device(s)") {
			t.Errorf("log lacks the reason:\n%s", log)
		}
	})
	t.Run("an image with its own libfabric", func(t *testing.T) {
		b := efaBundle(t)
		b.write(t, "/opt/amazon/efa/lib/libfabric.so.1", elfLib())
		d, log := decide(t, b)
		if len(d.Dirs)+len(d.Files)+len(d.Vars) != 0 || !strings.Contains(log, "the image carries libfabric at /opt/amazon/efa/lib/libfabric.so.1") {
			t.Errorf("got %+v, want nothing with the reason\n%s", d, log)
		}
	})
	t.Run("opted out by annotation", func(t *testing.T) {
		b := efaBundle(t)
		b.Spec.Annotations = map[string]string{"rdma.example.com/nccl-plugins": "none"}
		b.save(t)
		if d, log := decide(t, b); len(d.Dirs)+len(d.Files)+len(d.Vars) != 0 {
			t.Errorf("got %+v, want nothing\n%s", d, log)
		}
	})
}

// TestNCCLConfOnAWSP5: the nccl-conf step writes libfabric's lines for
// EFA devices and no NCCL_IB_* (NCCL's IB transport skips EFA ports).
func TestNCCLConfOnAWSP5(t *testing.T) {
	tr := buildFixture(t, "aws-p5")
	b := ncclBundle(t)
	tr.giveDevices(t, b, "rdmap79s0")
	c := loadIn(t, b, startInNetNS(t, b.Rootfs, "10.1.64.17/19"))
	log, buf := testLog()
	opts := NCCLConfOptions{NCCL: config.Default().NCCL, Roots: tr.roots(), Plugins: func() (userspace.PluginsDecision, error) {
		return NCCLPlugins(c, config.DefaultNCCLPlugins(), tr.roots(), nil, log)
	}}
	must(t, WriteNCCLConf(c, opts, log))
	got, err := os.ReadFile(filepath.Join(b.Rootfs, "etc/nccl.conf"))
	must(t, err)
	for _, want := range []string{"NCCL_NET_PLUGIN=ofi\n", "FI_PROVIDER=efa\n", "FI_EFA_USE_DEVICE_RDMA=1\n"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("nccl.conf lacks %q:\n%s\nlog: %s", want, got, buf)
		}
	}
	if strings.Contains(string(got), "NCCL_IB_") {
		t.Errorf("nccl.conf sets NCCL_IB_* for EFA devices:\n%s", got)
	}
}

// confLines are the decision's nccl.conf lines, space-separated.
func confLines(d userspace.PluginsDecision) string {
	var vars []string
	for _, v := range pluginVars(d) {
		vars = append(vars, v.Name+"="+v.Value)
	}
	return strings.Join(vars, " ")
}

// TestOneScanPerStartOnAWSP5: a start whose steps both read the node (the
// NCCL plugins decision looks for the container's EFA devices, which a
// host libfabric on the p5 asks; nccl-conf for its devices and GIDs)
// discovers the node once. The image brings its own libfabric, so nothing
// is lent and no linker cache is rebuilt; the decision's reason in the log
// and the nccl.conf written show that both steps read the scan.
func TestOneScanPerStartOnAWSP5(t *testing.T) {
	tr := buildFixture(t, "aws-p5")
	b := ncclBundle(t)
	tr.giveDevices(t, b, "rdmap79s0")
	b.write(t, "/opt/amazon/efa/lib/libfabric.so.1", elfLib())
	c := loadIn(t, b, startInNetNS(t, b.Rootfs, "10.1.64.17/19"))
	scans := 0
	defer func(d func(discover.Options) (discover.Result, error)) { runDiscovery = d }(runDiscovery)
	runDiscovery = func(o discover.Options) (discover.Result, error) {
		scans++
		return discover.Discover(o)
	}
	s := Settings{Config: config.Default(), Roots: tr.roots()}
	log, buf := testLog()
	must(t, s.StepsHook(UserSpaceOptions{}, []string{"user-space", "nccl-conf"})(context.Background(), c, log))
	if scans != 1 {
		t.Errorf("the node was discovered %d times in one start, want once\n%s", scans, buf)
	}
	if !strings.Contains(buf.String(), "the image carries libfabric at /opt/amazon/efa/lib/libfabric.so.1") {
		t.Errorf("the plugins decision did not find the container's EFA device:\n%s", buf)
	}
	if _, err := os.Stat(filepath.Join(b.Rootfs, "etc/nccl.conf")); err != nil {
		t.Errorf("no nccl.conf written: %v\n%s", err, buf)
	}
}
