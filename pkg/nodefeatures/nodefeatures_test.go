package nodefeatures

import (
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/topology"
)

// seedNode is seed 002's shape: the management NIC mlx5_0 (default route),
// four RoCE HCAs in /27s of their own, one of them down.
func seedNode() model.Node {
	node := model.Node{DefaultRouteNetDev: "eth0"}
	for i, addr := range []string{"10.0.60.3/24", "25.11.128.2/27", "25.11.128.34/27", "25.11.128.66/27", "25.11.128.98/27"} {
		name, nd := "mlx5_"+string(rune('0'+i)), "eth"+string(rune('0'+i))
		state := model.PortActive
		if i == 4 {
			state = model.PortDown
		}
		node.Devices = append(node.Devices, model.Device{Name: name, Ports: []model.Port{{Number: 1, State: state, LinkLayer: model.LinkLayerEthernet, NetDev: nd}}})
		node.NetDevs = append(node.NetDevs, model.NetDev{Name: nd, Addrs: []netip.Prefix{netip.MustParsePrefix(addr)}})
	}
	return node
}

func TestLabels(t *testing.T) {
	node := seedNode()
	cfg := config.Default()
	rails, _ := topology.Rails(node, cfg.Topology)
	got := Labels(node, cfg, rails)
	// The management NIC is left out as NCCL leaves it out; the HCA that
	// is down still counts.
	want := map[string]string{"rdma.example.com/hca-count": "4", "rdma.example.com/rail-count": "4", "rdma.example.com/transport.roce": "true"}
	if !maps.Equal(got, want) {
		t.Fatalf("labels %v, want %v", got, want)
	}

	cfg.CDI.Vendor = "rdma.corp.example"
	cfg.Topology.Block, cfg.Topology.Rack = "su-2", "r07"
	cfg.NCCL.ExcludeHCAs = []string{"mlx5_4"}
	node.Devices = append(node.Devices, model.Device{Name: "mlx5_ib0", Ports: []model.Port{{Number: 1, LinkLayer: model.LinkLayerInfiniBand}}})
	got = Labels(node, cfg, map[string]string{"mlx5_1": "a", "mlx5_2": "a", "mlx5_4": "b"})
	want = map[string]string{
		"rdma.corp.example/hca-count": "4", "rdma.corp.example/rail-count": "1",
		"rdma.corp.example/transport.roce": "true", "rdma.corp.example/transport.infiniband": "true",
		"rdma.corp.example/block": "su-2", "rdma.corp.example/rack": "r07",
	}
	if !maps.Equal(got, want) {
		t.Fatalf("labels %v, want %v", got, want)
	}
	for name, value := range got {
		if errs := append(validation.IsQualifiedName(name), validation.IsValidLabelValue(value)...); len(errs) > 0 {
			t.Errorf("%s=%s is no valid node label: %v", name, value, errs)
		}
	}
}

// No rail, no rail-count: a node whose rails are unknown says nothing of
// them rather than 0.
func TestLabelsWithoutRails(t *testing.T) {
	got := Labels(seedNode(), config.Default(), nil)
	if _, ok := got["rdma.example.com/rail-count"]; ok || got["rdma.example.com/hca-count"] != "4" {
		t.Fatalf("labels %v", got)
	}
}

// The file is read as NFD reads it: '#' lines are comments or directives,
// every other line name=value; sorted, so that equal labels make equal
// bytes.
func TestFile(t *testing.T) {
	labels := map[string]string{"rdma.example.com/rail-count": "8", "rdma.example.com/hca-count": "8", "rdma.example.com/block": "b1"}
	expires := time.Date(2031, 2, 3, 4, 5, 6, 0, time.FixedZone("CET", 3600))
	want := "# This node's RDMA facts, written by rdma-cdi's agent for Node Feature Discovery.\n" +
		"# +expiry-time=2031-02-03T03:05:06Z\n" +
		"rdma.example.com/block=b1\nrdma.example.com/hca-count=8\nrdma.example.com/rail-count=8\n"
	if got := string(File(labels, expires)); got != want {
		t.Fatalf("file:\n%s\nwant:\n%s", got, want)
	}
	got := string(File(labels, time.Time{}))
	if strings.Contains(got, "+expiry-time") || !strings.HasSuffix(got, "rdma.example.com/rail-count=8\n") {
		t.Fatalf("without expiry:\n%s", got)
	}
	parsed := map[string]string{}
	for _, line := range strings.Split(got, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, _ := strings.Cut(line, "=")
		parsed[name] = value
	}
	if !maps.Equal(parsed, labels) {
		t.Fatalf("read back %v, want %v", parsed, labels)
	}
}

// A file lives four rescans, at least an hour, and is due again once half
// of that is gone; without rescans it never expires, and a change between
// the two is due at once.
func TestLifetimeAndDue(t *testing.T) {
	for rescan, want := range map[time.Duration]time.Duration{0: 0, time.Minute: time.Hour, 30 * time.Minute: 2 * time.Hour} {
		if got := Lifetime(rescan); got != want {
			t.Errorf("Lifetime(%s) = %s, want %s", rescan, got, want)
		}
	}
	now := time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		expires  time.Time
		lifetime time.Duration
		want     bool
	}{
		{now.Add(time.Hour), time.Hour, false},
		{now.Add(31 * time.Minute), time.Hour, false},
		{now.Add(29 * time.Minute), time.Hour, true},
		{now.Add(-time.Minute), time.Hour, true},
		{time.Time{}, time.Hour, true},
		{time.Time{}, 0, false},
		{now.Add(time.Hour), 0, true},
	} {
		if got := Due(c.expires, c.lifetime, now); got != c.want {
			t.Errorf("Due(expires %v, lifetime %s) = %v, want %v", c.expires, c.lifetime, got, c.want)
		}
	}
}
