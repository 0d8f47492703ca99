package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// efaNodeFacts are a p5-like node: two EFAs with their uverbs nodes, the
// EFA installer's rdma-core, libfabric and aws-ofi-nccl.
func efaNodeFacts() Facts {
	f := goodFacts()
	for i := range f.Node.Devices {
		d := &f.Node.Devices[i]
		d.Name, d.Driver, d.PCIVendor, d.PCIDevice = "rdmap7"+string(rune('9'-i))+"s0", "efa", model.PCIVendorAmazon, "0xefa1"
		d.Ports[0].LinkLayer = "Unknown"
	}
	f.Stack.Files = append(f.Stack.Files, model.HostFile{Path: "/usr/lib/x86_64-linux-gnu/libibverbs/libefa-rdmav34.so", Role: model.RoleProvider, Provider: "efa"})
	f.EFA = EFAFacts{
		NCCL: model.HostNCCL{
			PluginDirs: []model.NCCLPluginDir{{Path: "/opt/amazon/aws-ofi-nccl/lib", Net: []string{"libnccl-net-ofi.so"}}},
			Libfabric:  []string{"/opt/amazon/efa/lib/libfabric.so.1"},
		},
		PluginsEnabled: true,
	}
	return f
}

func TestCheckEFA(t *testing.T) {
	t.Run("a non-EFA node has no EFA line", func(t *testing.T) {
		for _, r := range Check(goodFacts()) {
			if strings.HasPrefix(r.Name, "efa-") {
				t.Errorf("%s", r)
			}
		}
	})
	t.Run("an EFA node with all it needs", func(t *testing.T) {
		results := Check(efaNodeFacts())
		for _, name := range []string{"efa-devices", "efa-memlock", "efa-provider", "efa-libfabric", "efa-nccl-plugin"} {
			if got := find(results, name); len(got) != 1 || got[0].Status != Pass {
				t.Errorf("%s: %v", name, got)
			}
		}
		if r := find(results, "efa-devices")[0]; !strings.Contains(r.Detail, "FI_EFA_USE_DEVICE_RDMA=1") {
			t.Errorf("GPUDirect not stated: %s", r)
		}
	})
	tests := []struct {
		name, check string
		mut         func(*Facts)
		status      Status
		detail, fix string
	}{
		// A fact of the hardware, nothing to fix: said, not warned.
		{"first-generation EFA", "efa-devices", func(f *Facts) { f.Node.Devices[1].PCIDevice = "0xefa0" }, Pass, "no RDMA read (first-generation EFA) on rdmap78s0 (0xefa0)", ""},
		{"a missing uverbs node", "efa-devices", func(f *Facts) { delete(f.DevNodes, "/dev/infiniband/uverbs1") }, Warn, "no uverbs node for rdmap78s0", "modprobe efa"},
		{"limited memlock", "efa-memlock", func(f *Facts) { f.WantMemlock = 64 << 20 }, Warn, "hooks.memlock is 64MiB", "unlimited"},
		{"no efa provider", "efa-provider", func(f *Facts) { f.Stack.Files = f.Stack.Files[:len(f.Stack.Files)-1] }, Warn, "no efa provider", "aws-efa-installer"},
		{"no libfabric", "efa-libfabric", func(f *Facts) { f.EFA.NCCL.Libfabric = nil }, Warn, "no libfabric.so*", "libfabric_dirs"},
		{"no aws-ofi-nccl", "efa-nccl-plugin", func(f *Facts) { f.EFA.NCCL.PluginDirs = nil }, Warn, "no aws-ofi-nccl plugin", "aws-ofi-nccl"},
		{"plugins off", "efa-nccl-plugin", func(f *Facts) { f.EFA.PluginsEnabled = false }, Warn, "never lent", "nccl_plugins.enabled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := efaNodeFacts()
			tc.mut(&f)
			got := find(Check(f), tc.check)
			if len(got) != 1 {
				t.Fatalf("%d results named %s", len(got), tc.check)
			}
			r := got[0]
			if r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) || !strings.Contains(r.Fix, tc.fix) {
				t.Errorf("got  %s\nwant %s ...%s... (fix ...%s...)", r, tc.status, tc.detail, tc.fix)
			}
		})
	}
}

// Gathered from the p5 fixture, whose host root has the EFA installer's
// libfabric and aws-ofi-nccl but no rdma-core.
func TestGatherEFA(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for mknod")
	}
	tr := fixture.BuildBundledTrees(t, "aws-p5", true)
	look, run := fakeEngines(nil)
	f := Gather(context.Background(), Options{Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev, Host: tr.Host}, ProcRoot: tr.Proc,
		Config: config.Default(), SpecPath: filepath.Join(t.TempDir(), "none.yaml"), LookPath: look, Run: run})
	results := Check(f)
	for name, want := range map[string]Status{"efa-devices": Pass, "efa-memlock": Pass, "efa-provider": Warn, "efa-libfabric": Pass, "efa-nccl-plugin": Pass} {
		if got := find(results, name); len(got) != 1 || got[0].Status != want {
			t.Errorf("%s: got %v, want %s", name, got, want)
		}
	}
	if r := find(results, "efa-libfabric"); len(r) == 1 && !strings.Contains(r[0].Detail, "/opt/amazon/efa/lib/libfabric.so.1") {
		t.Errorf("libfabric not named: %s", r[0])
	}
}
