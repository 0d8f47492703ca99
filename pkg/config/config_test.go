package config

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadFileOverDefaults(t *testing.T) {
	path := writeConfig(t, `
[nccl]
exclude_hcas = ["mlx5_0"]
addr_range = "10.0.0.0/8"
[nccl.tunables]
NCCL_IB_TIMEOUT = "22"
[cdi]
vendor = "example.org"
[watch]
rescan_interval = "15s"
`)
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NCCL.ExcludeHCAs[0] != "mlx5_0" || cfg.NCCL.Tunables["NCCL_IB_TIMEOUT"] != "22" || cfg.CDI.Vendor != "example.org" {
		t.Fatalf("file not applied: %+v", cfg)
	}
	if cfg.CDI.Class != "hca" || !cfg.NCCL.ExcludeDefaultRouteHCA || cfg.NCCL.RoCEVersion != 2 {
		t.Fatalf("defaults lost: %+v", cfg)
	}
	if cfg.Watch.RescanInterval.Duration != 15*time.Second {
		t.Fatalf("duration = %v", cfg.Watch.RescanInterval)
	}
}

func TestLoadErrorsNameTheProblem(t *testing.T) {
	cases := map[string]string{
		"[nccl]\nexclude_hca = [\"x\"]\n":        "unknown key nccl.exclude_hca",
		"[nccl]\naddr_family = \"AF_UNIX\"\n":    `nccl.addr_family "AF_UNIX"`,
		"[nccl]\naddr_range = \"10.0.0.0\"\n":    "nccl.addr_range",
		"[nccl]\nroce_version = 3\n":             "nccl.roce_version 3",
		"[nccl.tunables]\nIB_TIMEOUT = \"1\"\n":  `"IB_TIMEOUT"`,
		"[hooks]\nmemlock = \"lots\"\n":          "hooks.memlock",
		"[nccl\n":                                "line 1",
		"[watch]\nrescan_interval = \"often\"\n": "often",
		"[metrics]\nauth = \"tls\"\n":            `metrics.auth "tls"`,
	}
	for body, want := range cases {
		_, err := Load(writeConfig(t, body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", body, err, want)
		}
	}
	// A missing file, named or not, is the defaults: a container that asked
	// for nothing must still start.
	if cfg, err := Load(filepath.Join(t.TempDir(), "absent.toml")); err != nil || !reflect.DeepEqual(cfg, Default()) {
		t.Errorf("a missing file: %+v, %v; want the defaults", cfg, err)
	}
}

// At container starts a newer config warns, a broken one gives the
// defaults and the error (for the caller to use only for RDMA requests).
func TestLoadForContainers(t *testing.T) {
	newer := writeConfig(t, "[cdi]\nvendor = \"site.example.com\"\nfuture_key = 1\nclass = \"nic\"\n[future_table]\nx = 2\n[hooks]\nmemlock = \"64G\"\n")
	cfg, warnings, err := LoadForContainers(newer)
	// Known keys before and after the unknown ones apply.
	if err != nil || cfg.CDI.Vendor != "site.example.com" || cfg.CDI.Class != "nic" || cfg.Hooks.Memlock != 64<<30 {
		t.Fatalf("newer config: %+v %+v, %v; want the known keys applied", cfg.CDI, cfg.Hooks, err)
	}
	if _, err := Load(newer); err == nil || !strings.Contains(err.Error(), "unknown key cdi.future_key") || !strings.Contains(err.Error(), newer) {
		t.Errorf("Load (commands) of a newer config: %v, want the unknown keys as an error naming the file", err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "cdi.future_key") || !strings.Contains(warnings[0], "future_table") || !strings.Contains(warnings[0], newer) {
		t.Errorf("warnings %q: want one naming the file and both unknown keys", warnings)
	}
	for body, want := range map[string]string{
		"[cdi\nvendor = 1\n":                     "line 1",
		"[hooks]\nmemlock = \"lots\"\n":          "hooks.memlock",
		"[hooks]\nmemlock = \"lots\"\nnew = 1\n": "hooks.memlock",
	} {
		path := writeConfig(t, body)
		cfg, _, err := LoadForContainers(path)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%q: got %v, want an error naming %s and %q", body, err, path, want)
		}
		if !reflect.DeepEqual(cfg, Default()) {
			t.Errorf("%q: want the defaults with the error, got %+v", body, cfg)
		}
	}
	// A file that parsed keeps its runtime.path: the wrapper's delete and
	// kill must reach the runtime that created the containers.
	badValue := writeConfig(t, "[runtime]\npath = \"/opt/crun\"\nlog_file = \"/elsewhere.log\"\n[nccl]\nroce_version = 7\n")
	cfg, _, err = LoadForContainers(badValue)
	want := Default()
	want.Runtime.Path = "/opt/crun"
	if err == nil || !reflect.DeepEqual(cfg, want) {
		t.Errorf("a bad value: %+v, %v; want the defaults with the file's runtime.path, and the error", cfg, err)
	}
	if cfg, warnings, err := LoadForContainers(filepath.Join(t.TempDir(), "absent.toml")); err != nil || len(warnings) != 0 || !reflect.DeepEqual(cfg, Default()) {
		t.Errorf("missing file: %+v %q %v", cfg, warnings, err)
	}
}

func TestFlagsOverrideFile(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse([]string{"--vendor", "flag.example", "--nccl-tunable", "NCCL_IB_TC=160",
		"--nccl-exclude-hcas", "mlx5_0,mlx5_9", "--nccl-exclude-default-route-hca=false", "--debounce", "2s",
		"--metrics-auth", "kubernetes"}); err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.NCCL.Tunables = map[string]string{"NCCL_IB_TIMEOUT": "22"}
	cfg.CDI.Class = "from-file"
	if err := ApplyFlags(fs, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.CDI.Vendor != "flag.example" || cfg.CDI.Class != "from-file" {
		t.Fatalf("vendor/class: %+v", cfg.CDI)
	}
	if cfg.NCCL.Tunables["NCCL_IB_TC"] != "160" || cfg.NCCL.Tunables["NCCL_IB_TIMEOUT"] != "22" {
		t.Fatalf("tunables = %v", cfg.NCCL.Tunables)
	}
	if len(cfg.NCCL.ExcludeHCAs) != 2 || cfg.NCCL.ExcludeDefaultRouteHCA || cfg.Watch.Debounce.Duration != 2*time.Second ||
		cfg.Metrics.Auth != MetricsAuthKubernetes {
		t.Fatalf("flags not applied: %+v", cfg)
	}
	fs = pflag.NewFlagSet("t", pflag.ContinueOnError)
	RegisterFlags(fs)
	_ = fs.Parse([]string{"--nccl-tunable", "novalue"})
	if err := ApplyFlags(fs, &cfg); err == nil || !strings.Contains(err.Error(), "--nccl-tunable") {
		t.Fatalf("want an error naming the flag, got %v", err)
	}
}

func TestParseMemlock(t *testing.T) {
	cases := map[string]uint64{"unlimited": Unlimited, "-1": Unlimited, "65536": 65536, "64K": 64 << 10, "8MiB": 8 << 20, "2g": 2 << 30}
	for in, want := range cases {
		if got, err := ParseMemlock(in); err != nil || got != want {
			t.Errorf("%s: got %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "1.5G", "99999999999999999999T"} {
		if _, err := ParseMemlock(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

// The runtime wrapper's switches for Kubernetes containers' own requests:
// off unless set, booleans only, flags as well.
func TestKubernetesRequestSwitches(t *testing.T) {
	if d := Default().Runtime; d.KubernetesAcceptEnv || d.KubernetesAcceptAnnotations {
		t.Fatalf("defaults accept a Kubernetes container's own request: %+v", d)
	}
	cfg, err := Load(writeConfig(t, "[runtime]\nkubernetes_accept_env = true\nkubernetes_accept_annotations = true\n"))
	if err != nil || !cfg.Runtime.KubernetesAcceptEnv || !cfg.Runtime.KubernetesAcceptAnnotations {
		t.Fatalf("file: %+v, %v", cfg.Runtime, err)
	}
	for body, want := range map[string]string{
		"[runtime]\nkubernetes_accept_env = \"yes\"\n":      "KubernetesAcceptEnv of type bool",
		"[runtime]\nkubernetes_accept_annotations = 1\n":    "KubernetesAcceptAnnotations of type bool",
		"[runtime]\nkubernetes_accept_annotations = \"\"\n": "KubernetesAcceptAnnotations of type bool",
	} {
		// A string or number is refused, not read as true: the file's line and the key's field are named.
		if _, err := Load(writeConfig(t, body)); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: got %v, want an error at line 2 naming %s", body, err, want)
		}
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse([]string{"--runtime-kubernetes-accept-annotations"}); err != nil {
		t.Fatal(err)
	}
	cfg = Default()
	if err := ApplyFlags(fs, &cfg); err != nil || cfg.Runtime.KubernetesAcceptEnv || !cfg.Runtime.KubernetesAcceptAnnotations {
		t.Fatalf("flags: %+v, %v", cfg.Runtime, err)
	}
}

// The cluster's pools: a TOML array (what the chart writes) or the flag's
// comma-separated list; a block size of either form; each checked against
// the others and the static ranges at load.
func TestPodNetworkPools(t *testing.T) {
	cfg, err := Load(writeConfig(t, "[pod_network]\npools = [\"10.0.61.0/24\", \"fd00::/120\"]\nblock_size = \"8\"\nreclaim_after = \"2h\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := cfg.PodNetwork.Pools.MarshalText(); string(got) != "10.0.61.0/24,fd00::/120" || cfg.PodNetwork.BlockSize.String() != "8" ||
		cfg.PodNetwork.ReclaimAfter.Duration != 2*time.Hour {
		t.Fatalf("pools %s, block size %s, reclaim after %v", got, cfg.PodNetwork.BlockSize, cfg.PodNetwork.ReclaimAfter)
	}
	for body, want := range map[string]string{
		"[pod_network]\npools = [\"10.0.61.0/24\", \"10.0.61.128/25\"]\n":                   "pod_network.pools: pool 10.0.61.128/25 overlaps pool 10.0.61.0/24",
		"[pod_network]\npools = [\"10.0.61.0/24\"]\nranges = {eth1 = \"10.0.61.200/29\"}\n": "overlaps eth1's static range 10.0.61.201-10.0.61.206",
		"[pod_network]\npools = [\"10.0.61.0/28\"]\nblock_size = \"/27\"\n":                 "block size /27 is larger than pool 10.0.61.0/28",
		"[pod_network]\npools = [\"10.0.61/24\"]\n":                                         `pool "10.0.61/24"`,
		"[pod_network]\nblock_size = \"sixteen\"\n":                                         "sixteen",
		"[pod_network]\nreclaim_after = \"10s\"\n":                                          "pod_network.reclaim_after 10s: want at least 1m0s",
	} {
		if _, err := Load(writeConfig(t, body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", body, err, want)
		}
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse([]string{"--pod-network-pools", "10.0.61.0/24,10.0.62.0/24", "--pod-network-block-size", "/28", "--pod-network-reclaim-after", "30m"}); err != nil {
		t.Fatal(err)
	}
	cfg = Default()
	if err := ApplyFlags(fs, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.PodNetwork.Pools) != 2 || cfg.PodNetwork.Pools[1].String() != "10.0.62.0/24" || cfg.PodNetwork.BlockSize.String() != "/28" ||
		cfg.PodNetwork.ReclaimAfter.Duration != 30*time.Minute {
		t.Fatalf("flags: %+v", cfg.PodNetwork)
	}
}

// [[pod_network.ipam]]: a subnet and a plugin configuration each, as the
// chart writes them; overlaps with pools, ranges or each other refused.
func TestPodNetworkIPAM(t *testing.T) {
	const whereabouts = `config = '{"type":"whereabouts","range":"10.0.61.128/25"}'` + "\n"
	cfg, err := Load(writeConfig(t, "[pod_network]\npools = [\"10.0.62.0/24\"]\n[[pod_network.ipam]]\nsubnet = \"10.0.61.7/24\"\n"+whereabouts))
	if err != nil {
		t.Fatal(err)
	}
	plugins := cfg.PodNetwork.Plugins()
	if len(plugins) != 1 || plugins[0].Subnet.String() != "10.0.61.0/24" || string(plugins[0].Config) != `{"type":"whereabouts","range":"10.0.61.128/25"}` ||
		!slices.Equal(cfg.PodNetwork.CNIBinDirs, []string{"/opt/cni/bin"}) {
		t.Fatalf("plugins %+v, bin dirs %v", plugins, cfg.PodNetwork.CNIBinDirs)
	}
	for body, want := range map[string]string{
		"[pod_network]\npools = [\"10.0.61.0/25\"]\n[[pod_network.ipam]]\nsubnet = \"10.0.61.0/24\"\n" + whereabouts:                         "pod_network.ipam[0]: subnet 10.0.61.0/24 overlaps 10.0.61.0-10.0.61.127 of pod_network's pools or ranges",
		"[pod_network]\nranges = {eth1 = \"10.0.0.0/8\"}\n[[pod_network.ipam]]\nsubnet = \"10.0.61.0/24\"\n" + whereabouts:                   "overlaps 10.0.0.1-10.255.255.254",
		"[[pod_network.ipam]]\nsubnet = \"10.0.61.0/24\"\n" + whereabouts + "[[pod_network.ipam]]\nsubnet = \"10.0.0.0/16\"\n" + whereabouts: "pod_network.ipam[1]: subnet 10.0.0.0/16 overlaps 10.0.61.0/24",
		"[[pod_network.ipam]]\nsubnet = \"10.0.61/24\"\n" + whereabouts:                                                                      `pod_network.ipam[0]: subnet "10.0.61/24"`,
		"[[pod_network.ipam]]\nsubnet = \"10.0.61.0/24\"\nconfig = '{\"type\":\"/bin/sh\"}'\n":                                               "pod_network.ipam[0]: IPAM config of 10.0.61.0/24: \"type\" \"/bin/sh\": want the name of a plugin binary",
		"[pod_network]\ncni_bin_dirs = [\"cni\"]\n":                                                                                          `pod_network.cni_bin_dirs "cni": want an absolute path`,
	} {
		if _, err := Load(writeConfig(t, body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", body, err, want)
		}
	}
}
