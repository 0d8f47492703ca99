package nodecmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// degradedSeed002 is seed 002 with mlx5_3's PCIe link trained at Gen3 x8
// in its Gen4 x16 slot and mlx5_6's port at 2X, its peers at 4X.
func degradedSeed002(t *testing.T) []string {
	t.Helper()
	topo, err := fixture.LoadBundled("seed002")
	if err != nil {
		t.Fatal(err)
	}
	for i := range topo.Devices {
		d := &topo.Devices[i]
		switch d.Name {
		case "mlx5_3":
			d.PCIe = fixture.PCIeLink{Speed: "8.0 GT/s PCIe", Width: 8}
		case "mlx5_6":
			d.Ports[0].Rate = "50 Gb/sec (2X EDR)"
		}
	}
	tr := fixture.BuildTrees(t, topo, false)
	cfg := filepath.Join(tr.Dir, "config.toml")
	if err := os.WriteFile(cfg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"--sysfs-root", tr.Sys, "--dev-root", tr.Dev, "--config", cfg, "--log-level=error"}
}

func TestListMarksDegradedLinks(t *testing.T) {
	roots := degradedSeed002(t)
	out, _, err := runCLI(t, append(roots, "list")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		") ACTIVE Ethernet 25 Gb/sec (1X EDR)\n", // mlx5_0, the node's one MT4119, has no peer
		") ACTIVE Ethernet 100 Gb/sec (4X EDR)\n",
		`) ACTIVE Ethernet 50 Gb/sec (2X EDR) (degraded: below the 100 Gb/s 4X it trains at (mlx5_1, of the same type MT4125))` + "\n",
		"DEV    PCI          PCIE LINK   MAX\n",
		"mlx5_1 0000:54:00.0 16 GT/s x16 16 GT/s x16\n",
		"mlx5_3 0000:70:00.0 8 GT/s x8   16 GT/s x16 (degraded: below the function's 16 GT/s x16)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("list output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "degraded"); n != 2 {
		t.Errorf("%d degraded marks, want 2:\n%s", n, out)
	}

	out, _, err = runCLI(t, append(roots, "list", "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	var node struct {
		Devices []struct {
			Name     string
			PCIeLink *struct {
				SpeedGTs, MaxSpeedGTs float64
				Width, MaxWidth       int
				Degraded              string
			}
			Ports []struct {
				Rate     string
				RateGbps float64
				Width    int
				Degraded string
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &node); err != nil {
		t.Fatal(err)
	}
	for _, d := range node.Devices {
		l, p := d.PCIeLink, d.Ports[0]
		if l == nil {
			t.Fatalf("%s: no pcieLink", d.Name)
		}
		switch d.Name {
		case "mlx5_3":
			if l.SpeedGTs != 8 || l.Width != 8 || l.MaxSpeedGTs != 16 || l.MaxWidth != 16 || !strings.HasPrefix(l.Degraded, "PCIe link at 8 GT/s x8") {
				t.Errorf("mlx5_3's pcieLink: %+v", *l)
			}
		case "mlx5_6":
			if p.RateGbps != 50 || p.Width != 2 || !strings.Contains(p.Degraded, `rate "50 Gb/sec (2X EDR)", below the 100 Gb/s 4X`) {
				t.Errorf("mlx5_6's port: %+v", p)
			}
		default:
			if l.Degraded != "" || p.Degraded != "" || l.Width != 16 || p.Width == 0 {
				t.Errorf("%s: %+v %+v", d.Name, *l, p)
			}
		}
	}
}

func TestPCIeLinkText(t *testing.T) {
	for _, c := range []struct {
		speed float64
		width int
		want  string
	}{{16, 16, "16 GT/s x16"}, {2.5, 1, "2.5 GT/s x1"}, {0, 0, "-"}, {0, 8, "? x8"}, {8, 0, "8 GT/s x?"}} {
		if got := pcieLink(c.speed, c.width); got != c.want {
			t.Errorf("pcieLink(%v, %d) = %q, want %q", c.speed, c.width, got, c.want)
		}
	}
}
