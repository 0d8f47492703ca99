package health

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testPolicy is the shipped defaults' shape with short windows.
func testPolicy() Policy {
	return Policy{
		FlapWindow: 10 * time.Minute, FlapThreshold: 3,
		ErrorWindow: 5 * time.Minute, ErrorThreshold: 25, SymbolErrorThreshold: 3000,
		QuietPeriod: 10 * time.Minute,
	}
}

// port is an ACTIVE 100G 4X port of an MT4125 with the given counters.
func port(device string, counters map[string]uint64) PortSample {
	return PortSample{Device: device, Model: "MT4125", Port: 1, LinkLayer: "Ethernet", State: "ACTIVE",
		Rate: "100 Gb/sec (4X EDR)", RateGbps: 100, Width: 4, Counters: counters}
}

// feeder samples one port every step, applying f to its counters first.
type feeder struct {
	tr   *Tracker
	now  time.Time
	step time.Duration
	p    PortSample
}

func newFeeder(p Policy, ps PortSample) *feeder {
	if ps.Counters == nil {
		ps.Counters = map[string]uint64{}
	}
	return &feeder{tr: NewTracker(p), now: t0, step: 10 * time.Second, p: ps}
}

// next advances one step, adds add to the counters and observes.
func (f *feeder) next(add map[string]uint64) ([]Condition, bool) {
	f.now = f.now.Add(f.step)
	c := map[string]uint64{}
	for k, v := range f.p.Counters {
		c[k] = v + add[k]
	}
	f.p.Counters = c
	return f.tr.Observe(Sample{At: f.now, Ports: []PortSample{f.p}})
}

func codes(conds []Condition) string {
	var out []string
	for _, c := range conds {
		out = append(out, c.Device+":"+c.Code+":"+string(c.Level))
	}
	return strings.Join(out, ",")
}

// A busy healthy port: huge traffic counters racing, error counters
// near their limits since boot and not moving; nothing is raised over
// hours of samples.
func TestBusyHealthyPortNeverTaints(t *testing.T) {
	f := newFeeder(testPolicy(), port("mlx5_1", map[string]uint64{
		"port_xmit_data": 1 << 62, "port_rcv_data": 1 << 62, "symbol_error": 1 << 40, "link_downed": 65535, "port_rcv_errors": 1 << 30,
	}))
	for i := 0; i < 6*60*3; i++ {
		if conds, changed := f.next(map[string]uint64{"port_xmit_data": 12_500_000_000, "port_rcv_data": 12_500_000_000, "port_rcv_packets": 3e8}); len(conds) > 0 || changed {
			t.Fatalf("sample %d: %s", i, codes(conds))
		}
	}
}

// A single error of every kind, or a single flap, never raises anything;
// nor does a trickle of errors under the threshold.
func TestSingleEventsNeverTaint(t *testing.T) {
	f := newFeeder(testPolicy(), port("mlx5_1", map[string]uint64{}))
	f.next(nil) // baseline
	one := map[string]uint64{CounterLinkDowned: 1}
	for _, name := range ErrorCounters {
		one[name] = 1
	}
	if conds, _ := f.next(one); len(conds) > 0 {
		t.Fatalf("one of each: %s", codes(conds))
	}
	for i := 0; i < 200; i++ { // 1 symbol error a sample: 30 in the window
		if conds, _ := f.next(map[string]uint64{CounterSymbolError: 1}); len(conds) > 0 {
			t.Fatalf("a trickle: %s", codes(conds))
		}
	}
}

// Counters since boot are a baseline, and a counter going back (a reset)
// is a new baseline, never a burst.
func TestBaselineAndReset(t *testing.T) {
	f := newFeeder(testPolicy(), port("mlx5_1", map[string]uint64{CounterLinkDowned: 500, "port_rcv_errors": 1e6}))
	if conds, _ := f.next(nil); len(conds) > 0 {
		t.Fatal(codes(conds))
	}
	f.p.Counters = map[string]uint64{CounterLinkDowned: 0, "port_rcv_errors": 0}
	if conds, _ := f.next(nil); len(conds) > 0 {
		t.Fatalf("after a reset: %s", codes(conds))
	}
	if conds, _ := f.next(map[string]uint64{"port_rcv_errors": 10}); len(conds) > 0 {
		t.Fatalf("10 after a reset: %s", codes(conds))
	}
}

// Three link_downed increments within the window raise LinkFlapping
// (Unhealthy) at the third; it clears only once the window holds fewer
// and the quiet period has passed.
func TestFlapsWithinWindow(t *testing.T) {
	p := testPolicy()
	f := newFeeder(p, port("mlx5_8", map[string]uint64{CounterLinkDowned: 7}))
	f.next(nil)
	flap := map[string]uint64{CounterLinkDowned: 1}
	f.next(flap)
	f.step = 2 * time.Minute
	if conds, _ := f.next(flap); len(conds) > 0 {
		t.Fatalf("two flaps: %s", codes(conds))
	}
	conds, changed := f.next(flap)
	if !changed || codes(conds) != "mlx5_8:LinkFlapping:Unhealthy" {
		t.Fatalf("third flap: %s, changed %v", codes(conds), changed)
	}
	if r := conds[0].Reason; !strings.Contains(r, "link_downed 10") || !strings.Contains(r, "3 times") {
		t.Fatalf("reason %q names neither the counter nor the count", r)
	}
	raised := f.now
	// The window empties 10 minutes after the first flap; the quiet
	// period runs from the last sample that held three.
	f.step = 30 * time.Second
	var cleared time.Time
	for f.now.Sub(raised) < time.Hour {
		conds, changed = f.next(nil)
		if changed {
			if len(conds) != 0 {
				t.Fatalf("changed to %s", codes(conds))
			}
			cleared = f.now
			break
		}
	}
	lastTrue := raised.Add(-4*time.Minute - 10*time.Second).Add(p.FlapWindow) // first flap + window
	if cleared.IsZero() || cleared.Before(lastTrue.Add(p.QuietPeriod-30*time.Second)) || cleared.After(lastTrue.Add(p.QuietPeriod+time.Minute)) {
		t.Fatalf("cleared at %v after raising; want about window then quiet period (%v)", cleared.Sub(raised), lastTrue.Add(p.QuietPeriod).Sub(raised))
	}
}

// Flaps spread wider than the window never add up.
func TestFlapsOutsideWindow(t *testing.T) {
	f := newFeeder(testPolicy(), port("mlx5_8", map[string]uint64{}))
	f.next(nil)
	f.step = 6 * time.Minute
	for i := 0; i < 10; i++ {
		if conds, _ := f.next(map[string]uint64{CounterLinkDowned: 1}); len(conds) > 0 {
			t.Fatalf("flap %d: %s", i, codes(conds))
		}
	}
}

// A port seen leaving ACTIVE counts as a flap where link_downed does not
// move (or is absent); a link_downed increment seen with the same
// transition counts once.
func TestFlapsFromStateTransitions(t *testing.T) {
	f := newFeeder(testPolicy(), port("mlx5_8", nil))
	delete(f.p.Counters, CounterLinkDowned)
	f.next(nil)
	var conds []Condition
	for i := 0; i < 3; i++ {
		f.p.State = "DOWN"
		conds, _ = f.next(nil)
		f.p.State = "ACTIVE"
		f.next(nil)
	}
	if codes(conds) != "mlx5_8:LinkFlapping:Unhealthy" || !strings.Contains(conds[0].Reason, "link_downed not available") {
		t.Fatalf("three transitions: %s %v", codes(conds), conds)
	}
	g := newFeeder(testPolicy(), port("mlx5_8", map[string]uint64{CounterLinkDowned: 0}))
	g.next(nil)
	g.p.State = "DOWN"
	g.next(map[string]uint64{CounterLinkDowned: 1})
	g.p.State = "ACTIVE"
	if conds, _ := g.next(nil); len(conds) > 0 {
		t.Fatalf("one flap seen twice counted twice: %s", codes(conds))
	}
}

// An error burst over the threshold within the window raises LinkErrors
// naming the counter; symbol_error has its own, higher threshold.
func TestErrorBurstThreshold(t *testing.T) {
	f := newFeeder(testPolicy(), port("mlx5_3", map[string]uint64{"port_rcv_errors": 100, CounterSymbolError: 0}))
	f.next(nil)
	if conds, _ := f.next(map[string]uint64{"port_rcv_errors": 24, CounterSymbolError: 2999}); len(conds) > 0 {
		t.Fatalf("under both thresholds: %s", codes(conds))
	}
	conds, changed := f.next(map[string]uint64{"port_rcv_errors": 1})
	if !changed || codes(conds) != "mlx5_3:LinkErrors:Unhealthy" || !strings.Contains(conds[0].Reason, "port_rcv_errors rose by 25") || !strings.Contains(conds[0].Reason, "now 125") {
		t.Fatalf("25 receive errors: %s %v", codes(conds), conds)
	}
	conds, _ = f.next(map[string]uint64{CounterSymbolError: 1})
	if len(conds) != 2 || !strings.Contains(conds[0].Reason+conds[1].Reason, "symbol_error rose by 3000") {
		t.Fatalf("3000 symbol errors: %v", conds)
	}
	// Errors of several counters never add up: each has its threshold.
	g := newFeeder(testPolicy(), port("mlx5_4", map[string]uint64{}))
	g.next(nil)
	if conds, _ := g.next(map[string]uint64{"port_rcv_errors": 20, "link_error_recovery": 20, "local_link_integrity_errors": 20}); len(conds) > 0 {
		t.Fatalf("20 of three counters: %s", codes(conds))
	}
}

// Hysteresis: a condition stays while the trigger holds and for the quiet
// period after, and a new burst within it keeps it.
func TestHysteresisQuietPeriod(t *testing.T) {
	p := testPolicy()
	p.ErrorWindow, p.QuietPeriod = time.Minute, 3*time.Minute
	f := newFeeder(p, port("mlx5_5", map[string]uint64{"link_error_recovery": 0}))
	f.next(nil)
	if conds, _ := f.next(map[string]uint64{"link_error_recovery": 30}); len(conds) != 1 {
		t.Fatalf("burst: %s", codes(conds))
	}
	burst := f.now
	f.step = 30 * time.Second
	for f.now.Sub(burst) < 3*time.Minute {
		if conds, _ := f.next(nil); len(conds) != 1 {
			t.Fatalf("cleared %v after the burst, within window + quiet period", f.now.Sub(burst))
		}
	}
	f.next(map[string]uint64{"link_error_recovery": 30}) // again: the quiet period restarts
	again := f.now
	// The window holds it 30 s more (the sample a minute on no longer
	// does), then the quiet period.
	for f.now.Sub(again) < 3*time.Minute {
		if conds, _ := f.next(nil); len(conds) != 1 {
			t.Fatalf("cleared %v after the second burst", f.now.Sub(again))
		}
	}
	f.next(nil)
	if conds, _ := f.next(nil); len(conds) != 0 {
		t.Fatalf("still %s long after", codes(conds))
	}
}

// A port below its model's best on the node, its own best, or the
// configured rate is Degraded; the message names the rate and why.
func TestDegradedLink(t *testing.T) {
	tr := NewTracker(testPolicy())
	at := t0
	sample := func(ports ...PortSample) []Condition {
		at = at.Add(10 * time.Second)
		conds, _ := tr.Observe(Sample{At: at, Ports: ports})
		return conds
	}
	a, b := port("mlx5_1", nil), port("mlx5_2", nil)
	mgmt := port("mlx5_0", nil)
	mgmt.Model, mgmt.Rate, mgmt.RateGbps, mgmt.Width = "MT4119", "25 Gb/sec (1X EDR)", 25, 1
	if conds := sample(mgmt, a, b); len(conds) > 0 {
		t.Fatalf("healthy node: %s", codes(conds))
	}
	// mlx5_2 trains at 2X: half its peers' rate.
	b.Rate, b.RateGbps, b.Width = "50 Gb/sec (2X EDR)", 50, 2
	conds := sample(mgmt, a, b)
	if codes(conds) != "mlx5_2:LinkDegraded:Degraded" || !strings.Contains(conds[0].Reason, `"50 Gb/sec (2X EDR)"`) || !strings.Contains(conds[0].Reason, "100 Gb/s 4X") {
		t.Fatalf("2X: %s %v", codes(conds), conds)
	}
	// Its own best alone: the peer down (not judged, not a peer).
	a.State = "DOWN"
	if conds := sample(mgmt, a, b); codes(conds) != "mlx5_2:LinkDegraded:Degraded" || !strings.Contains(conds[0].Reason, "own best") && !strings.Contains(conds[0].Reason, "mlx5_1") {
		t.Fatalf("own best: %v", conds)
	}
	// Same rate, fewer lanes (a faster lane speed): still degraded.
	c := port("mlx5_3", nil)
	c.Rate, c.Width = "100 Gb/sec (2X HDR)", 2
	tr2 := NewTracker(testPolicy())
	conds, _ = tr2.Observe(Sample{At: t0, Ports: []PortSample{port("mlx5_1", nil), c}})
	if codes(conds) != "mlx5_3:LinkDegraded:Degraded" {
		t.Fatalf("2X at the same rate: %s", codes(conds))
	}
	// A configured expectation: by HCA type, on a port first seen slow.
	p := testPolicy()
	p.ExpectedRates = map[string]float64{"MT4129": 400}
	d := port("mlx5_9", nil)
	d.Model, d.Rate, d.RateGbps, d.Width = "MT4129", "200 Gb/sec (4X HDR)", 200, 4
	conds, _ = NewTracker(p).Observe(Sample{At: t0, Ports: []PortSample{d}})
	if codes(conds) != "mlx5_9:LinkDegraded:Degraded" || !strings.Contains(conds[0].Reason, "health.expected_rate_gbps MT4129") {
		t.Fatalf("expected 400: %v", conds)
	}
	// A port that is not ACTIVE is the binary rule's, not degraded.
	d.State = "DOWN"
	if conds, _ := NewTracker(p).Observe(Sample{At: t0, Ports: []PortSample{d}}); len(conds) > 0 {
		t.Fatalf("down port: %s", codes(conds))
	}
}

// A PCIe function below its own maximum speed or width is Degraded;
// unknown values (a VF's) are not judged.
func TestDegradedPCIe(t *testing.T) {
	for _, tc := range []struct {
		link PCILink
		want string
	}{
		{PCILink{Device: "mlx5_1", Speed: 16, MaxSpeed: 16, Width: 16, MaxWidth: 16}, ""},
		{PCILink{Device: "mlx5_1", Speed: 16, MaxSpeed: 16, Width: 8, MaxWidth: 16}, "PCIe link at 16 GT/s x8"},
		{PCILink{Device: "mlx5_1", Speed: 8, MaxSpeed: 16, Width: 16, MaxWidth: 16}, "below the function's 16 GT/s x16"},
		{PCILink{Device: "mlx5_9"}, ""},
		{PCILink{Device: "mlx5_9", Speed: 2.5, Width: 1}, ""},
	} {
		conds, _ := NewTracker(testPolicy()).Observe(Sample{At: t0, PCI: []PCILink{tc.link}})
		switch {
		case tc.want == "" && len(conds) > 0:
			t.Errorf("%+v: %v", tc.link, conds)
		case tc.want != "" && (len(conds) != 1 || conds[0].Code != CodePCIeDegraded || conds[0].Level != LevelDegraded || conds[0].Port != 0 || !strings.Contains(conds[0].Reason, tc.want)):
			t.Errorf("%+v: %v, want %q", tc.link, conds, tc.want)
		}
	}
}

// A port that leaves the sample takes its conditions with it (the binary
// rule reports the HCA gone).
func TestGonePortForgotten(t *testing.T) {
	tr := NewTracker(testPolicy())
	slow := port("mlx5_2", nil)
	slow.RateGbps, slow.Rate, slow.Width = 50, "50 Gb/sec (2X EDR)", 2
	if conds, _ := tr.Observe(Sample{At: t0, Ports: []PortSample{port("mlx5_1", nil), slow}}); len(conds) != 1 {
		t.Fatal(codes(conds))
	}
	if conds, changed := tr.Observe(Sample{At: t0.Add(time.Second), Ports: []PortSample{port("mlx5_1", nil)}}); len(conds) != 0 || !changed {
		t.Fatalf("%s %v", codes(conds), changed)
	}
}

func TestSummarizeAndChanges(t *testing.T) {
	conds := []Condition{
		{Device: "mlx5_1", Port: 0, Level: LevelDegraded, Code: CodePCIeDegraded, Reason: "pcie"},
		{Device: "mlx5_1", Port: 1, Level: LevelUnhealthy, Code: CodeLinkFlapping, Reason: "flaps"},
		{Device: "mlx5_1", Port: 2, Level: LevelUnhealthy, Code: CodeLinkErrors, Reason: "errors"},
	}
	u, d := Summarize(conds, nil)
	if u != (Problem{CodeLinkFlapping, "flaps; errors"}) || d != (Problem{CodePCIeDegraded, "pcie"}) {
		t.Fatalf("all ports: %v %v", u, d)
	}
	if u, d := Summarize(conds, []int{2}); u != (Problem{CodeLinkErrors, "errors"}) || d.Code != CodePCIeDegraded {
		t.Fatalf("port 2: %v %v", u, d)
	}
	if u, d := Summarize(nil, nil); !u.Healthy() || !d.Healthy() {
		t.Fatal("none")
	}
	lines := Changes(nil, conds[:1])
	if len(lines) != 1 || !strings.Contains(lines[0], "mlx5_1 is Degraded (PCIeDegraded): pcie") {
		t.Fatalf("%q", lines)
	}
	if lines := Changes(conds[:1], nil); len(lines) != 1 || !strings.Contains(lines[0], "cleared") {
		t.Fatalf("%q", lines)
	}
}

// A listing shows the port's rate or the link's values beside the note,
// so the note is the reason without them; Counter names what a flap or
// an error burst counted.
func TestConditionNoteAndCounter(t *testing.T) {
	slow := port("mlx5_2", nil)
	slow.Rate, slow.RateGbps, slow.Width = "50 Gb/sec (2X EDR)", 50, 2
	conds, _ := NewTracker(testPolicy()).Observe(Sample{At: t0,
		Ports: []PortSample{port("mlx5_1", nil), slow},
		PCI:   []PCILink{{Device: "mlx5_1", Speed: 8, MaxSpeed: 16, Width: 16, MaxWidth: 16}},
	})
	if len(conds) != 2 {
		t.Fatalf("conditions: %s", codes(conds))
	}
	for _, c := range conds {
		if !strings.Contains(c.Reason, c.Note) || c.Note == "" || c.Counter() != "" {
			t.Errorf("%s: reason %q, note %q, counter %q", c.Code, c.Reason, c.Note, c.Counter())
		}
	}
	if got := conds[0].Note; got != "below the function's 16 GT/s x16" {
		t.Errorf("PCIe note %q", got)
	}
	if got := conds[1].Note; got != "below the 100 Gb/s 4X it trains at (mlx5_1, of the same type MT4125)" {
		t.Errorf("rate note %q", got)
	}
	f := newFeeder(testPolicy(), port("mlx5_1", map[string]uint64{CounterSymbolError: 0, CounterLinkDowned: 0}))
	f.next(nil)
	got, _ := f.next(map[string]uint64{CounterSymbolError: 4000, CounterLinkDowned: 3})
	var counters []string
	for _, c := range got {
		counters = append(counters, c.Code+"="+c.Counter())
	}
	if strings.Join(counters, ",") != "LinkErrors=symbol_error,LinkFlapping=link_downed" {
		t.Errorf("counters: %v", counters)
	}
}
