package greyhealth

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// The sampler reads seed 002's fixture through the same sysfs reader as on
// a node: a flapping port (link_downed written while it runs) and a PCIe
// link below its maximum reach the consumer, busy healthy ports do not,
// and the conditions clear after the quiet period.
func TestGreyHealthSamplesTheFixture(t *testing.T) {
	topo, err := fixture.LoadBundled("seed002")
	if err != nil {
		t.Fatal(err)
	}
	tr := fixture.BuildTrees(t, topo, false)
	res, err := discover.Discover(discover.Options{Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev}, SkipNet: true})
	if err != nil {
		t.Fatal(err)
	}
	write := func(rel, v string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(tr.Sys, rel), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var mlx53PCI string
	for _, d := range res.Node.Devices {
		if d.Name == "mlx5_3" {
			mlx53PCI = d.PCIAddress
		}
		pci := "bus/pci/devices/" + d.PCIAddress + "/"
		write(pci+"max_link_speed", "16.0 GT/s PCIe")
		write(pci+"current_link_speed", "16.0 GT/s PCIe")
		write(pci+"max_link_width", "16")
		write(pci+"current_link_width", "16")
	}
	got := make(chan map[string][]health.Condition, 100)
	log := logrus.New()
	log.SetOutput(io.Discard)
	g := NewSampler(tr.Sys, log, nil, func(c map[string][]health.Condition) { got <- c })
	cfg := config.Default()
	cfg.Health.Interval = config.Duration{Duration: 20 * time.Millisecond}
	cfg.Health.FlapWindow = config.Duration{Duration: 5 * time.Second}
	cfg.Health.QuietPeriod = config.Duration{Duration: 200 * time.Millisecond}
	g.Observe(res.Node, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- g.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	wait := func(what string, ok func(map[string][]health.Condition) bool) map[string][]health.Condition {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case c := <-got:
				if ok(c) {
					return c
				}
			case <-deadline:
				t.Fatalf("no %s within 10 s", what)
			}
		}
	}
	// Busy traffic on every port, no errors: nothing is published.
	for i := 1; i <= 10; i++ {
		for _, d := range []string{"mlx5_1", "mlx5_2", "mlx5_8"} {
			write("class/infiniband/"+d+"/ports/1/counters/port_xmit_data", strconv.Itoa(i*1_000_000_000))
		}
		time.Sleep(25 * time.Millisecond)
	}
	select {
	case c := <-got:
		t.Fatalf("busy healthy ports published %v", c)
	default:
	}
	// The link flaps until the sampler has seen three flaps (on a loaded
	// machine it may skip samples).
	var c map[string][]health.Condition
	for i := 1; c == nil; i++ {
		if i > 300 {
			t.Fatal("no LinkFlapping on mlx5_8 after 300 flaps")
		}
		write("class/infiniband/mlx5_8/ports/1/counters/link_downed", strconv.Itoa(i))
		select {
		case c = <-got:
			if len(c["mlx5_8"]) != 1 || c["mlx5_8"][0].Code != health.CodeLinkFlapping {
				t.Fatalf("flapping mlx5_8: %v", c)
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
	if len(c) != 1 {
		t.Fatalf("more than mlx5_8: %v", c)
	}
	write("bus/pci/devices/"+mlx53PCI+"/current_link_width", "8")
	wait("PCIeDegraded on mlx5_3", func(c map[string][]health.Condition) bool {
		return len(c["mlx5_3"]) == 1 && c["mlx5_3"][0].Code == health.CodePCIeDegraded && c["mlx5_3"][0].Level == health.LevelDegraded
	})
	write("bus/pci/devices/"+mlx53PCI+"/current_link_width", "16")
	wait("mlx5_3 cleared", func(c map[string][]health.Condition) bool { return len(c["mlx5_3"]) == 0 })
	// health.enabled off clears the rest.
	cfg.Health.Enabled = false
	g.Observe(res.Node, cfg)
	wait("everything cleared", func(c map[string][]health.Condition) bool { return len(c) == 0 })
}
