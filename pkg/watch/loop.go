// Package watch keeps a node's CDI spec current: it regenerates the spec on
// netlink link/address/route events, kernel uevents of the RDMA subsystems,
// a periodic rescan and SIGHUP, debouncing bursts, and rewrites it only when
// the rendered bytes change. The core (Loop) is a plain event loop over a
// channel with the generator injected, so it is tested without netlink.
package watch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// Event is one reason to look at the node again.
type Event struct {
	// Source is where it came from: "netlink", "uevent", "signal", ...
	Source string
	// Detail says what happened, for the log ("addr 10.0.0.5/24 added on eth1").
	Detail string
	// Reload asks for the configuration to be reloaded before the next generation.
	Reload bool
}

func (e Event) String() string {
	if e.Detail == "" {
		return e.Source
	}
	return e.Source + ": " + e.Detail
}

// Loop is the watch loop. Generate and Events are required; zero durations
// take the defaults noted on each field.
type Loop struct {
	// Generate discovers the node, renders and writes the spec if its bytes
	// changed. An error leaves the last good spec in place.
	Generate func(ctx context.Context) (State, error)
	// Reload re-reads the configuration (SIGHUP); nil means nothing to reload.
	Reload func() error
	// Events are the triggers; a closed channel just stops that input.
	Events <-chan Event
	// Debounce is the quiet time after an event before generating (default 500ms).
	Debounce time.Duration
	// MaxDelay bounds the wait under a continuous stream of events
	// (default 10 × Debounce, at least 1s).
	MaxDelay time.Duration
	// Rescan is the period of the safety-net rescan; 0 disables it.
	Rescan time.Duration
	// RetryMin and RetryMax bound the exponential backoff after a failed
	// generation (defaults 1s and 1m).
	RetryMin, RetryMax time.Duration
	// ReadyFile is created after the first good generation and removed on
	// exit ("" = none). A readiness probe tests for it.
	ReadyFile string
	Log       logrus.FieldLogger
}

const maxReasons = 5

// Run generates at once, then on events until ctx ends. It returns nil on a
// clean stop; it never gives up on generation errors, it retries.
func (l *Loop) Run(ctx context.Context) error {
	if l.Generate == nil {
		return errors.New("watch: no generator")
	}
	l.defaults()
	if l.ReadyFile != "" {
		if err := os.Remove(l.ReadyFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			l.Log.Warnf("removing stale ready file %s: %v", l.ReadyFile, err)
		}
		defer func() {
			if err := os.Remove(l.ReadyFile); err != nil && !errors.Is(err, os.ErrNotExist) {
				l.Log.Warnf("removing ready file %s: %v", l.ReadyFile, err)
			}
		}()
	}

	r := runner{Loop: l}
	debounce := stoppedTimer()
	retry := stoppedTimer()
	var rescan <-chan time.Time
	if l.Rescan > 0 {
		t := time.NewTicker(l.Rescan)
		defer t.Stop()
		rescan = t.C
	}

	var (
		pending      bool
		firstPending time.Time
		reasons      []string
		dropped      int
	)
	generate := func(why string) {
		pending, reasons, dropped = false, nil, 0
		debounce.Stop()
		if r.generate(ctx, why) {
			retry.Stop()
		} else {
			retry.Reset(r.backoff())
		}
	}

	generate("start")
	events := l.Events
	for {
		select {
		case <-ctx.Done():
			l.Log.Info("watch: stopping")
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if ev.Reload {
				r.reload()
				generate("configuration reloaded")
				continue
			}
			now := time.Now()
			if !pending {
				pending, firstPending = true, now
			}
			if len(reasons) < maxReasons {
				reasons = append(reasons, ev.String())
			} else {
				dropped++
			}
			wait := l.Debounce
			if left := firstPending.Add(l.MaxDelay).Sub(now); left < wait {
				wait = max(left, 0)
			}
			debounce.Reset(wait)
		case <-debounce.C:
			why := strings.Join(reasons, "; ")
			if dropped > 0 {
				why += fmt.Sprintf(" (and %d more events)", dropped)
			}
			generate(why)
		case <-retry.C:
			generate(fmt.Sprintf("retry after %d failed attempt(s)", r.failures))
		case <-rescan:
			if r.failures > 0 {
				continue // the retry timer owns the schedule while failing
			}
			generate("periodic rescan")
		}
	}
}

func (l *Loop) defaults() {
	if l.Debounce <= 0 {
		l.Debounce = 500 * time.Millisecond
	}
	if l.MaxDelay <= 0 {
		l.MaxDelay = max(10*l.Debounce, time.Second)
	}
	if l.RetryMin <= 0 {
		l.RetryMin = time.Second
	}
	if l.RetryMax <= 0 {
		l.RetryMax = time.Minute
	}
	if l.RetryMax < l.RetryMin {
		l.RetryMax = l.RetryMin
	}
	if l.Log == nil {
		l.Log = logrus.StandardLogger()
	}
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// runner holds what survives between generations.
type runner struct {
	*Loop
	// generations counts Generate calls, for the debug log.
	generations int
	last        *State
	lastGood    time.Time
	failures    int
	ready       bool
}

// generate runs one generation and logs it; false means it failed.
func (r *runner) generate(ctx context.Context, why string) bool {
	r.generations++
	r.Log.WithField("trigger", why).Debugf("generation %d", r.generations)
	st, err := r.Generate(ctx)
	if err != nil {
		r.failures++
		kept := "no spec has been written yet"
		if r.last != nil {
			kept = fmt.Sprintf("keeping the last good spec %s (from %s)", r.last.Path, r.lastGood.Format(time.RFC3339))
		}
		r.Log.WithField("trigger", why).Warnf("spec generation failed (attempt %d): %v; %s; retrying in %s",
			r.failures, err, kept, r.backoff())
		return false
	}
	if r.failures > 0 {
		r.Log.Infof("spec generation recovered after %d failed attempt(s)", r.failures)
		r.failures = 0
	}
	changes := Describe(r.last, st)
	switch {
	case st.Changed || (st.Removed && (r.last == nil || !r.last.Removed)):
		verb := "spec written"
		if st.Removed {
			verb = "spec removed"
		}
		log := r.Log.WithFields(logrus.Fields{"path": st.Path, "trigger": why})
		if len(changes) == 0 {
			log.Info(verb)
		}
		for _, c := range changes {
			log.Infof("%s: %s", verb, c)
		}
	case len(changes) > 0:
		// The node changed in ways the spec does not carry (e.g. a GID
		// appeared that NCCL does not pick): worth a line, no rewrite.
		for _, c := range changes {
			r.Log.WithField("trigger", why).Infof("spec unchanged; node: %s", c)
		}
	default:
		r.Log.WithField("trigger", why).Debug("spec unchanged")
	}
	r.last = &st
	r.lastGood = time.Now()
	if !r.ready && r.ReadyFile != "" {
		if err := touch(r.ReadyFile); err != nil {
			r.Log.Warnf("ready file %s: %v", r.ReadyFile, err)
		} else {
			r.ready = true
			r.Log.Debugf("ready file %s created", r.ReadyFile)
		}
	}
	return true
}

func (r *runner) reload() {
	if r.Reload == nil {
		r.Log.Info("reload requested; nothing to reload")
		return
	}
	if err := r.Reload(); err != nil {
		r.Log.Errorf("configuration reload failed, keeping the previous configuration: %v", err)
		return
	}
	r.Log.Info("configuration reloaded")
}

// backoff is the wait before the next attempt after r.failures failures.
func (r *runner) backoff() time.Duration {
	d := r.RetryMin
	for i := 1; i < r.failures && d < r.RetryMax; i++ {
		d *= 2
	}
	return min(d, r.RetryMax)
}

func touch(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644)
}
