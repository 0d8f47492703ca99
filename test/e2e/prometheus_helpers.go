package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
)

// SyncBuffer is a bytes.Buffer safe for a writer process and a reader test.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// PromServer is Debian's Prometheus scraping the given targets every
// second, with a private TSDB; the test queries it over its HTTP API.
type PromServer struct {
	URL    string
	client *http.Client
	log    *SyncBuffer
}

// PromSample is one series of an instant query's vector result.
type PromSample struct {
	Metric map[string]string
	Value  float64
}

// StartPrometheus runs /usr/bin/prometheus on listen, scraping targets
// (HOST:PORT) as job rdma-cdi, with token as its bearer token ("" none).
// command runs it (exec.Command, or a node's InNode to run it in the node's
// namespaces); dial, when set, is how the test reaches listen (a node's
// DialContext).
func StartPrometheus(t testing.TB, listen string, targets []string, token string,
	command func(name string, args ...string) *exec.Cmd, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *PromServer {
	t.Helper()
	RequireBinary(t, "prometheus")
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, target := range targets {
		quoted[i] = strconv.Quote(target)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  - job_name: rdma-cdi
    static_configs:
      - targets: [%s]
`, strings.Join(quoted, ", "))
	if token != "" {
		tokenPath := filepath.Join(dir, "token")
		if err := os.WriteFile(tokenPath, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg += fmt.Sprintf("    authorization: {type: Bearer, credentials_file: %q}\n", tokenPath)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &PromServer{URL: "http://" + listen, client: &http.Client{Timeout: 10 * time.Second}, log: &SyncBuffer{}}
	if dial != nil {
		p.client.Transport = &http.Transport{DialContext: dial}
	}
	cmd := command("/usr/bin/prometheus", "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", p.log.String())
		}
	})
	p.WaitQuery(t, `up{job="rdma-cdi"}`, 60*time.Second, func(s []PromSample) bool {
		up := 0
		for _, x := range s {
			if x.Value == 1 {
				up++
			}
		}
		return up == len(targets)
	})
	return p
}

// Query runs an instant query.
func (p *PromServer) Query(expr string) ([]PromSample, error) {
	resp, err := p.client.Get(p.URL + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, body.Error)
	}
	if body.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: a %s, want a vector", expr, body.Data.ResultType)
	}
	out := make([]PromSample, 0, len(body.Data.Result))
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %v", expr, r.Value[1])
		}
		out = append(out, PromSample{Metric: r.Metric, Value: v})
	}
	return out, nil
}

// WaitQuery queries expr every half second until ok accepts the result.
func (p *PromServer) WaitQuery(t testing.TB, expr string, timeout time.Duration, ok func([]PromSample) bool) []PromSample {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last []PromSample
	var lastErr error
	for time.Now().Before(deadline) {
		last, lastErr = p.Query(expr)
		if lastErr == nil && ok(last) {
			return last
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("prometheus: %s never as expected in %v: last %v (error %v)", expr, timeout, last, lastErr)
	return nil
}

// FreeLocalPort is a TCP port on 127.0.0.1 that was free a moment ago.
func FreeLocalPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// ScrapeWith reads a /metrics endpoint with client (one that dials into a
// node's network namespace, for a Kubernetes node's agent) and parses it.
func ScrapeWith(t *testing.T, client *http.Client, url string) []metrics.Sample {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s", url, resp.StatusCode, body)
	}
	samples, err := metrics.ParseScrape(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return samples
}

// MoveCounter makes device's port 1 receive 1 MB every 250 ms (4 MB/s)
// until the test ends.
func MoveCounter(t *testing.T, node *FixtureNode, device string) {
	counter := filepath.Join(node.Sys, "class/infiniband", device, "ports/1/counters/port_rcv_data")
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
				words += 250_000 // 4-octet words
				if err := os.WriteFile(counter, []byte(strconv.FormatUint(words, 10)+"\n"), 0o444); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); moving.Wait() })
}
