package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var metricsAddrRE = regexp.MustCompile(`metrics on http://([0-9.:]+)/metrics`)

// metricsWatch starts `rdma-cdi watch` on seed 002 (startWatch) with its
// metrics endpoint on a free port, the hooks reporting to a socket of the
// test's own, and the CDI vendor unique to the test; it returns the
// endpoint's HOST:PORT and the vendor.
func metricsWatch(t *testing.T) (*watcher, *FixtureNode, string, string) {
	t.Helper()
	vendor := UniqueVendor(t)
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

// TestMetricsScrapeIsValid: the agent's scrape passes promtool's lint, and
// its probes answer.
func TestMetricsScrapeIsValid(t *testing.T) {
	RequireBinary(t, "promtool")
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

// TestMetricsPrometheus: Debian's Prometheus scrapes the agent. The data
// rate it computes follows a fixture counter as it moves, and a real podman
// container started with one HCA shows as its holder, joined to its traffic
// by one PromQL expression, until it is removed.
func TestMetricsPrometheus(t *testing.T) {
	w, node, addr, vendor := metricsWatch(t)
	prom := StartPrometheus(t, "127.0.0.1:"+FreeLocalPort(t), []string{addr}, exec.Command, nil)

	rate := `rate(rdma_port_data_received_bytes_total{device="mlx5_1"}[4s])`
	prom.WaitQuery(t, rate, 30*time.Second, func(s []PromSample) bool { return len(s) == 1 && s[0].Value == 0 })

	// 250,000 words (1 MB) every 250 ms: 4 MB/s.
	counter := filepath.Join(node.Sys, "class/infiniband/mlx5_1/ports/1/counters/port_rcv_data")
	stop := make(chan struct{})
	var moving sync.WaitGroup
	moving.Add(1)
	go func() {
		defer moving.Done()
		words := uint64(0)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				words += 250_000
				if err := os.WriteFile(counter, []byte(strconv.FormatUint(words, 10)+"\n"), 0o444); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	defer func() { close(stop); moving.Wait() }()
	got := prom.WaitQuery(t, rate, 30*time.Second, func(s []PromSample) bool {
		return len(s) == 1 && s[0].Value > 3.5e6 && s[0].Value < 4.5e6
	})
	t.Logf("%s = %.0f bytes/s", rate, got[0].Value)

	// A real container with mlx5_1, through the spec the agent keeps.
	spec := filepath.Join(filepath.Dir(w.spec), vendor+"-hca.yaml")
	link := filepath.Join(CDIDir, filepath.Base(spec))
	if err := os.Symlink(spec, link); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(link)
	p := Podman(t)
	so, se, err := p.Podman("run", "-d", "--device", vendor+"/hca=mlx5_1", BB.Ref, "sleep", "600")
	if err != nil {
		t.Fatalf("podman run: %v\n%s", err, se)
	}
	id := strings.TrimSpace(so)
	defer func() { _, _, _ = p.Podman("rm", "-f", "-t", "0", id) }()
	holder := fmt.Sprintf(`rdma_cdi_hca_holder_info{device="mlx5_1",source="hook",container_id=%q}`, id)
	prom.WaitQuery(t, holder, 30*time.Second, func(s []PromSample) bool { return len(s) == 1 })
	prom.WaitQuery(t, `sum(rdma_cdi_hook_containers_total)`, 10*time.Second, func(s []PromSample) bool { return len(s) == 1 && s[0].Value >= 1 })

	// Traffic per container: the dashboard's join.
	perContainer := `sum by (container_id) (sum by (device) (rate(rdma_port_data_received_bytes_total[4s]))
	  * on (device) group_right max by (device, container_id) (rdma_cdi_hca_holder_info))`
	prom.WaitQuery(t, perContainer, 30*time.Second, func(s []PromSample) bool {
		return len(s) == 1 && s[0].Metric["container_id"] == id && s[0].Value > 3.5e6
	})

	if _, se, err := p.Podman("rm", "-f", "-t", "0", id); err != nil {
		t.Fatalf("podman rm: %v\n%s", err, se)
	}
	prom.WaitQuery(t, holder, 30*time.Second, func(s []PromSample) bool { return len(s) == 0 })
}
