package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
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
	e.handleProbes(mux)
	return mux
}

// ProbeHandler serves the probes alone, for the listener the kubelet's
// probes use (ServeProbes).
func (e *Exporter) ProbeHandler() http.Handler {
	mux := http.NewServeMux()
	e.handleProbes(mux)
	return mux
}

func (e *Exporter) handleProbes(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", probe(e.healthy))
	mux.HandleFunc("/readyz", probe(e.isReady))
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

// serverLimits bound what one connection, and all of them together, may
// hold of the agent: the endpoint is on the node's network, where any pod
// can open connections to it.
type serverLimits struct {
	// readHeader bounds a request's headers, read a whole request (ours are
	// GETs without a body): a slow client is cut off.
	readHeader, read time.Duration
	// write bounds a response from the end of its request's headers: the
	// token's reviews (up to 10 s, metricsauth) then the scrape (up to
	// 10 s, promhttp's Timeout), with room to send it.
	write time.Duration
	// idle is how long a keep-alive connection waits for its next request.
	// Without it Go keeps an idle connection forever (ReadHeaderTimeout
	// does not apply between requests), and a flood of them exhausts the
	// agent's memory. Prometheus (every 15 s or more) and the kubelet's
	// probes (a connection each) just dial again.
	idle time.Duration
	// maxConns is the most connections served at once; beyond it a new one
	// is closed as soon as it is accepted. A scraper or two and the probes
	// need a few.
	maxConns int
	// perSource is the most of them one client address holds (0: no
	// bound): a single pod holding every slot (round 3, M5) would keep
	// Prometheus out.
	perSource int
}

var defaultLimits = serverLimits{
	readHeader: 5 * time.Second, read: 10 * time.Second, write: 30 * time.Second,
	idle: 30 * time.Second, maxConns: 64, perSource: 8,
}

// probeLimits are the probe listener's. It is on the node's loopback, where
// only the kubelet (a connection per probe) and host processes reach it;
// its slots are its own, so clients filling the metrics endpoint's slots
// cannot fail the liveness probe and restart the agent.
var probeLimits = serverLimits{
	readHeader: 5 * time.Second, read: 5 * time.Second, write: 5 * time.Second,
	idle: 10 * time.Second, maxConns: 16,
}

// Serve serves GuardedHandler(guard) on l until ctx ends.
func (e *Exporter) Serve(ctx context.Context, l net.Listener, guard Guard) error {
	return serve(ctx, l, e.GuardedHandler(guard), defaultLimits)
}

// ServeProbes serves ProbeHandler on l until ctx ends.
func (e *Exporter) ServeProbes(ctx context.Context, l net.Listener) error {
	return serve(ctx, l, e.ProbeHandler(), probeLimits)
}

func serve(ctx context.Context, l net.Listener, h http.Handler, lim serverLimits) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.readHeader, ReadTimeout: lim.read, WriteTimeout: lim.write, IdleTimeout: lim.idle,
		MaxHeaderBytes: 64 << 10, // a bearer token (metricsauth takes up to 16 KiB) and a few headers
	}
	stop := context.AfterFunc(ctx, func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	})
	defer stop()
	if err := srv.Serve(newLimitListener(l, lim.maxConns, lim.perSource)); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// limitListener accepts at most cap(slots) connections open at once, and
// perSource of them from one client address, and closes the others at
// once: a flood is refused, not queued or held. (golang.org/x/net/netutil's
// LimitListener would leave them waiting in the kernel's backlog, the
// probes behind them, and counts no source.)
type limitListener struct {
	net.Listener
	slots     chan struct{} // one per connection open
	perSource int
	mu        sync.Mutex
	bySource  map[netip.Addr]int
}

func newLimitListener(l net.Listener, n, perSource int) *limitListener {
	return &limitListener{Listener: l, slots: make(chan struct{}, n), perSource: perSource, bySource: map[netip.Addr]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceOf(c)
		if !l.takeSource(src) {
			_ = c.Close()
			continue
		}
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: c, release: func() { <-l.slots; l.giveSource(src) }}, nil
		default:
			l.giveSource(src)
			_ = c.Close()
		}
	}
}

// sourceOf is c's client address; the zero Addr for a connection that is
// not TCP (all of those share one count).
func sourceOf(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

func (l *limitListener) takeSource(src netip.Addr) bool {
	if l.perSource <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bySource[src] >= l.perSource {
		return false
	}
	l.bySource[src]++
	return true
}

func (l *limitListener) giveSource(src netip.Addr) {
	if l.perSource <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bySource[src]--; l.bySource[src] <= 0 {
		delete(l.bySource, src)
	}
}

// limitedConn gives its slot back once, at its first Close (the server may
// close a connection more than once).
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
