package config

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// [health]: safe defaults, the file and flags over them, and every bad
// value refused with its key named; a threshold of 1 (a single event
// tainting) among them.
func TestHealthSection(t *testing.T) {
	d := Default().Health
	if !d.Enabled || d.Interval.Duration != 10*time.Second || d.FlapThreshold < 2 || d.ErrorThreshold < 2 || d.SymbolErrorThreshold < 2 ||
		d.QuietPeriod.Duration <= 0 || d.FlapWindow.Duration < d.Interval.Duration || d.ErrorWindow.Duration < d.Interval.Duration {
		t.Fatalf("defaults %+v", d)
	}
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(writeConfig(t, `[health]
interval = "1s"
flap_window = "20s"
flap_threshold = 2
quiet_period = "5s"
[health.expected_rate_gbps]
MT4129 = "400"
mlx5_3 = "200.5"
`))
	if err != nil || cfg.Health.Interval.Duration != time.Second || cfg.Health.FlapThreshold != 2 || cfg.Health.ErrorThreshold != 25 {
		t.Fatalf("file: %+v, %v", cfg.Health, err)
	}
	if r := cfg.Health.ExpectedRatesGbps(); r["MT4129"] != 400 || r["mlx5_3"] != 200.5 {
		t.Fatalf("rates %v", r)
	}
	for body, want := range map[string]string{
		"[health]\nflap_threshold = 1\n":                   "health.flap_threshold 1: want 2 or more",
		"[health]\nerror_threshold = 0\n":                  "health.error_threshold 0",
		"[health]\nsymbol_error_threshold = 1\n":           "health.symbol_error_threshold 1",
		"[health]\ninterval = \"10ms\"\n":                  "health.interval 10ms",
		"[health]\nerror_window = \"5s\"\n":                "health.error_window 5s: want at least health.interval (10s)",
		"[health]\nquiet_period = \"-1s\"\n":               "health.quiet_period -1s",
		"[health.expected_rate_gbps]\nMT4129 = \"fast\"\n": `health.expected_rate_gbps MT4129="fast"`,
		"[health.expected_rate_gbps]\nMT4129 = \"-100\"\n": `health.expected_rate_gbps MT4129="-100"`,
		"[health]\nflap_treshold = 3\n":                    "unknown key health.flap_treshold",
		"[health]\nenabled = \"yes\"\n":                    "Enabled of type bool",
	} {
		if _, err := Load(writeConfig(t, body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", body, err, want)
		}
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse([]string{"--health-interval=2s", "--health-error-threshold=4", "--health-expected-rate=mlx5_1=100", "--health-grey=false"}); err != nil {
		t.Fatal(err)
	}
	cfg = Default()
	if err := ApplyFlags(fs, &cfg); err != nil || cfg.Health.Interval.Duration != 2*time.Second || cfg.Health.ErrorThreshold != 4 ||
		cfg.Health.ExpectedRates["mlx5_1"] != "100" || cfg.Health.Enabled {
		t.Fatalf("flags: %+v, %v", cfg.Health, err)
	}
}
