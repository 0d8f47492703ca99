// Package top is `rdma-cdi top`'s view: per-HCA throughput and holders
// computed from two scrapes of an agent's /metrics, and its rendering as a
// table. Pure: the command does the fetching and the screen.
package top

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
)

// HCA is one row of the view.
type HCA struct {
	Device string `json:"device"`
	// State is the ports' logical state, "ACTIVE" or per port
	// ("1:ACTIVE 2:DOWN") when they differ.
	State    string  `json:"state"`
	RateGbps float64 `json:"rateGbps"`
	// RxBytesPerSecond and TxBytesPerSecond are over the two scrapes; -1
	// when a counter went backwards (a reset) or is missing.
	RxBytesPerSecond float64 `json:"rxBytesPerSecond"`
	TxBytesPerSecond float64 `json:"txBytesPerSecond"`
	// Holders are "namespace/pod/container" for pods, the container id
	// (12 characters) elsewhere.
	Holders []string `json:"holders"`
}

var stateNames = map[int]string{1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}

// Compute is the view of cur, with rates against prev taken elapsed
// earlier.
func Compute(prev, cur []metrics.Sample, elapsed time.Duration) []HCA {
	byDevice := map[string]*HCA{}
	hca := func(dev string) *HCA {
		if h, ok := byDevice[dev]; ok {
			return h
		}
		h := &HCA{Device: dev}
		byDevice[dev] = h
		return h
	}
	portStates := map[string][]string{} // "PORT:STATE", per device
	for _, s := range metrics.Find(cur, "rdma_port_state_id", nil) {
		name := stateNames[int(s.Value)]
		if name == "" {
			name = strconv.Itoa(int(s.Value))
		}
		dev := s.Labels["device"]
		portStates[dev] = append(portStates[dev], s.Labels["port"]+":"+name)
	}
	for dev, states := range portStates {
		slices.SortFunc(states, compareNatural)
		hca(dev).State = portStateSummary(states)
	}
	for _, s := range metrics.Find(cur, "rdma_port_rate_bytes_per_second", nil) {
		h := hca(s.Labels["device"])
		h.RateGbps = max(h.RateGbps, s.Value*8/1e9)
	}
	for dev, h := range byDevice {
		h.RxBytesPerSecond = rate(prev, cur, "rdma_port_data_received_bytes_total", dev, elapsed)
		h.TxBytesPerSecond = rate(prev, cur, "rdma_port_data_transmitted_bytes_total", dev, elapsed)
	}
	for _, s := range metrics.Find(cur, "rdma_cdi_hca_holder_info", nil) {
		h := hca(s.Labels["device"])
		who := s.Labels["namespace"] + "/" + s.Labels["pod"]
		if c := s.Labels["container"]; c != "" {
			who += "/" + c
		}
		if s.Labels["pod"] == "" {
			who = s.Labels["container_id"]
			if len(who) > 12 {
				who = who[:12]
			}
		}
		if !slices.Contains(h.Holders, who) {
			h.Holders = append(h.Holders, who)
		}
	}
	out := make([]HCA, 0, len(byDevice))
	for _, h := range byDevice {
		slices.Sort(h.Holders)
		out = append(out, *h)
	}
	slices.SortFunc(out, func(a, b HCA) int { return compareNatural(a.Device, b.Device) })
	return out
}

// portStateSummary is the one state every port is in, else each port's.
func portStateSummary(states []string) string {
	_, first, _ := strings.Cut(states[0], ":")
	for _, s := range states[1:] {
		if _, name, _ := strings.Cut(s, ":"); name != first {
			return strings.Join(states, " ")
		}
	}
	return first
}

// rate is the per-second increase of counter name summed over dev's ports.
func rate(prev, cur []metrics.Sample, name, dev string, elapsed time.Duration) float64 {
	sum := func(samples []metrics.Sample) (float64, int) {
		found := metrics.Find(samples, name, map[string]string{"device": dev})
		total := 0.0
		for _, s := range found {
			total += s.Value
		}
		return total, len(found)
	}
	before, nb := sum(prev)
	after, na := sum(cur)
	if nb == 0 || na == 0 || after < before || elapsed <= 0 {
		return -1
	}
	return (after - before) / elapsed.Seconds()
}

// compareNatural orders mlx5_2 before mlx5_10.
func compareNatural(a, b string) int {
	pa, na := splitNumber(a)
	pb, nb := splitNumber(b)
	if c := strings.Compare(pa, pb); c != 0 {
		return c
	}
	if na != nb {
		return na - nb
	}
	return strings.Compare(a, b)
}

func splitNumber(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, _ := strconv.Atoi(s[i:])
	return s[:i], n
}

// Render writes hcas as a table under a header line.
func Render(w io.Writer, header string, hcas []HCA) error {
	if _, err := fmt.Fprintln(w, header); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HCA\tSTATE\tRATE\tRX/s\tTX/s\tHELD BY")
	for _, h := range hcas {
		holders := strings.Join(h.Holders, ", ")
		if holders == "" {
			holders = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", h.Device, h.State, gbps(h.RateGbps), bytesPerSecond(h.RxBytesPerSecond),
			bytesPerSecond(h.TxBytesPerSecond), holders)
	}
	return tw.Flush()
}

func gbps(v float64) string {
	if v <= 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', -1, 64) + " Gb/s"
}

// bytesPerSecond is v in decimal units, as link rates are.
func bytesPerSecond(v float64) string {
	if v < 0 {
		return "?"
	}
	units := []string{"B", "kB", "MB", "GB", "TB"}
	i := 0
	for v >= 1000 && i < len(units)-1 {
		v /= 1000
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
