package doctor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// greyPolicy is the [health] defaults as the Tracker takes them.
func greyPolicy() health.Policy {
	h := config.DefaultHealth()
	return health.Policy{
		FlapWindow: h.FlapWindow.Duration, FlapThreshold: h.FlapThreshold,
		ErrorWindow: h.ErrorWindow.Duration, ErrorThreshold: h.ErrorThreshold, SymbolErrorThreshold: h.SymbolErrorThreshold,
		QuietPeriod: h.QuietPeriod.Duration,
	}
}

// greySample is three MT4125 ports at 100 Gb/s 4X on Gen4 x16 links, as
// edit leaves them.
func greySample(at time.Time, edit func(*health.Sample)) health.Sample {
	s := health.Sample{At: at}
	for _, d := range []string{"mlx5_1", "mlx5_2", "mlx5_3"} {
		s.Ports = append(s.Ports, health.PortSample{
			Device: d, Model: "MT4125", Port: 1, LinkLayer: "Ethernet", State: "ACTIVE",
			Rate: "100 Gb/sec (4X EDR)", RateGbps: 100, Width: 4,
			Counters: map[string]uint64{"link_downed": 2, "symbol_error": 100, "port_rcv_errors": 7},
		})
		s.PCI = append(s.PCI, health.PCILink{Device: d, Speed: 16, MaxSpeed: 16, Width: 16, MaxWidth: 16})
	}
	if edit != nil {
		edit(&s)
	}
	return s
}

func greyFacts(interval time.Duration, second func(*health.Sample), first func(*health.Sample)) Facts {
	f := goodFacts()
	f.Node.Devices = []model.Device{{Name: "mlx5_1", PCIAddress: "0000:54:00.0"}, {Name: "mlx5_2", PCIAddress: "0000:54:00.1"}, {Name: "mlx5_3"}}
	t0 := time.Unix(1000, 0)
	g := &GreyFacts{Interval: interval, Policy: greyPolicy(), Samples: []health.Sample{greySample(t0, first)}}
	if interval > 0 {
		g.Samples = append(g.Samples, greySample(t0.Add(interval), second))
	}
	f.Grey = g
	return f
}

func TestCheckGreyHealth(t *testing.T) {
	counter := func(device, name string, v uint64) func(*health.Sample) {
		return func(s *health.Sample) {
			for i := range s.Ports {
				if s.Ports[i].Device == device {
					s.Ports[i].Counters[name] = v
				}
			}
		}
	}
	for _, tc := range []struct {
		name string
		f    Facts
		want []string // each line, as Result.String prints it
	}{
		{"healthy, twice", greyFacts(2*time.Second, nil, nil), []string{
			"PASS grey-health: 3 port(s) and 3 PCIe link(s) read twice, 2s apart: no error counter or link_downed moved, no ACTIVE port below its expected rate or its peers of the same type, no PCIe link below its maximum (an agent's rdma_cdi_hca_condition has the verdict over its windows)",
		}},
		{"healthy, once", greyFacts(0, nil, nil), []string{
			"PASS grey-health: 3 port(s) and 3 PCIe link(s) read once (--sample-interval 0: counters not compared), no ACTIVE port",
		}},
		{"a counter that went back is a reset", greyFacts(time.Second, counter("mlx5_1", "symbol_error", 0), nil), []string{"PASS grey-health: "}},
		{"an error counter and link_downed moved", greyFacts(time.Second, func(s *health.Sample) {
			counter("mlx5_2", "symbol_error", 140)(s)
			counter("mlx5_3", "link_downed", 3)(s)
		}, nil), []string{
			"WARN grey-health: mlx5_2 (0000:54:00.1) port 1: symbol_error rose by 40 in 1s (now 140); mlx5_3 port 1: link_downed rose by 1 in 1s (now 3): one interval cannot tell a burst from a stray error (fix: see rdma_cdi_hca_condition",
		}},
		{"a burst past the threshold within the interval", greyFacts(time.Second, func(s *health.Sample) {
			counter("mlx5_1", "symbol_error", 5100)(s)
			counter("mlx5_1", "port_rcv_errors", 8)(s)
		}, nil), []string{
			"FAIL grey-health: mlx5_1 (0000:54:00.0) port 1: symbol_error rose by 5000 in 5m0s (now 5100; threshold 3000), within the 1s between two readings: the agents mark the HCA Unhealthy (fix: check the cable",
			"WARN grey-health: mlx5_1 (0000:54:00.0) port 1: port_rcv_errors rose by 1 in 1s (now 8): one interval",
		}},
		{"a port below its peers, a PCIe link below its maximum", greyFacts(0, nil, func(s *health.Sample) {
			s.Ports[2].Rate, s.Ports[2].RateGbps, s.Ports[2].Width = "50 Gb/sec (2X EDR)", 50, 2
			s.PCI[1].Speed, s.PCI[1].Width = 8, 8
		}), []string{
			`WARN grey-health: mlx5_3 port 1: rate "50 Gb/sec (2X EDR)", below the 100 Gb/s 4X it trains at (mlx5_1, of the same type MT4125) (fix: check the cable`,
			"WARN grey-health: mlx5_2 (0000:54:00.1): PCIe link at 8 GT/s x8 (current_link_speed, current_link_width), below the function's 16 GT/s x16 (max_link_speed, max_link_width) (fix: reseat the HCA",
		}},
		{"a configured rate", func() Facts {
			f := greyFacts(0, nil, nil)
			f.Grey.Policy.ExpectedRates = map[string]float64{"MT4125": 200}
			return f
		}(), []string{
			`WARN grey-health: mlx5_1 (0000:54:00.0) port 1: rate "100 Gb/sec (4X EDR)", below the 200 Gb/s it trains at (health.expected_rate_gbps MT4125); mlx5_2`,
		}},
		{"what could not be read", func() Facts {
			f := greyFacts(0, nil, nil)
			f.Grey.ReadErrs = []string{"reading mlx5_4 port 1: gone"}
			return f
		}(), []string{"WARN grey-health: reading mlx5_4 port 1: gone (fix: check --sysfs-root"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkGreyHealth(tc.f)
			if len(got) != len(tc.want) {
				t.Fatalf("%d results, want %d: %v", len(got), len(tc.want), got)
			}
			for i, r := range got {
				if !strings.HasPrefix(r.String(), tc.want[i]) {
					t.Errorf("result %d:\n  %s\nwant a line starting\n  %s", i, r, tc.want[i])
				}
			}
		})
	}
	if r := checkGreyHealth(goodFacts()); r != nil {
		t.Errorf("no readings: %v", r)
	}
}

func TestCheckRunsGreyHealthAfterTheDevices(t *testing.T) {
	var names []string
	for _, r := range Check(greyFacts(time.Second, nil, nil)) {
		names = append(names, r.Name)
	}
	if i := strings.Index(strings.Join(names, " "), "grey-health"); i < 0 || !strings.HasPrefix(strings.Join(names, " "), "rdma-devices") {
		t.Errorf("checks: %v", names)
	}
}

func TestReadGrey(t *testing.T) {
	reads := 0
	o := GreyOptions{Interval: 10 * time.Millisecond, Read: func(node model.Node, at time.Time) (health.Sample, []error) {
		reads++
		return health.Sample{At: at}, []error{errors.New("reading mlx5_9 port 1: gone")}
	}}
	g := startGrey(context.Background(), o, model.Node{}).finish()
	if reads != 2 || len(g.Samples) != 2 || len(g.ReadErrs) != 1 || g.Interval < 10*time.Millisecond {
		t.Errorf("twice: %d reads, %+v", reads, g)
	}
	reads = 0
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o.Interval = time.Hour
	if g := startGrey(ctx, o, model.Node{}).finish(); reads != 1 || len(g.Samples) != 1 || g.Interval != 0 {
		t.Errorf("cut short: %d reads, %+v", reads, g)
	}
	o.Interval = 0
	if g := startGrey(ctx, o, model.Node{}).finish(); len(g.Samples) != 1 {
		t.Errorf("once: %+v", g)
	}
}
