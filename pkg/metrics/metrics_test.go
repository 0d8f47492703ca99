package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/hookevents"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// seedExporter is an exporter of seed 002's node (9 RoCE HCAs) after one
// good generation, with counters set on mlx5_1.
func seedExporter(t *testing.T, alive func(hookevents.Init) bool) (*Exporter, fixture.Trees) {
	t.Helper()
	topo, err := fixture.LoadBundled("seed002")
	if err != nil {
		t.Fatal(err)
	}
	for i := range topo.Devices {
		if topo.Devices[i].Name == "mlx5_1" {
			topo.Devices[i].Ports[0].Counters = map[string]uint64{"port_rcv_data": 1000, "port_xmit_data": 250, "link_downed": 2}
			topo.Devices[i].Ports[0].HWCounters = map[string]uint64{"np_cnp_sent": 7, "out_of_buffer": 3}
		}
	}
	tr := fixture.BuildTrees(t, topo, false)
	res, err := discover.Discover(discover.Options{Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev}, SkipNet: true})
	if err != nil {
		t.Fatal(err)
	}
	e := New(Options{Sysfs: tr.Sys, Mode: "watch", Version: "test", Rescan: time.Minute, Alive: alive})
	e.Generation(specgen.Outcome{Node: res.Node, Changed: true}, config.Default(), nil)
	return e, tr
}

func scrape(t *testing.T, e *Exporter) []Sample {
	t.Helper()
	body, code := get(t, e, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	samples, err := ParseScrape(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return samples
}

func get(t *testing.T, e *Exporter, path string) (string, int) {
	t.Helper()
	rec := httptest.NewRecorder()
	e.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b), rec.Code
}

func one(t *testing.T, samples []Sample, name string, labels map[string]string) float64 {
	t.Helper()
	found := Find(samples, name, labels)
	if len(found) != 1 {
		t.Fatalf("%s%v: %d samples, want 1", name, labels, len(found))
	}
	return found[0].Value
}

func TestPortMetricsReadAtScrape(t *testing.T) {
	e, tr := seedExporter(t, nil)
	s := scrape(t, e)
	mlx51 := map[string]string{"device": "mlx5_1", "port": "1"}
	for name, want := range map[string]float64{
		"rdma_port_data_received_bytes_total":    4000, // 4-octet words
		"rdma_port_data_transmitted_bytes_total": 1000,
		"rdma_port_link_downed_total":            2,
		"rdma_port_cnp_sent_total":               7,
		"rdma_port_out_of_buffer_total":          3,
		"rdma_port_symbol_errors_total":          0,
		"rdma_port_state_id":                     4,
		"rdma_port_physical_state_id":            5,
		"rdma_port_rate_bytes_per_second":        100e9 / 8,
		"rdma_port_gids":                         4,
		"rdma_port_nccl_gid_index":               3,
	} {
		if got := one(t, s, name, mlx51); got != want {
			t.Errorf("%s{mlx5_1} = %v, want %v", name, got, want)
		}
	}
	if got := len(Find(s, "rdma_port_info", map[string]string{"link_layer": "Ethernet"})); got != 9 {
		t.Errorf("%d Ethernet ports, want 9", got)
	}
	one(t, s, "rdma_port_info", map[string]string{"device": "mlx5_1", "netdev": "eth1"})

	// The next scrape reads the counter again: never staler than the kernel's.
	if err := os.WriteFile(filepath.Join(tr.Sys, "class/infiniband/mlx5_1/ports/1/counters/port_rcv_data"), []byte("5000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tr.Sys, "class/infiniband/mlx5_1/ports/1/state"), []byte("1: DOWN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s = scrape(t, e)
	if got := one(t, s, "rdma_port_data_received_bytes_total", mlx51); got != 20000 {
		t.Errorf("after the counter moved: %v, want 20000", got)
	}
	if got := one(t, s, "rdma_port_state_id", mlx51); got != 1 {
		t.Errorf("after the port went down: state %v, want 1", got)
	}
}

// TestPortReadErrors: a counter that does not parse, or a port gone since
// the generation, leaves that port's live values out and is counted; the
// other ports and the scrape are unharmed.
func TestPortReadErrors(t *testing.T) {
	e, tr := seedExporter(t, nil)
	if err := os.WriteFile(filepath.Join(tr.Sys, "class/infiniband/mlx5_2/ports/1/counters/port_rcv_data"), []byte("lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(tr.Sys, "class/infiniband/mlx5_3")); err != nil {
		t.Fatal(err)
	}
	s := scrape(t, e)
	if got := one(t, s, "rdma_cdi_port_read_errors_total", nil); got != 2 {
		t.Errorf("port read errors %v, want 2", got)
	}
	for _, dev := range []string{"mlx5_2", "mlx5_3"} {
		if n := len(Find(s, "rdma_port_data_received_bytes_total", map[string]string{"device": dev})); n != 0 {
			t.Errorf("%s: %d counter samples, want none", dev, n)
		}
	}
	one(t, s, "rdma_port_data_received_bytes_total", map[string]string{"device": "mlx5_1"})
}

func TestAgentAndHookMetrics(t *testing.T) {
	e, _ := seedExporter(t, func(init hookevents.Init) bool { return init.Pid == 100 })
	e.Generation(specgen.Outcome{}, config.Default(), &os.PathError{Op: "open", Path: "/sys/class/infiniband", Err: syscall.EACCES})
	e.Generation(specgen.Outcome{}, config.Default(), errors.Join(specgen.ErrWrite, &os.PathError{Op: "write", Err: syscall.ENOSPC}))
	e.SlicePublished(nil)
	e.ClaimStatusWritten(nil)
	e.ClaimStatusWritten(errors.New("connection refused"))
	e.ClaimStatusWritten(errors.New("connection refused"))
	e.ListAndWatchUpdate("rdma/hca")
	e.HookOutcome(hookevents.Outcome{Hook: "create-runtime", ContainerID: "c1", Pid: 100, Namespace: "ml", Pod: "train-0", Container: "worker",
		Devices: []string{"mlx5_1", "mlx5_2"}, UserSpace: hookevents.UserSpaceImage})
	e.HookOutcome(hookevents.Outcome{Hook: "create-runtime", ContainerID: "c2", Pid: 200, Devices: []string{"mlx5_3"}, UserSpace: hookevents.UserSpaceHost})
	e.HookOutcome(hookevents.Outcome{Hook: "create-runtime", ContainerID: "c3", FailedStep: "nccl-conf", Reason: hookevents.ReasonNoSpace})
	e.SetClaimHolders("uid-1", []Holder{{Device: "mlx5_4", Namespace: "ml", Pod: "dra-pod", Source: SourceDRA}})
	s := scrape(t, e)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"rdma_cdi_generations_total", map[string]string{"result": "ok"}, 1},
		{"rdma_cdi_generations_total", map[string]string{"result": "error"}, 2},
		{"rdma_cdi_spec_writes_total", nil, 1},
		{"rdma_cdi_discovery_errors_total", map[string]string{"reason": "permission"}, 1},
		{"rdma_cdi_spec_write_errors_total", map[string]string{"reason": "no_space"}, 1},
		{"rdma_cdi_resourceslice_publishes_total", map[string]string{"result": "ok"}, 1},
		{"rdma_cdi_claim_status_writes_total", map[string]string{"result": "ok"}, 1},
		{"rdma_cdi_claim_status_writes_total", map[string]string{"result": "error"}, 2},
		{"rdma_cdi_listandwatch_updates_total", map[string]string{"resource": "rdma/hca"}, 1},
		{"rdma_cdi_hook_containers_total", map[string]string{"user_space": "image"}, 1},
		{"rdma_cdi_hook_containers_total", map[string]string{"user_space": "host"}, 1},
		{"rdma_cdi_hook_failures_total", map[string]string{"step": "nccl-conf", "reason": "no_space"}, 1},
		{"rdma_cdi_agent_info", map[string]string{"mode": "watch", "version": "test"}, 1},
	} {
		if got := one(t, s, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if one(t, s, "rdma_cdi_last_discovery_success_timestamp_seconds", nil) < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Error("last success is not recent")
	}
	// c2's init (pid 200) is gone: only c1's HCAs and the claim's are held.
	holders := Find(s, "rdma_cdi_hca_holder_info", nil)
	var got []string
	for _, h := range holders {
		got = append(got, h.Labels["device"]+"="+h.Labels["namespace"]+"/"+h.Labels["pod"]+"/"+h.Labels["container"]+"/"+h.Labels["source"])
	}
	sort.Strings(got)
	want := []string{"mlx5_1=ml/train-0/worker/hook", "mlx5_2=ml/train-0/worker/hook", "mlx5_4=ml/dra-pod//dra"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("holders %v, want %v", got, want)
	}
	e.SetClaimHolders("uid-1", nil)
	if n := len(Find(scrape(t, e), "rdma_cdi_hca_holder_info", map[string]string{"source": "dra"})); n != 0 {
		t.Errorf("an unprepared claim still holds: %d", n)
	}
}

func TestHolderTableIsBounded(t *testing.T) {
	e := New(Options{Alive: func(hookevents.Init) bool { return true }})
	for i := range maxHookHolders + 10 {
		e.HookOutcome(hookevents.Outcome{Hook: "create-runtime", ContainerID: "c" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + time.Duration(i).String(), Pid: 1, Devices: []string{"mlx5_0"}})
	}
	s := scrape(t, e)
	if got := len(Find(s, "rdma_cdi_hca_holder_info", nil)); got != maxHookHolders {
		t.Errorf("%d holders, want the bound %d", got, maxHookHolders)
	}
	if got := one(t, s, "rdma_cdi_hook_holders_refused_total", nil); got != 10 {
		t.Errorf("refused %v, want 10", got)
	}
}

func TestProbes(t *testing.T) {
	e := New(Options{Rescan: time.Minute})
	if body, code := get(t, e, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not been discovered") {
		t.Errorf("/readyz before a generation: %d %q", code, body)
	}
	if _, code := get(t, e, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz at start: %d", code)
	}
	e.Generation(specgen.Outcome{}, config.Default(), nil)
	if _, code := get(t, e, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after a generation: %d", code)
	}
	e.mu.Lock()
	e.lastAttempt = time.Now().Add(-4 * time.Minute)
	e.mu.Unlock()
	if body, code := get(t, e, "/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no generation since") {
		t.Errorf("/healthz after 4 rescan intervals without a generation: %d %q", code, body)
	}
}

func TestNilExporterRecordsNothing(t *testing.T) {
	var e *Exporter
	e.Generation(specgen.Outcome{}, config.Default(), nil)
	e.SlicePublished(nil)
	e.ClaimStatusWritten(nil)
	e.ListAndWatchUpdate("rdma/hca")
	e.HookOutcome(hookevents.Outcome{})
	e.SetClaimHolders("x", nil)
	e.SetConditions(nil)
}

// Grey conditions are one series each, replaced as a whole.
func TestConditionMetrics(t *testing.T) {
	e, _ := seedExporter(t, nil)
	e.SetConditions([]health.Condition{
		{Device: "mlx5_8", Port: 1, Level: health.LevelUnhealthy, Code: health.CodeLinkFlapping},
		{Device: "mlx5_3", Level: health.LevelDegraded, Code: health.CodePCIeDegraded},
	})
	s := scrape(t, e)
	if one(t, s, "rdma_cdi_hca_condition", map[string]string{"device": "mlx5_8", "port": "1", "condition": "Unhealthy", "reason": "LinkFlapping"}) != 1 ||
		one(t, s, "rdma_cdi_hca_condition", map[string]string{"device": "mlx5_3", "port": "", "condition": "Degraded", "reason": "PCIeDegraded"}) != 1 {
		t.Fatal("condition values")
	}
	e.SetConditions(nil)
	if n := len(Find(scrape(t, e), "rdma_cdi_hca_condition", nil)); n != 0 {
		t.Fatalf("%d condition series after they cleared", n)
	}
}

// The pod network's pending give-backs are a gauge: a failed give-back is
// reported (round 3, M1), and goes back to 0 once it succeeds.
func TestGiveBacksPendingIsAGauge(t *testing.T) {
	e := New(Options{Mode: "dra-driver", Version: "test"})
	for _, n := range []int{2, 0} {
		e.GiveBacksPending(n)
		if got := one(t, scrape(t, e), "rdma_cdi_pod_network_give_backs_pending", nil); got != float64(n) {
			t.Errorf("after GiveBacksPending(%d): rdma_cdi_pod_network_give_backs_pending %v", n, got)
		}
	}
}
