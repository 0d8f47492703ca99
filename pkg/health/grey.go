package health

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Grey health: a port that stays ACTIVE and still slows a job to its pace
// or hangs it. Check sees only the binary failures; the Tracker reads
// each port's counters, rate and its HCA's PCIe link at every sample and
// keeps the conditions they raise, with hysteresis. It is pure: the agent
// reads the samples (pkg/portstats) and feeds them in with their time.

// Level is how bad a condition is.
type Level string

const (
	// LevelUnhealthy keeps new work off the HCA, as a port that is down
	// does: the DRA driver's unhealthy taint, the device plugin's
	// Unhealthy.
	LevelUnhealthy Level = "Unhealthy"
	// LevelDegraded marks an HCA that works, slower than it should: a
	// taint of its own (<driver>/degraded) that a job may tolerate on
	// purpose; the device plugin only logs and exports it.
	LevelDegraded Level = "Degraded"
)

// Codes of the grey conditions.
const (
	CodeLinkFlapping = "LinkFlapping"
	CodeLinkErrors   = "LinkErrors"
	CodeLinkDegraded = "LinkDegraded"
	CodePCIeDegraded = "PCIeDegraded"
)

// Counter names in ports/N/counters.
const (
	CounterLinkDowned  = "link_downed"
	CounterSymbolError = "symbol_error"
)

// ErrorCounters are the counters whose bursts raise LinkErrors.
var ErrorCounters = []string{CounterSymbolError, "port_rcv_errors", "link_error_recovery", "local_link_integrity_errors", "excessive_buffer_overrun_errors"}

// GreyCounters are the files of ports/N/counters the Tracker reads.
func GreyCounters() []string { return append([]string{CounterLinkDowned}, ErrorCounters...) }

// Condition is one grey condition of a port, or of a whole HCA (Port 0:
// its PCIe link).
type Condition struct {
	Device string
	Port   int
	Level  Level
	Code   string
	// Reason names the counter or attribute and its value.
	Reason string
	// Note is the reason without what a listing shows beside it (the
	// port, its rate, the PCIe link's values): what `rdma-cdi list`
	// prints after a degraded port or link.
	Note string
	// Since is when it was raised.
	Since time.Time
	// subject tells apart conditions of one code on one port (the error
	// counter).
	subject string
}

// Counter is the counter a LinkErrors or LinkFlapping condition counts
// (link_downed for a flap); "" for the others.
func (c Condition) Counter() string {
	switch c.Code {
	case CodeLinkErrors:
		return c.subject
	case CodeLinkFlapping:
		return CounterLinkDowned
	}
	return ""
}

// Problem is the condition as a Problem (its code and reason).
func (c Condition) Problem() Problem { return Problem{Code: c.Code, Reason: c.Reason} }

// Policy is the Tracker's thresholds (config.Health, validated).
type Policy struct {
	FlapWindow    time.Duration
	FlapThreshold int
	ErrorWindow   time.Duration
	// ErrorThreshold is every error counter's but symbol_error's.
	ErrorThreshold       int
	SymbolErrorThreshold int
	QuietPeriod          time.Duration
	// ExpectedRates are rates (Gb/s) ports should train at, by HCA name or
	// HCA type.
	ExpectedRates map[string]float64
}

// PortSample is one port's values at one time.
type PortSample struct {
	Device string
	// Model is the HCA's type (hca_type, e.g. MT4125): ports of one model
	// and link layer should train alike.
	Model     string
	Port      int
	LinkLayer string
	// State is the logical state without its number (ACTIVE).
	State model.PortState
	// Rate is sysfs's rate ("100 Gb/sec (4X EDR)"); RateGbps its value and
	// Width its lanes (the 4 of 4X), 0 when unknown.
	Rate     string
	RateGbps float64
	Width    int
	// Counters are GreyCounters' values; an absent one is not judged.
	Counters map[string]uint64
}

// PCILink is an HCA's PCIe link as its function's sysfs shows it; a value
// of 0 is unknown (a VF, an attribute the kernel lacks).
type PCILink struct {
	Device          string
	Speed, MaxSpeed float64 // GT/s
	Width, MaxWidth int     // lanes
}

// Sample is what the agent read at At.
type Sample struct {
	At    time.Time
	Ports []PortSample
	PCI   []PCILink
}

// Tracker keeps each port's history and the conditions raised. It is not
// safe for concurrent use.
type Tracker struct {
	policy Policy
	ports  map[portKey]*portHistory
	active map[condKey]*activeCondition
}

type portKey struct {
	device string
	port   int
}

type condKey struct {
	portKey
	code, subject string
}

type activeCondition struct {
	cond Condition
	// lastTrue is the last sample whose trigger held: the condition clears
	// a quiet period after it.
	lastTrue time.Time
}

// event is n increments seen at one sample.
type event struct {
	at time.Time
	n  uint64
}

type portHistory struct {
	seen     bool // a previous sample exists: deltas are meaningful
	state    model.PortState
	counters map[string]uint64
	flaps    []event
	errors   map[string][]event
	// The highest rate and width seen while ACTIVE.
	bestRate  float64
	bestWidth int
}

// NewTracker returns a tracker with no history.
func NewTracker(p Policy) *Tracker {
	return &Tracker{policy: p, ports: map[portKey]*portHistory{}, active: map[condKey]*activeCondition{}}
}

// SetPolicy changes the thresholds (a reload); history and conditions stay.
func (t *Tracker) SetPolicy(p Policy) { t.policy = p }

// Observe takes a sample and returns every active condition, sorted, and
// whether the set changed (one raised or cleared). The first sample of a
// port is its baseline: counters since boot are never a burst.
func (t *Tracker) Observe(s Sample) ([]Condition, bool) {
	triggers := map[condKey]Condition{}
	present := map[portKey]bool{}
	peers := bestPeers(s.Ports)
	for _, p := range s.Ports {
		k := portKey{p.Device, p.Port}
		present[k] = true
		h := t.ports[k]
		if h == nil {
			h = &portHistory{errors: map[string][]event{}}
			t.ports[k] = h
		}
		t.flaps(h, p, s.At, triggers)
		t.errorBursts(h, p, s.At, triggers)
		t.linkDegraded(h, p, peers, triggers)
		h.seen, h.state, h.counters = true, p.State, p.Counters
	}
	for _, l := range s.PCI {
		present[portKey{l.Device, 0}] = true
		if c, ok := pciDegraded(l); ok {
			triggers[condKey{portKey{l.Device, 0}, c.Code, ""}] = c
		}
	}
	changed := false
	for k := range t.ports {
		if !present[k] {
			delete(t.ports, k)
		}
	}
	for k := range t.active {
		if !present[k.portKey] { // the port or HCA is gone: Check says so
			delete(t.active, k)
			changed = true
		}
	}
	changed = t.settle(s.At, triggers) || changed
	return t.Conditions(), changed
}

// settle raises new triggers and clears conditions whose trigger has been
// false for the quiet period.
func (t *Tracker) settle(now time.Time, triggers map[condKey]Condition) bool {
	changed := false
	for k, c := range triggers {
		if a, ok := t.active[k]; ok {
			a.lastTrue = now
			continue
		}
		c.Since = now
		t.active[k] = &activeCondition{cond: c, lastTrue: now}
		changed = true
	}
	for k, a := range t.active {
		if _, ok := triggers[k]; !ok && now.Sub(a.lastTrue) >= t.policy.QuietPeriod {
			delete(t.active, k)
			changed = true
		}
	}
	return changed
}

// Conditions returns the active conditions, sorted by device, port, code.
func (t *Tracker) Conditions() []Condition {
	out := make([]Condition, 0, len(t.active))
	for _, a := range t.active {
		out = append(out, a.cond)
	}
	slices.SortFunc(out, compareConditions)
	return out
}

func compareConditions(a, b Condition) int {
	return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Code, b.Code), cmp.Compare(a.subject, b.subject))
}

// delta is how much counter name rose since the previous sample; 0 on the
// first sample, when either value is absent, or when it went back (a
// reset: the new value is the baseline).
func (h *portHistory) delta(p PortSample, name string) uint64 {
	old, okOld := h.counters[name]
	cur, okCur := p.Counters[name]
	if !h.seen || !okOld || !okCur || cur < old {
		return 0
	}
	return cur - old
}

// within drops events older than window before now and returns the rest
// with their sum.
func within(events []event, now time.Time, window time.Duration) ([]event, uint64) {
	events = slices.DeleteFunc(events, func(e event) bool { return now.Sub(e.at) >= window })
	var sum uint64
	for _, e := range events {
		sum += e.n
	}
	return events, sum
}

// flaps counts link_downed increments, or the port leaving ACTIVE where
// the counter did not move (a driver without it), within the flap window.
func (t *Tracker) flaps(h *portHistory, p PortSample, now time.Time, triggers map[condKey]Condition) {
	n := h.delta(p, CounterLinkDowned)
	left := h.seen && h.state == model.PortActive && p.State != model.PortActive
	if left && n == 0 {
		n = 1
	}
	if n > 0 {
		h.flaps = append(h.flaps, event{now, n})
	}
	var sum uint64
	h.flaps, sum = within(h.flaps, now, t.policy.FlapWindow)
	if sum < uint64(t.policy.FlapThreshold) {
		return
	}
	counter := "link_downed not available"
	if v, ok := p.Counters[CounterLinkDowned]; ok {
		counter = fmt.Sprintf("link_downed %d", v)
	}
	triggers[condKey{portKey{p.Device, p.Port}, CodeLinkFlapping, ""}] = Condition{
		Device: p.Device, Port: p.Port, Level: LevelUnhealthy, Code: CodeLinkFlapping,
		Reason: fmt.Sprintf("port %d went down %d times in %s (%s; threshold %d)", p.Port, sum, t.policy.FlapWindow, counter, t.policy.FlapThreshold),
	}
}

// errorBursts sums each error counter's increments within the error
// window.
func (t *Tracker) errorBursts(h *portHistory, p PortSample, now time.Time, triggers map[condKey]Condition) {
	for _, name := range ErrorCounters {
		if n := h.delta(p, name); n > 0 {
			h.errors[name] = append(h.errors[name], event{now, n})
		}
		var sum uint64
		h.errors[name], sum = within(h.errors[name], now, t.policy.ErrorWindow)
		threshold := t.policy.ErrorThreshold
		if name == CounterSymbolError {
			threshold = t.policy.SymbolErrorThreshold
		}
		if len(h.errors[name]) == 0 {
			delete(h.errors, name)
		}
		if sum < uint64(threshold) {
			continue
		}
		triggers[condKey{portKey{p.Device, p.Port}, CodeLinkErrors, name}] = Condition{
			Device: p.Device, Port: p.Port, Level: LevelUnhealthy, Code: CodeLinkErrors, subject: name,
			Reason: fmt.Sprintf("port %d: %s rose by %d in %s (now %d; threshold %d)", p.Port, name, sum, t.policy.ErrorWindow, p.Counters[name], threshold),
		}
	}
}

// peer is the best link a model's ports train at on this node.
type peer struct {
	rate   float64
	width  int
	device string
}

type peerKey struct{ model, linkLayer string }

// bestPeers is, per model and link layer, the highest rate and width among
// ACTIVE ports.
func bestPeers(ports []PortSample) map[peerKey]peer {
	out := map[peerKey]peer{}
	for _, p := range ports {
		if p.Model == "" || p.State != model.PortActive {
			continue
		}
		k := peerKey{p.Model, p.LinkLayer}
		best := out[k]
		if p.RateGbps > best.rate {
			best.rate, best.device = p.RateGbps, p.Device
		}
		best.width = max(best.width, p.Width)
		out[k] = best
	}
	return out
}

// linkDegraded compares an ACTIVE port's rate and width with what it
// should train at: the configured rate for its HCA or model, its own best
// since the tracker started, and its model's best on the node.
func (t *Tracker) linkDegraded(h *portHistory, p PortSample, peers map[peerKey]peer, triggers map[condKey]Condition) {
	if p.State != model.PortActive || p.RateGbps <= 0 {
		return
	}
	width := p.Width
	defer func() {
		h.bestRate, h.bestWidth = max(h.bestRate, p.RateGbps), max(h.bestWidth, width)
	}()
	wantRate, wantWidth, source := 0.0, 0, ""
	consider := func(rate float64, w int, from string) {
		if rate > wantRate || (w > wantWidth && rate >= wantRate) {
			source = from
		}
		wantRate, wantWidth = max(wantRate, rate), max(wantWidth, w)
	}
	for _, name := range []string{p.Device, p.Model} {
		if r, ok := t.policy.ExpectedRates[name]; ok && name != "" {
			consider(r, 0, "health.expected_rate_gbps "+name)
		}
	}
	consider(h.bestRate, h.bestWidth, "its own best since the agent started")
	if best, ok := peers[peerKey{p.Model, p.LinkLayer}]; ok && best.device != p.Device {
		consider(best.rate, best.width, best.device+", of the same type "+p.Model)
	}
	slowRate := p.RateGbps < wantRate
	narrow := width > 0 && width < wantWidth
	if !slowRate && !narrow {
		return
	}
	want := strconv.FormatFloat(wantRate, 'f', -1, 64) + " Gb/s"
	if wantWidth > 0 {
		want += fmt.Sprintf(" %dX", wantWidth)
	}
	note := fmt.Sprintf("below the %s it trains at (%s)", want, source)
	triggers[condKey{portKey{p.Device, p.Port}, CodeLinkDegraded, ""}] = Condition{
		Device: p.Device, Port: p.Port, Level: LevelDegraded, Code: CodeLinkDegraded,
		Reason: fmt.Sprintf("port %d: rate %q, %s", p.Port, p.Rate, note), Note: note,
	}
}

// pciDegraded: the function's link trained below its own maximum speed or
// width (a slot at x8 for an x16 card, a riser at Gen3).
func pciDegraded(l PCILink) (Condition, bool) {
	slow := l.Speed > 0 && l.MaxSpeed > 0 && l.Speed < l.MaxSpeed
	narrow := l.Width > 0 && l.MaxWidth > 0 && l.Width < l.MaxWidth
	if !slow && !narrow {
		return Condition{}, false
	}
	note := fmt.Sprintf("below the function's %s x%d", FormatGTs(l.MaxSpeed), l.MaxWidth)
	return Condition{
		Device: l.Device, Level: LevelDegraded, Code: CodePCIeDegraded,
		Reason: fmt.Sprintf("PCIe link at %s x%d (current_link_speed, current_link_width), %s (max_link_speed, max_link_width)",
			FormatGTs(l.Speed), l.Width, note),
		Note: note,
	}, true
}

// FormatGTs prints a PCIe link speed: "16 GT/s", "2.5 GT/s".
func FormatGTs(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + " GT/s" }

// ByDevice groups conditions by device.
func ByDevice(conds []Condition) map[string][]Condition {
	out := map[string][]Condition{}
	for _, c := range conds {
		out[c.Device] = append(out[c.Device], c)
	}
	return out
}

// Summarize folds one HCA's conditions on the ports that count (nil: all;
// its PCIe link always counts) into its unhealthy and its degraded
// problem: the first one's code, every reason joined.
func Summarize(conds []Condition, ports []int) (unhealthy, degraded Problem) {
	reasons := map[Level][]string{}
	codes := map[Level]string{}
	for _, c := range conds {
		if c.Port != 0 && ports != nil && !slices.Contains(ports, c.Port) {
			continue
		}
		if codes[c.Level] == "" {
			codes[c.Level] = c.Code
		}
		reasons[c.Level] = append(reasons[c.Level], c.Reason)
	}
	fold := func(l Level) Problem {
		if codes[l] == "" {
			return Problem{}
		}
		return Problem{Code: codes[l], Reason: strings.Join(reasons[l], "; ")}
	}
	return fold(LevelUnhealthy), fold(LevelDegraded)
}

// Changes describes, one line per condition and sorted, what was raised
// and cleared from before to now, for the agents' logs.
func Changes(before, now []Condition) []string {
	key := func(c Condition) string {
		return fmt.Sprintf("%s port %d %s %s", c.Device, c.Port, c.Code, c.subject)
	}
	was, is := map[string]Condition{}, map[string]Condition{}
	for _, c := range before {
		was[key(c)] = c
	}
	for _, c := range now {
		is[key(c)] = c
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(is)) {
		if _, ok := was[k]; !ok {
			c := is[k]
			out = append(out, fmt.Sprintf("%s is %s (%s): %s", c.Device, c.Level, c.Code, c.Reason))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(was)) {
		if _, ok := is[k]; !ok {
			c := was[k]
			out = append(out, fmt.Sprintf("%s: %s cleared after its quiet period (%s)", c.Device, c.Code, c.Reason))
		}
	}
	return out
}
