package agent

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// twoRailNode has two RoCE HCAs, each in a /27 of its own.
func twoRailNode() model.Node {
	node := model.Node{}
	for i, addr := range []string{"25.11.128.2/27", "25.11.128.34/27"} {
		name, nd := "mlx5_"+string(rune('1'+i)), "eth"+string(rune('1'+i))
		node.Devices = append(node.Devices, model.Device{Name: name, Ports: []model.Port{{Number: 1, State: model.PortActive, LinkLayer: model.LinkLayerEthernet, NetDev: nd}}})
		node.NetDevs = append(node.NetDevs, model.NetDev{Name: nd, Addrs: []netip.Prefix{netip.MustParsePrefix(addr)}})
	}
	return node
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The file is written whole from each generation, atomically, and only
// when its labels change or its expiry nears; a label the node lost goes.
func TestFeatureFileRewrittenOnChange(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Topology.FeaturesFile = filepath.Join(dir, "features.d", "rdma-cdi")
	cfg.Topology.Block = "b1"
	f := &featureFile{log: log}
	start := time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	if err := f.update(twoRailNode(), cfg, start); err != nil {
		t.Fatal(err)
	}
	first := readFile(t, cfg.Topology.FeaturesFile)
	for _, line := range []string{"# +expiry-time=2031-01-01T13:00:00Z\n", "rdma.example.com/block=b1\n", "rdma.example.com/hca-count=2\n", "rdma.example.com/rail-count=2\n", "rdma.example.com/transport.roce=true\n"} {
		if !strings.Contains(first, line) {
			t.Errorf("file lacks %q:\n%s", line, first)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(cfg.Topology.FeaturesFile))
	if len(entries) != 1 {
		t.Errorf("features.d holds %d entries, want the file alone (no temp file left)", len(entries))
	}

	// Nothing changed, half an hour of the hour's life left: not rewritten
	// (a rewrite would move the expiry).
	if err := f.update(twoRailNode(), cfg, start.Add(29*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, cfg.Topology.FeaturesFile); got != first {
		t.Fatalf("rewritten without a change:\n%s", got)
	}

	// The block is gone and a rack came: the file follows at once.
	cfg.Topology.Block, cfg.Topology.Rack = "", "r7"
	if err := f.update(twoRailNode(), cfg, start.Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	got := readFile(t, cfg.Topology.FeaturesFile)
	if strings.Contains(got, "/block=") || !strings.Contains(got, "rdma.example.com/rack=r7\n") || !strings.Contains(got, "+expiry-time=2031-01-01T13:30:00Z") {
		t.Fatalf("after the change:\n%s", got)
	}

	// Unchanged, but past half its life: refreshed with a new expiry.
	if err := f.update(twoRailNode(), cfg, start.Add(61*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, cfg.Topology.FeaturesFile); !strings.Contains(got, "+expiry-time=2031-01-01T14:01:00Z") {
		t.Fatalf("not refreshed:\n%s", got)
	}
	if n := len(hook.AllEntries()); n != 2 {
		t.Errorf("%d log lines, want one per change of the labels (2)", n)
	}
}

// A reload that moves the file removes the old one; one that empties the
// key removes the file.
func TestFeatureFileMovedAndTurnedOff(t *testing.T) {
	log, _ := logtest.NewNullLogger()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Topology.FeaturesFile = filepath.Join(dir, "a")
	f := &featureFile{log: log}
	now := time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	if err := f.update(twoRailNode(), cfg, now); err != nil {
		t.Fatal(err)
	}
	old := cfg.Topology.FeaturesFile
	cfg.Topology.FeaturesFile = filepath.Join(dir, "b")
	if err := f.update(twoRailNode(), cfg, now); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the moved file %s is still there: %v", old, err)
	}
	if !strings.Contains(readFile(t, cfg.Topology.FeaturesFile), "hca-count=2") {
		t.Error("the new file lacks the labels")
	}
	moved := cfg.Topology.FeaturesFile
	cfg.Topology.FeaturesFile = ""
	if err := f.update(twoRailNode(), cfg, now); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(moved); !os.IsNotExist(err) {
		t.Errorf("file %s left after topology.features_file was emptied: %v", moved, err)
	}
}

// Without rescans nothing would refresh the file: it carries no expiry.
func TestFeatureFileWithoutRescanNeverExpires(t *testing.T) {
	log, _ := logtest.NewNullLogger()
	cfg := config.Default()
	cfg.Topology.FeaturesFile = filepath.Join(t.TempDir(), "rdma-cdi")
	cfg.Watch.RescanInterval.Duration = 0
	f := &featureFile{log: log}
	if err := f.update(twoRailNode(), cfg, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, cfg.Topology.FeaturesFile); strings.Contains(got, "expiry-time") {
		t.Fatalf("expiry without rescans:\n%s", got)
	}
}

// A failed write is returned and tried again at the next generation; why
// the subnets named no rail is logged once, not at every generation.
func TestFeatureFileRetriesAndNotesOnce(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.InfoLevel)
	dir := t.TempDir()
	blocker := filepath.Join(dir, "features.d")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil { // a file where the directory should be
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Topology.FeaturesFile = filepath.Join(blocker, "rdma-cdi")
	node := twoRailNode()
	node.NetDevs[1].Addrs = node.NetDevs[0].Addrs // both HCAs in one subnet
	f := &featureFile{log: log}
	now := time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	err := f.update(node, cfg, now)
	if err == nil || !strings.Contains(err.Error(), blocker) {
		t.Fatalf("update into a file: %v, want an error naming %s", err, blocker)
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	if err := f.update(node, cfg, now); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, cfg.Topology.FeaturesFile); strings.Contains(got, "rail-count") || !strings.Contains(got, "hca-count=2") {
		t.Fatalf("file:\n%s", got)
	}
	var notes int
	for _, e := range hook.AllEntries() {
		if strings.Contains(e.Message, "share the subnet 25.11.128.0/27") {
			notes++
		}
	}
	if notes != 1 {
		t.Errorf("the shared subnet was logged %d times, want once", notes)
	}
}
