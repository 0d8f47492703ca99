package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const maxScrapesInFlight = 3

// Path is where the metrics are served, the nonResourceURL a Kubernetes
// role allows to get (metrics.auth kubernetes).
const Path = "/metrics"

// Guard wraps the /metrics handler with a check of who asks: it answers
// the requests it refuses and passes the others on.
type Guard func(http.Handler) http.Handler

// Handler serves /metrics, /healthz (the agent is alive: it generated
// within three rescan intervals) and /readyz (it has generated once), to
// anyone.
func (e *Exporter) Handler() http.Handler {
	return e.GuardedHandler(nil)
}

// GuardedHandler is Handler with /metrics behind guard (nil: none). The
// probes stay open: the kubelet's carry no token, and they name no pod.
func (e *Exporter) GuardedHandler(guard Guard) http.Handler {
	mux := http.NewServeMux()
	// The endpoint is on the node's network: a flood of scrapes gets 503s
	// beyond a few at once, not the agent's CPU.
	var scrape http.Handler = promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: maxScrapesInFlight, Timeout: 10 * time.Second,
	})
	if guard != nil {
		scrape = guard(scrape)
	}
	mux.Handle(Path, scrape)
	mux.HandleFunc("/healthz", probe(e.healthy))
	mux.HandleFunc("/readyz", probe(e.isReady))
	return mux
}

func probe(check func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

func (e *Exporter) healthy() error {
	e.mu.Lock()
	last, stale := e.lastAttempt, e.stale
	e.mu.Unlock()
	if stale > 0 && !last.IsZero() && time.Since(last) > stale {
		return fmt.Errorf("no generation since %s (rescans are due every %v)", last.Format(time.RFC3339), stale/3)
	}
	return nil
}

func (e *Exporter) isReady() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.haveSnap {
		return errors.New("the node has not been discovered yet")
	}
	return nil
}

// Listen binds addr, before the agent starts its work, so that an address
// in use fails the start instead of a later goroutine.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics address %s: %w", addr, err)
	}
	return l, nil
}

// Serve serves GuardedHandler(guard) on l until ctx ends.
func (e *Exporter) Serve(ctx context.Context, l net.Listener, guard Guard) error {
	srv := &http.Server{Handler: e.GuardedHandler(guard), ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	})
	defer stop()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
