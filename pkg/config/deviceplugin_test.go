package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestDevicePluginResourcesFromTheFile(t *testing.T) {
	cfg, err := Load(writeConfig(t, `
[device_plugin]
allocation = "annotations"
[[device_plugin.resources]]
name = "rdma/hca"
max_pods = 64
[[device_plugin.resources]]
name = "rdma.example.com/roce"
mode = "exclusive"
link_layers = ["Ethernet"]
exclude_hcas = ["mlx5_0"]
pci_vendors = ["0x15b3"]
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Resource{
		{Name: "rdma/hca", Mode: ModeShared, MaxPods: 64},
		{Name: "rdma.example.com/roce", Mode: ModeExclusive, LinkLayers: []string{"Ethernet"}, ExcludeHCAs: []string{"mlx5_0"}, PCIVendors: []string{"0x15b3"}},
	}
	if got := cfg.DevicePlugin.ServedResources(); !reflect.DeepEqual(got, want) {
		t.Errorf("resources:\n got %+v\nwant %+v", got, want)
	}
	if cfg.DevicePlugin.Allocation != AllocationAnnotations {
		t.Errorf("allocation %q", cfg.DevicePlugin.Allocation)
	}
	if got := Default().DevicePlugin.ServedResources(); !reflect.DeepEqual(got, []Resource{DefaultResource()}) {
		t.Errorf("no resources configured: %+v, want the shared rdma/hca", got)
	}
}

func TestDevicePluginErrorsNameTheResource(t *testing.T) {
	cases := map[string]string{
		"[device_plugin]\nallocation = \"cdi\"\n":                                                              `device_plugin.allocation "cdi"`,
		"[[device_plugin.resources]]\nname = \"hca\"\n":                                                        `resources[0] (hca): name "hca"`,
		"[[device_plugin.resources]]\nname = \"kubernetes.io/hca\"\n":                                          "reserved",
		"[[device_plugin.resources]]\nname = \"rdma/hca\"\n[[device_plugin.resources]]\nname = \"rdma/hca\"\n": "resources[1] (rdma/hca): a second resource",
		"[[device_plugin.resources]]\nname = \"rdma/hca\"\nmode = \"pool\"\n":                                  `mode "pool"`,
		"[[device_plugin.resources]]\nname = \"rdma/hca\"\nmode = \"exclusive\"\nmax_pods = 4\n":               "max_pods applies to shared",
		"[[device_plugin.resources]]\nname = \"rdma/hca\"\nmax_pods = -1\n":                                    "max_pods -1",
		"[[device_plugin.resources]]\nname = \"rdma/hca\"\nlink_layers = [\"RoCE\"]\n":                         `link_layers "RoCE"`,
		"[[device_plugin.resources]]\nname = \"rdma/hca\"\npci_devices = [\"101d0\"]\n":                        `PCI ID "101d0"`,
		"[[device_plugin.resources]]\nname = \"rdma/hca\"\nselector = 1\n":                                     "unknown key",
	}
	for body, want := range cases {
		_, err := Load(writeConfig(t, body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", body, err, want)
		}
	}
}

// The kubelet's limits: a DNS-subdomain domain of at most 253 characters,
// a name part of at most 63.
func TestExtendedResourceNameLengths(t *testing.T) {
	label := strings.Repeat("a", 63)
	domain253 := strings.Join([]string{label, label, label, strings.Repeat("b", 61)}, ".")
	for name, want := range map[string]bool{
		"rdma/hca":                        true,
		"rdma.example.com/hca_x-1.2":      true,
		domain253 + "/hca":                true,
		domain253 + "c/hca":               false,
		"rdma/" + strings.Repeat("h", 63): true,
		"rdma/" + strings.Repeat("h", 64): false,
		"rdma/-hca":                       false,
		"Rdma/hca":                        false,
		"rdma/hca/x":                      false,
		"rdma":                            false,
	} {
		if got := isExtendedResourceName(name); got != want {
			t.Errorf("isExtendedResourceName(%q) = %v, want %v", name, got, want)
		}
	}
}
