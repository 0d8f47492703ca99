package config

import (
	"fmt"
	"strconv"
	"time"
)

// Health steers grey health: the conditions the device-plugin and
// dra-driver agents read from each port's counters, rate and PCIe link
// (pkg/health's Tracker), beside the binary rule (a port not ACTIVE, a
// missing node). Flaps and error bursts make an HCA Unhealthy; a link or
// PCIe slot below what it should train at makes it Degraded.
type Health struct {
	Enabled  bool     `toml:"enabled" flag:"health-grey" help:"read every port's error counters, rate and PCIe link each interval and turn flaps, error bursts and degraded links into conditions (device-plugin, dra-driver); false: health is the binary rule alone"`
	Interval Duration `toml:"interval" flag:"health-interval" help:"how often the counters, rates and PCIe links are read"`
	// QuietPeriod is the hysteresis: a condition clears only once its
	// trigger has been false this long.
	QuietPeriod   Duration `toml:"quiet_period" flag:"health-quiet-period" help:"a condition clears only after its trigger has been false this long"`
	FlapWindow    Duration `toml:"flap_window" flag:"health-flap-window" help:"window in which link flaps (link_downed increments, or the port leaving ACTIVE) are counted"`
	FlapThreshold int      `toml:"flap_threshold" flag:"health-flap-threshold" help:"flaps within flap_window that make the HCA Unhealthy (LinkFlapping); at least 2"`
	ErrorWindow   Duration `toml:"error_window" flag:"health-error-window" help:"window in which each error counter's increments are summed"`
	// ErrorThreshold applies to port_rcv_errors, link_error_recovery,
	// local_link_integrity_errors and excessive_buffer_overrun_errors,
	// each on its own.
	ErrorThreshold int `toml:"error_threshold" flag:"health-error-threshold" help:"increments of one of port_rcv_errors, link_error_recovery, local_link_integrity_errors, excessive_buffer_overrun_errors within error_window that make the HCA Unhealthy (LinkErrors); at least 2"`
	// SymbolErrorThreshold is symbol_error's own: PAM4 links (HDR, NDR,
	// 200/400GbE) count raw symbol errors all the time.
	SymbolErrorThreshold int `toml:"symbol_error_threshold" flag:"health-symbol-error-threshold" help:"symbol_error increments within error_window that make the HCA Unhealthy (LinkErrors); at least 2"`
	// ExpectedRates maps an HCA (mlx5_1) or an HCA type (MT4125) to the
	// rate in Gb/s its ports should train at.
	ExpectedRates map[string]string `toml:"expected_rate_gbps" flag:"health-expected-rate" help:"the rate (Gb/s) an HCA's ports should train at, by HCA name or type, NAME=GBPS (e.g. MT4129=400); repeatable; a port ACTIVE below it is Degraded (LinkDegraded); without one, its own highest rate and that of the node's other HCAs of its type"`
}

// DefaultHealth is the [health] section when the file is silent. The
// thresholds follow the fabric's own figures: the IBTA's worst compliant
// bit error rate (10^-12) is about 120 symbol errors an hour, and PAM4
// links count raw symbol errors all the time (NVSentinel calls 10 a second
// degradation), so symbol errors taint at 3000 in 5 minutes (10 a second);
// the other error counters at 25 in 5 minutes (5 a minute, NVSentinel's
// figure for link_error_recovery); a link that goes down 3 times in 30
// minutes is flapping. A single flap or error never taints.
func DefaultHealth() Health {
	return Health{
		Enabled: true, Interval: Duration{10 * time.Second}, QuietPeriod: Duration{10 * time.Minute},
		FlapWindow: Duration{30 * time.Minute}, FlapThreshold: 3,
		ErrorWindow: Duration{5 * time.Minute}, ErrorThreshold: 25, SymbolErrorThreshold: 3000,
	}
}

// ExpectedRatesGbps parses ExpectedRates; the config was validated.
func (h Health) ExpectedRatesGbps() map[string]float64 {
	out := make(map[string]float64, len(h.ExpectedRates))
	for k, v := range h.ExpectedRates {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[k] = f
		}
	}
	return out
}

func (h Health) validate() []error {
	var errs []error
	if h.Interval.Duration < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("health.interval %s: want 100ms or more", h.Interval.Duration))
	}
	if h.QuietPeriod.Duration < 0 {
		errs = append(errs, fmt.Errorf("health.quiet_period %s: want 0 or more", h.QuietPeriod.Duration))
	}
	for _, w := range []struct {
		key    string
		window Duration
	}{{"flap_window", h.FlapWindow}, {"error_window", h.ErrorWindow}} {
		if w.window.Duration < h.Interval.Duration {
			errs = append(errs, fmt.Errorf("health.%s %s: want at least health.interval (%s)", w.key, w.window.Duration, h.Interval.Duration))
		}
	}
	// A threshold of 1 would taint on a single flap or error, which a
	// healthy link shows now and then.
	for _, t := range []struct {
		key string
		n   int
	}{{"flap_threshold", h.FlapThreshold}, {"error_threshold", h.ErrorThreshold}, {"symbol_error_threshold", h.SymbolErrorThreshold}} {
		if t.n < 2 {
			errs = append(errs, fmt.Errorf("health.%s %d: want 2 or more (a single event never taints)", t.key, t.n))
		}
	}
	for name, v := range h.ExpectedRates {
		if f, err := strconv.ParseFloat(v, 64); err != nil || f <= 0 || name == "" {
			errs = append(errs, fmt.Errorf("health.expected_rate_gbps %s=%q: want NAME=GBPS with a positive rate, e.g. MT4129=400", name, v))
		}
	}
	return errs
}
