package metrics

// Round 3's red-team reproduction of M5 (../shared/redteam/round3/pkg/metrics),
// ported to today's agent: the metrics endpoint (Exporter.Serve, default
// limits) and, as the chart runs it (--probe-address=127.0.0.1:PORT, the
// kubelet's probes at host 127.0.0.1), the probe listener
// (Exporter.ServeProbes). 64 keep-alive connections, each refreshed by one
// /healthz every 20 s, hold the metrics endpoint; the kubelet-style probes
// go where the chart points them, and to the metrics endpoint as before.
// Logs only.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestRedTeamKeepAlivesStarveTheProbes(t *testing.T) {
	e := New(Options{Sysfs: t.TempDir()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ml, pl := listen(), listen()
	go func() { _ = e.Serve(ctx, ml, nil) }()
	go func() { _ = e.ServeProbes(ctx, pl) }()
	addr, probeAddr := ml.Addr().String(), pl.Addr().String()
	probe := func(when string) {
		c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for _, target := range []struct{ what, addr string }{{"probe listener (the chart's probes)", probeAddr}, {"metrics endpoint", addr}} {
			ok := 0
			var last error
			for range 10 {
				resp, err := c.Get("http://" + target.addr + "/healthz")
				if err == nil {
					resp.Body.Close()
					ok++
				} else {
					last = err
				}
			}
			t.Logf("%s: %s: %d of 10 kubelet-style probes answered (last error: %v)", when, target.what, ok, last)
		}
	}
	probe("before")
	type held struct {
		c net.Conn
		r *bufio.Reader
	}
	var conns []held
	get := func(h held) error {
		if _, err := fmt.Fprintf(h.c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(h.r, nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	for i := range 64 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		h := held{c, bufio.NewReader(c)}
		if err := get(h); err != nil {
			t.Fatalf("conn %d: %v", i, err)
		}
		conns = append(conns, h)
	}
	probe("64 keep-alive connections held")
	for round := 1; round <= 2; round++ {
		time.Sleep(20 * time.Second)
		bad := 0
		for _, h := range conns {
			if get(h) != nil {
				bad++
			}
		}
		probe(fmt.Sprintf("after %d s, each connection refreshed by one GET (%d lost)", 20*round, bad))
	}
	for _, h := range conns {
		h.c.Close()
	}
}
