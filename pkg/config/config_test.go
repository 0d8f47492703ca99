package config

import (
	"os"
	"path/filepath"
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
	cfg, err := Load(path, true)
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
	}
	for body, want := range cases {
		_, err := Load(writeConfig(t, body), true)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", body, err, want)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent.toml"), true); err == nil {
		t.Error("an explicitly named missing file must fail")
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent.toml"), false); err != nil {
		t.Errorf("a missing default file is fine, got %v", err)
	}
}

func TestFlagsOverrideFile(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse([]string{"--vendor", "flag.example", "--nccl-tunable", "NCCL_IB_TC=160",
		"--nccl-exclude-hcas", "mlx5_0,mlx5_9", "--nccl-exclude-default-route-hca=false", "--debounce", "2s"}); err != nil {
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
	if len(cfg.NCCL.ExcludeHCAs) != 2 || cfg.NCCL.ExcludeDefaultRouteHCA || cfg.Watch.Debounce.Duration != 2*time.Second {
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
