package agentcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
	"github.com/rdma-cdi/rdma-cdi/pkg/top"
)

// defaultMetricsPort is the chart's metrics.port, where top looks when the
// config names no metrics address.
const defaultMetricsPort = "9477"

// Top is `rdma-cdi top`: per-HCA throughput and holders, from the agent.
func Top(app *cli.App) *cobra.Command {
	var address string
	var interval time.Duration
	var once, asJSON bool
	cmd := &cobra.Command{
		Use:   "top",
		Short: cli.TopShort,
		Long: `top reads the node agent's /metrics (watch, device-plugin or dra-driver with
metrics.address set; the Helm chart sets it) every --interval and shows, per HCA, its
ports' state, rate, the data received and transmitted per second between two reads,
and who holds it: pods (namespace/pod/container) and containers (their id). With
--once it reads twice, --interval apart, prints one table (or JSON with --json) and
exits. Ctrl-C stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return fmt.Errorf("--interval %v: want a positive duration", interval)
			}
			url, err := agentMetricsURL(address, app.Config.Metrics.Address)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			v := topView{url: url, interval: interval, client: &http.Client{Timeout: 5 * time.Second}}
			if once {
				return v.once(ctx, cmd, asJSON)
			}
			return v.refresh(ctx, cmd)
		},
	}
	f := cmd.Flags()
	f.StringVar(&address, "address", "", "the agent's metrics HOST:PORT (default: metrics.address of the config, else 127.0.0.1:"+defaultMetricsPort+")")
	f.DurationVar(&interval, "interval", 2*time.Second, "time between reads (the rates are over it)")
	f.BoolVar(&once, "once", false, "read twice, print one view and exit")
	f.BoolVar(&asJSON, "json", false, "with --once: print the view as JSON")
	return cmd
}

// agentMetricsURL is the /metrics URL of flag, else of the configured
// address, with an unspecified host read as this host.
func agentMetricsURL(flag, configured string) (string, error) {
	addr := flag
	if addr == "" {
		addr = configured
	}
	if addr == "" {
		addr = ":" + defaultMetricsPort
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("metrics address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/metrics", nil
}

type topView struct {
	url      string
	interval time.Duration
	client   *http.Client
}

type topRead struct {
	samples []metrics.Sample
	at      time.Time
}

func (v topView) read(ctx context.Context) (topRead, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.url, nil)
	if err != nil {
		return topRead{}, err
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return topRead{}, fmt.Errorf("no agent metrics at %s (is watch, device-plugin or dra-driver running with metrics.address set?): %w", v.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return topRead{}, fmt.Errorf("%s: %s", v.url, resp.Status)
	}
	samples, err := metrics.ParseScrape(resp.Body)
	return topRead{samples: samples, at: time.Now()}, err
}

func (v topView) once(ctx context.Context, cmd *cobra.Command, asJSON bool) error {
	prev, err := v.read(ctx)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(v.interval):
	}
	cur, err := v.read(ctx)
	if err != nil {
		return err
	}
	hcas := top.Compute(prev.samples, cur.samples, cur.at.Sub(prev.at))
	if asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(hcas)
	}
	return top.Render(cmd.OutOrStdout(), v.header(cur.at), hcas)
}

// refresh redraws the view every interval until ctx ends. A failed read
// is shown in place of the table and retried.
func (v topView) refresh(ctx context.Context, cmd *cobra.Command) error {
	out := cmd.OutOrStdout()
	prev, err := v.read(ctx)
	if err != nil {
		return err
	}
	tick := time.NewTicker(v.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		cur, err := v.read(ctx)
		fmt.Fprint(out, "\x1b[H\x1b[2J") // home, clear
		if err != nil {
			fmt.Fprintf(out, "%s\n%v\n", v.header(time.Now()), err)
			continue
		}
		if err := top.Render(out, v.header(cur.at), top.Compute(prev.samples, cur.samples, cur.at.Sub(prev.at))); err != nil {
			return err
		}
		prev = cur
	}
}

func (v topView) header(at time.Time) string {
	return fmt.Sprintf("rdma-cdi top: %s every %v, %s", v.url, v.interval, at.Format("15:04:05"))
}
