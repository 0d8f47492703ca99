package node

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

var metricsAddrRE = regexp.MustCompile(`metrics on http://([0-9.:]+)/metrics`)

// metricsWatch starts `rdma-cdi-agent watch` on seed 002 (startWatch) with its
// metrics endpoint on a free port, the hooks reporting to a socket of the
// test's own, and the CDI vendor unique to the test; it returns the
// endpoint's HOST:PORT and the vendor.
func metricsWatch(t *testing.T) (*watcher, *e2e.FixtureNode, string, string) {
	t.Helper()
	vendor := e2e.UniqueVendor(t)
	sock := filepath.Join(t.TempDir(), "run", "hook-events.sock")
	w, node, _ := startWatch(t, fmt.Sprintf("[cdi]\nvendor = %q\n[metrics]\naddress = \"127.0.0.1:0\"\nhook_socket = %q\n", vendor, sock))
	var addr string
	watchWait(t, 10*time.Second, "the metrics address in the log", func() bool {
		m := metricsAddrRE.FindStringSubmatch(w.log.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return w, node, addr, vendor
}

func httpGet(t *testing.T, url string) (string, int) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), resp.StatusCode
}

// agentSamples is a scrape of the agent at addr, parsed.
func agentSamples(t *testing.T, addr string) []metrics.Sample {
	t.Helper()
	return e2e.ScrapeWith(t, http.DefaultClient, "http://"+addr+"/metrics")
}

// TestMetricsScrapeIsValid: the agent's scrape passes promtool's lint, and
// its probes answer.
func TestMetricsScrapeIsValid(t *testing.T) {
	e2e.RequireBinary(t, "promtool")
	_, _, addr, _ := metricsWatch(t)
	for _, probe := range []string{"/healthz", "/readyz"} {
		if body, code := httpGet(t, "http://"+addr+probe); code != http.StatusOK {
			t.Errorf("%s: %d %s", probe, code, body)
		}
	}
	scrape, _ := httpGet(t, "http://"+addr+"/metrics")
	for _, want := range []string{`rdma_port_data_received_bytes_total{device="mlx5_1",port="1"}`, `rdma_port_nccl_gid_index{device="mlx5_1",port="1"} 3`,
		`rdma_port_state_id{device="mlx5_8",port="1"} 4`, `rdma_cdi_agent_info{mode="watch"`} {
		if !strings.Contains(scrape, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape)
	if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// 4-octet words

// holdingContainer starts a real podman container with device, through
// the spec the agent keeps (linked into the engines' CDI dir), and returns
// its id; it is removed when the test ends.
func holdingContainer(t *testing.T, w *watcher, vendor, device string) (*e2e.PodmanEnv, string) {
	t.Helper()
	spec := filepath.Join(filepath.Dir(w.spec), vendor+"-hca.yaml")
	link := filepath.Join(e2e.CDIDir, filepath.Base(spec))
	// The dir may not exist yet on a fresh machine where this test runs alone.
	if err := os.MkdirAll(e2e.CDIDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(spec, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(link) })
	p := e2e.Podman(t)
	so, se, err := p.Podman("run", "-d", "--device", vendor+"/hca="+device, e2e.BB.Ref, "sleep", "600")
	if err != nil {
		t.Fatalf("podman run: %v\n%s", err, se)
	}
	id := strings.TrimSpace(so)
	t.Cleanup(func() { _, _, _ = p.Podman("rm", "-f", "-t", "0", id) })
	return p, id
}

// TestMetricsPrometheus: Debian's Prometheus scrapes the agent. The data
// rate it computes follows a fixture counter as it moves, and a real podman
// container started with one HCA shows as its holder, joined to its traffic
// by one PromQL expression, until it is removed.
func TestMetricsPrometheus(t *testing.T) {
	w, node, addr, vendor := metricsWatch(t)
	prom := e2e.StartPrometheus(t, "127.0.0.1:"+e2e.FreeLocalPort(t), []string{addr}, "", exec.Command, nil)

	rate := `rate(rdma_port_data_received_bytes_total{device="mlx5_1"}[4s])`
	prom.WaitQuery(t, rate, 30*time.Second, func(s []e2e.PromSample) bool { return len(s) == 1 && s[0].Value == 0 })

	e2e.MoveCounter(t, node, "mlx5_1")
	got := prom.WaitQuery(t, rate, 30*time.Second, func(s []e2e.PromSample) bool {
		return len(s) == 1 && s[0].Value > 3.5e6 && s[0].Value < 4.5e6
	})
	t.Logf("%s = %.0f bytes/s", rate, got[0].Value)

	p, id := holdingContainer(t, w, vendor, "mlx5_1")
	holder := fmt.Sprintf(`rdma_cdi_hca_holder_info{device="mlx5_1",source="hook",container_id=%q}`, id)
	prom.WaitQuery(t, holder, 30*time.Second, func(s []e2e.PromSample) bool { return len(s) == 1 })
	prom.WaitQuery(t, `sum(rdma_cdi_hook_containers_total)`, 10*time.Second, func(s []e2e.PromSample) bool { return len(s) == 1 && s[0].Value >= 1 })
	checkDashboard(t, prom, agentSamples(t, addr))

	// Traffic per container: the dashboard's join.
	perContainer := `sum by (container_id) (sum by (device) (rate(rdma_port_data_received_bytes_total[4s]))
	  * on (device) group_right max by (device, container_id) (rdma_cdi_hca_holder_info))`
	prom.WaitQuery(t, perContainer, 30*time.Second, func(s []e2e.PromSample) bool {
		return len(s) == 1 && s[0].Metric["container_id"] == id && s[0].Value > 3.5e6
	})

	if _, se, err := p.Podman("rm", "-f", "-t", "0", id); err != nil {
		t.Fatalf("podman rm: %v\n%s", err, se)
	}
	prom.WaitQuery(t, holder, 30*time.Second, func(s []e2e.PromSample) bool { return len(s) == 0 })
}

// grafanaDashboard is the part of deploy/grafana/rdma-cdi.json checked here.
type grafanaDashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

var metricNameRE = regexp.MustCompile(`\brdma_[a-z0-9_]+\b`)

// checkDashboard: the shipped dashboard parses, its panels have unique ids
// and queries, every metric it names is in samples (a real scrape), and every
// query, with Grafana's variables filled in, is accepted by prom.
func checkDashboard(t *testing.T, prom *e2e.PromServer, samples []metrics.Sample) {
	t.Helper()
	var d grafanaDashboard
	if err := json.Unmarshal([]byte(e2e.ShippedManifest(t, "deploy/grafana/rdma-cdi.json")), &d); err != nil {
		t.Fatalf("deploy/grafana/rdma-cdi.json: %v", err)
	}
	fill := strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*", "$namespace", ".*")
	ids := map[int]bool{}
	queries := 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			queries++
			for _, name := range metricNameRE.FindAllString(target.Expr, -1) {
				if len(metrics.Find(samples, name, nil)) == 0 {
					t.Errorf("panel %q queries %s, which the agent does not export", p.Title, name)
				}
			}
			if _, err := prom.Query(fill.Replace(target.Expr)); err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
			}
		}
	}
	t.Logf("dashboard %q: %d panels, %d queries", d.Title, len(d.Panels), queries)
}

// TestTopOnceJSON: `rdma-cdi top --once --json` against the agent shows
// mlx5_1 receiving at the fixture counter's pace and the container that
// holds it.
func TestTopOnceJSON(t *testing.T) {
	w, node, addr, vendor := metricsWatch(t)
	e2e.MoveCounter(t, node, "mlx5_1")
	_, id := holdingContainer(t, w, vendor, "mlx5_1")
	var hcas []struct {
		Device           string   `json:"device"`
		State            string   `json:"state"`
		RateGbps         float64  `json:"rateGbps"`
		RxBytesPerSecond float64  `json:"rxBytesPerSecond"`
		Holders          []string `json:"holders"`
	}
	var mlx51 string
	watchWait(t, 30*time.Second, "top to show mlx5_1 held and receiving", func() bool {
		out, err := exec.Command(e2e.Binary(t, "rdma-cdi-agent"), "top", "--address", addr, "--once", "--json", "--interval", "1s").Output()
		if err != nil {
			t.Fatalf("rdma-cdi top --once --json: %v", err)
		}
		if err := json.Unmarshal(out, &hcas); err != nil {
			t.Fatalf("top --json: %v\n%s", err, out)
		}
		for _, h := range hcas {
			if h.Device == "mlx5_1" {
				mlx51 = fmt.Sprintf("%+v", h)
				return h.State == "ACTIVE" && h.RateGbps == 100 && h.RxBytesPerSecond > 3e6 && h.RxBytesPerSecond < 5e6 &&
					len(h.Holders) == 1 && h.Holders[0] == id[:12]
			}
		}
		return false
	})
	if len(hcas) != 9 {
		t.Errorf("%d HCAs, want seed 002's 9", len(hcas))
	}
	t.Logf("mlx5_1: %s", mlx51)
}

// TestTopInTmux drives the refreshing view in a real terminal (tmux): the
// screen shows the table with mlx5_1's traffic and holder, and Ctrl-C ends
// it.
func TestTopInTmux(t *testing.T) {
	e2e.RequireBinary(t, "tmux")
	w, node, addr, vendor := metricsWatch(t)
	e2e.MoveCounter(t, node, "mlx5_1")
	_, id := holdingContainer(t, w, vendor, "mlx5_1")
	server := e2e.UniqueID("top-")
	tmux := func(args ...string) (string, error) {
		out, err := exec.Command("tmux", append([]string{"-L", server}, args...)...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() { _, _ = tmux("kill-server") })
	e2e.Binary(t, "rdma-cdi-agent") // `rdma-cdi top` runs it
	if out, err := tmux("new-session", "-d", "-s", "top", "-x", "132", "-y", "30",
		e2e.Binary(t, "rdma-cdi")+" top --address "+addr+" --interval 1s"); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	var screen string
	mlx51 := regexp.MustCompile(`(?m)^mlx5_1 +ACTIVE +100 Gb/s +[34]\.[0-9] MB +0 B +` + id[:12] + ` *$`)
	// A capture can fall in the middle of a redraw: wait for a whole
	// table, mlx5_1's row and the last one.
	watchWait(t, 30*time.Second, "the screen to show mlx5_1 held and receiving", func() bool {
		screen, _ = tmux("capture-pane", "-p", "-t", "top")
		return mlx51.MatchString(screen) && strings.Contains(screen, "mlx5_8 ")
	})
	for _, want := range []string{"rdma-cdi top: http://" + addr + "/metrics every 1s", "HCA", "HELD BY", "mlx5_8 "} {
		if !strings.Contains(screen, want) {
			t.Errorf("the screen lacks %q:\n%s", want, screen)
		}
	}
	if _, err := tmux("send-keys", "-t", "top", "C-c"); err != nil {
		t.Fatal(err)
	}
	watchWait(t, 10*time.Second, "top to exit on Ctrl-C", func() bool {
		_, err := tmux("has-session", "-t", "top")
		return err != nil
	})
	t.Logf("screen:\n%s", screen)
}

// TestMetricsHookFailureCounted: the real hook binary, given a state that
// does not parse, fails; its report reaches the agent, which counts it by
// step and reason.
func TestMetricsHookFailureCounted(t *testing.T) {
	w, _, addr, _ := metricsWatch(t)
	failures := func() []metrics.Sample {
		return metrics.Find(agentSamples(t, addr), "rdma_cdi_hook_failures_total", map[string]string{"reason": "invalid", "step": "load"})
	}
	if got := failures(); len(got) != 1 || got[0].Value != 0 {
		t.Fatalf("before: %v, want one sample, 0", got)
	}
	hook := exec.Command(e2e.Binary(t, "rdma-cdi-hook"), "--config", w.config, "hook", "create-runtime", "--steps", "memlock")
	hook.Stdin = strings.NewReader("{not an OCI state")
	if out, err := hook.CombinedOutput(); err == nil || !strings.Contains(string(out), "OCI state on stdin") {
		t.Fatalf("the hook with a broken state: %v\n%s", err, out)
	}
	watchWait(t, 10*time.Second, "the failure counted", func() bool { got := failures(); return len(got) == 1 && got[0].Value == 1 })
}
