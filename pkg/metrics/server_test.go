package metrics

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// countingListener counts the connections the server holds open, at the
// socket: what a flood costs the agent.
type countingListener struct {
	net.Listener
	mu         sync.Mutex
	open, peak int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.open++
	l.peak = max(l.peak, l.open)
	l.mu.Unlock()
	return &countedConn{Conn: c, l: l}, nil
}

func (l *countingListener) counts() (open, peak int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.peak
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// serveOn serves a ready exporter's metrics endpoint with lim on a real
// loopback listener until the test ends.
func serveOn(t *testing.T, lim serverLimits) (addr string, l *countingListener) {
	t.Helper()
	return serveHandler(t, New(Options{Mode: "watch", Version: "test"}).GuardedHandler(nil), lim)
}

// serveHandler serves h with lim on a real loopback listener until the
// test ends.
func serveHandler(t *testing.T, h http.Handler, lim serverLimits) (addr string, l *countingListener) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l = &countingListener{Listener: raw}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, l, h, lim) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return raw.Addr().String(), l
}

// keepAlive is a client connection that asks /healthz over HTTP/1.1
// keep-alive.
type keepAlive struct {
	net.Conn
	r *bufio.Reader
}

func dialKeepAlive(t *testing.T, addr string) *keepAlive {
	t.Helper()
	return dialKeepAliveFrom(t, "", addr)
}

// dialKeepAliveFrom is dialKeepAlive from the local address src ("": the
// kernel's choice; another loopback address is another client).
func dialKeepAliveFrom(t *testing.T, src, addr string) *keepAlive {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keepAlive{Conn: c, r: bufio.NewReader(c)}
}

// healthz asks /healthz on the connection and reads the whole answer.
func (c *keepAlive) healthz() error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || resp.Close {
		return fmt.Errorf("/healthz: %s (close %v)", resp.Status, resp.Close)
	}
	return nil
}

// closedByServer waits up to wait for the server to close the connection.
func (c *keepAlive) closedByServer(wait time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.r.ReadByte()
	var ne net.Error
	switch {
	case err == nil:
		return errors.New("the server sent bytes nobody asked for")
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("still open after %v", wait)
	default:
		return nil // EOF or reset: closed
	}
}

// slowClientsHeld is defaultLimits where no timeout but the one a test
// sets closes a connection within the test.
var slowClientsHeld = serverLimits{readHeader: time.Hour, read: time.Hour, write: time.Hour, idle: time.Hour, maxConns: defaultLimits.maxConns}

// A keep-alive connection left idle after a request (the 2,000 of issue
// 44) is closed by the server after the idle timeout; it is not held.
func TestIdleConnectionsAreClosed(t *testing.T) {
	if defaultLimits.idle <= 0 || defaultLimits.read <= 0 || defaultLimits.write <= 0 || defaultLimits.maxConns <= 0 {
		t.Fatalf("default limits %+v: every one must be set", defaultLimits)
	}
	lim := slowClientsHeld
	lim.idle = 100 * time.Millisecond
	addr, _ := serveOn(t, lim)
	conns := make([]*keepAlive, 8)
	for i := range conns {
		conns[i] = dialKeepAlive(t, addr)
		if err := conns[i].healthz(); err != nil {
			t.Fatal(err)
		}
	}
	// Far longer than the idle timeout, so that a slow machine does not
	// fail it: what matters is that it ends.
	for i, c := range conns {
		if err := c.closedByServer(10 * time.Second); err != nil {
			t.Fatalf("idle connection %d, idle timeout %v: %v", i, lim.idle, err)
		}
	}
}

// Connections beyond maxConns are closed as soon as they are accepted:
// the server never holds more than maxConns (and the one it is refusing),
// whatever the flood; the connections it serves go on, and a slot given
// back serves the next one.
func TestConnectionsBeyondTheLimitAreRefused(t *testing.T) {
	lim := slowClientsHeld
	lim.maxConns = 4
	addr, l := serveOn(t, lim)
	held := make([]*keepAlive, lim.maxConns)
	for i := range held {
		held[i] = dialKeepAlive(t, addr)
		if err := held[i].healthz(); err != nil {
			t.Fatalf("connection %d within the limit: %v", i, err)
		}
	}
	const flood = 200
	for i := range flood {
		c := dialKeepAlive(t, addr)
		if err := c.closedByServer(10 * time.Second); err != nil {
			t.Fatalf("connection %d beyond the limit of %d: %v", lim.maxConns+i, lim.maxConns, err)
		}
		c.Close()
	}
	if open, peak := l.counts(); open > lim.maxConns || peak > lim.maxConns+1 {
		t.Errorf("the server held %d connections at once (%d now) after a flood of %d, want at most %d (and the one it refuses)",
			peak, open, flood, lim.maxConns)
	}
	for i, c := range held[1:] {
		if err := c.healthz(); err != nil {
			t.Errorf("connection %d held through the flood: %v", i+1, err)
		}
	}
	held[0].Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c := dialKeepAlive(t, addr)
		err := c.healthz()
		c.Close()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a connection after one was given back: %v", err)
		}
	}
}

// The probes' listener has slots of its own: with every slot of the
// metrics endpoint held by keep-alive clients (issue 52's M5: any pod can
// hold them), a new connection to the endpoint is closed unanswered while
// the probes still answer.
func TestProbesAnswerWhileTheMetricsEndpointIsFull(t *testing.T) {
	e := New(Options{Mode: "watch", Version: "test"})
	lim := slowClientsHeld
	lim.maxConns = 4
	metricsAddr, _ := serveHandler(t, e.GuardedHandler(nil), lim)
	probesAddr, _ := serveHandler(t, e.ProbeHandler(), probeLimits)
	for i := range lim.maxConns {
		if err := dialKeepAlive(t, metricsAddr).healthz(); err != nil {
			t.Fatalf("metrics connection %d: %v", i, err)
		}
	}
	if err := dialKeepAlive(t, metricsAddr).closedByServer(10 * time.Second); err != nil {
		t.Fatalf("a connection beyond the metrics endpoint's %d slots: %v", lim.maxConns, err)
	}
	for i := range probeLimits.maxConns {
		if err := dialKeepAlive(t, probesAddr).healthz(); err != nil {
			t.Fatalf("probe %d while the metrics endpoint is full: %v", i, err)
		}
	}
}

// One client address holds at most perSource of the slots (round 3, M5:
// one pod's 64 keep-alive connections kept Prometheus out): its next
// connection is closed unanswered, while another address still gets one.
func TestOneSourceHoldsAtMostItsShare(t *testing.T) {
	if defaultLimits.perSource <= 0 || defaultLimits.perSource*4 > defaultLimits.maxConns {
		t.Fatalf("default limits %+v: a source's share must be set and leave room for three others", defaultLimits)
	}
	lim := slowClientsHeld
	lim.perSource = 4
	addr, _ := serveOn(t, lim)
	dialFrom := func(src string) *keepAlive { return dialKeepAliveFrom(t, src, addr) }
	for i := range lim.perSource {
		if err := dialFrom("127.0.0.1").healthz(); err != nil {
			t.Fatalf("connection %d within the source's share: %v", i, err)
		}
	}
	if err := dialFrom("127.0.0.1").closedByServer(10 * time.Second); err != nil {
		t.Fatalf("a connection beyond the source's share of %d: %v", lim.perSource, err)
	}
	if err := dialFrom("127.0.0.2").healthz(); err != nil {
		t.Fatalf("another source while the first holds its share: %v", err)
	}
}
