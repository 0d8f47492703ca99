package watch

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/rdma-cdi/rdma-cdi/pkg/specio"
)

// counter is an injected generator that counts calls.
type counter struct {
	mu    sync.Mutex
	calls int
	at    []time.Time
	gen   func(n int) (State, error)
}

func (c *counter) Generate(context.Context) (State, error) {
	c.mu.Lock()
	c.calls++
	n := c.calls
	c.at = append(c.at, time.Now())
	gen := c.gen
	c.mu.Unlock()
	if gen == nil {
		return State{Path: "/x", Changed: n == 1}, nil
	}
	return gen(n)
}

func (c *counter) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

func newLogger() (*logrus.Logger, *logtest.Hook) {
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	return log, hook
}

func runLoop(t *testing.T, l *Loop) (cancel func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var once sync.Once
	cancel = func() {
		once.Do(func() {
			stop()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not stop within 5s of cancel")
			}
		})
	}
	t.Cleanup(cancel)
	return cancel
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func logged(hook *logtest.Hook, substr string) bool {
	for _, e := range hook.AllEntries() {
		if strings.Contains(e.Message, substr) {
			return true
		}
	}
	return false
}

func TestBurstIsDebounced(t *testing.T) {
	c := &counter{}
	events := make(chan Event)
	log, _ := newLogger()
	runLoop(t, &Loop{Generate: c.Generate, Events: events, Debounce: 50 * time.Millisecond, Log: log})
	eventually(t, time.Second, "the initial generation", func() bool { return c.n() == 1 })

	for i := 0; i < 100; i++ {
		events <- Event{Source: "test", Detail: "burst"}
	}
	eventually(t, 2*time.Second, "a generation after the burst", func() bool { return c.n() >= 2 })
	time.Sleep(300 * time.Millisecond)
	if got := c.n(); got > 3 {
		t.Fatalf("a burst of 100 events caused %d generations after the initial one; want at most 2", got-1)
	}
}

func TestContinuousStreamStillGenerates(t *testing.T) {
	c := &counter{}
	events := make(chan Event)
	log, _ := newLogger()
	runLoop(t, &Loop{Generate: c.Generate, Events: events, Debounce: 100 * time.Millisecond, MaxDelay: 300 * time.Millisecond, Log: log})
	eventually(t, time.Second, "the initial generation", func() bool { return c.n() == 1 })
	start := time.Now()
	// An event every 20ms never leaves 100ms of quiet; MaxDelay must still fire.
	for time.Since(start) < 1200*time.Millisecond {
		events <- Event{Source: "test"}
		time.Sleep(20 * time.Millisecond)
	}
	got := c.n() - 1
	if got < 2 || got > 6 {
		t.Fatalf("1.2s of continuous events with MaxDelay 300ms gave %d generations; want 2..6", got)
	}
}

func TestFailureRetriesWithBackoffAndKeepsLastGood(t *testing.T) {
	var fail atomic.Bool
	c := &counter{gen: func(n int) (State, error) {
		if fail.Load() {
			return State{}, errors.New("disk full")
		}
		return State{Path: "/var/run/cdi/x.yaml", Changed: true}, nil
	}}
	events := make(chan Event)
	log, hook := newLogger()
	runLoop(t, &Loop{Generate: c.Generate, Events: events, Debounce: 10 * time.Millisecond,
		RetryMin: 40 * time.Millisecond, RetryMax: 160 * time.Millisecond, Log: log})
	eventually(t, time.Second, "the initial generation", func() bool { return c.n() == 1 })

	fail.Store(true)
	events <- Event{Source: "test"}
	eventually(t, 3*time.Second, "five attempts", func() bool { return c.n() >= 6 })
	if !logged(hook, "keeping the last good spec /var/run/cdi/x.yaml") {
		t.Fatal("failure log does not say the last good spec is kept")
	}
	// Attempts 2..6 wait at least 40, 80, 160, 160 ms (capped); the exact
	// schedule is checked on backoff itself, a loaded machine only delays.
	c.mu.Lock()
	gaps := []time.Duration{}
	for i := 2; i < len(c.at); i++ {
		gaps = append(gaps, c.at[i].Sub(c.at[i-1]))
	}
	c.mu.Unlock()
	for i, w := range []time.Duration{40, 80, 160, 160} {
		if w *= time.Millisecond; gaps[i] < w-2*time.Millisecond {
			t.Errorf("retry gap %d = %s, want at least %s (all: %v)", i+1, gaps[i], w, gaps)
		}
	}
	fail.Store(false)
	eventually(t, 2*time.Second, "recovery", func() bool { return logged(hook, "recovered after") })
	n := c.n()
	time.Sleep(400 * time.Millisecond)
	if c.n() != n {
		t.Fatalf("generation kept retrying after recovery: %d -> %d", n, c.n())
	}
}

func TestReadyFileAfterFirstGoodGeneration(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "sub", "ready")
	var fail atomic.Bool
	fail.Store(true)
	c := &counter{gen: func(int) (State, error) {
		if fail.Load() {
			return State{}, errors.New("no sysfs")
		}
		return State{Path: "/x", Changed: true}, nil
	}}
	log, hook := newLogger()
	cancel := runLoop(t, &Loop{Generate: c.Generate, Events: make(chan Event), ReadyFile: ready,
		RetryMin: 30 * time.Millisecond, RetryMax: 30 * time.Millisecond, Log: log})
	eventually(t, time.Second, "two failed attempts", func() bool { return c.n() >= 2 })
	if _, err := os.Stat(ready); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ready file exists before any good generation: %v", err)
	}
	if !logged(hook, "no spec has been written yet") {
		t.Fatal("first failure does not say that no spec exists yet")
	}
	fail.Store(false)
	eventually(t, time.Second, "the ready file", func() bool { _, err := os.Stat(ready); return err == nil })
	cancel()
	if _, err := os.Stat(ready); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ready file left behind after a clean stop: %v", err)
	}
}

func TestReloadEvent(t *testing.T) {
	c := &counter{}
	var reloads atomic.Int32
	events := make(chan Event)
	log, hook := newLogger()
	runLoop(t, &Loop{Generate: c.Generate, Events: events, Debounce: time.Hour, Log: log,
		Reload: func() error {
			if reloads.Add(1) == 2 {
				return errors.New("line 3: unknown key x")
			}
			return nil
		}})
	eventually(t, time.Second, "the initial generation", func() bool { return c.n() == 1 })
	events <- Event{Source: "signal", Detail: "SIGHUP", Reload: true}
	// Debounce is an hour: only the reload path can generate this soon.
	eventually(t, time.Second, "a generation after reload", func() bool { return c.n() == 2 })
	events <- Event{Source: "signal", Detail: "SIGHUP", Reload: true}
	eventually(t, time.Second, "a generation after the failed reload", func() bool { return c.n() == 3 })
	if !logged(hook, "keeping the previous configuration: line 3: unknown key x") {
		t.Fatal("failed reload is not logged with its cause")
	}
}

func TestPeriodicRescan(t *testing.T) {
	c := &counter{}
	log, _ := newLogger()
	runLoop(t, &Loop{Generate: c.Generate, Events: nil, Rescan: 50 * time.Millisecond, Log: log})
	eventually(t, 2*time.Second, "three rescans", func() bool { return c.n() >= 4 })
}

func TestRewriteIsLoggedWithChanges(t *testing.T) {
	prev := gidState("3")
	next := gidState("5")
	next.Changed = true
	c := &counter{gen: func(n int) (State, error) {
		if n == 1 {
			return prev, nil
		}
		return next, nil
	}}
	events := make(chan Event)
	log, hook := newLogger()
	runLoop(t, &Loop{Generate: c.Generate, Events: events, Debounce: 10 * time.Millisecond, Log: log})
	events <- Event{Source: "uevent", Detail: "infiniband mlx5_1 change"}
	eventually(t, time.Second, "the rewrite log", func() bool {
		return logged(hook, "spec written: NCCL_IB_GID_INDEX changed from 3 to 5")
	})
	for _, e := range hook.AllEntries() {
		if strings.Contains(e.Message, "changed from 3 to 5") && e.Data["trigger"] != "uevent: infiniband mlx5_1 change" {
			t.Fatalf("rewrite log trigger = %v", e.Data["trigger"])
		}
	}
}

// TestFullSpecDirKeepsLastGoodSpec writes through specio into a tiny tmpfs:
// when the directory fills up, the spec on disk stays the last good one,
// the loop retries and recovers once there is room.
func TestFullSpecDirKeepsLastGoodSpec(t *testing.T) {
	dir := smallTmpfs(t)
	path := filepath.Join(dir, "rdma.yaml")
	var content atomic.Value
	content.Store([]byte("cdiVersion: 0.5.0\nkind: a/b\ndevices: [v1]\n"))
	gen := func(context.Context) (State, error) {
		changed, err := specio.WriteIfChanged(path, content.Load().([]byte), 0)
		return State{Path: path, Changed: changed}, err
	}
	events := make(chan Event)
	log, hook := newLogger()
	runLoop(t, &Loop{Generate: gen, Events: events, Debounce: 10 * time.Millisecond,
		RetryMin: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond, Log: log})
	first := content.Load().([]byte)
	eventually(t, time.Second, "the first spec", func() bool { b, _ := os.ReadFile(path); return string(b) == string(first) })

	filler := filepath.Join(dir, "filler")
	if err := fill(filler); err != nil {
		t.Fatal(err)
	}
	content.Store([]byte("cdiVersion: 0.5.0\nkind: a/b\ndevices: [v2, " + strings.Repeat("x", 8192) + "]\n"))
	events <- Event{Source: "test", Detail: "new device"}
	eventually(t, 2*time.Second, "a logged failure", func() bool { return logged(hook, "keeping the last good spec "+path) })
	b, err := os.ReadFile(path)
	if err != nil || string(b) != string(first) {
		t.Fatalf("spec after a failed write = %q, %v; want the last good one", b, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".rdma.yaml.tmp-*"))
	if len(left) > 0 {
		t.Fatalf("temp files left in the full dir: %v", left)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "the new spec after space was freed", func() bool {
		b, _ := os.ReadFile(path)
		return string(b) == string(content.Load().([]byte))
	})
}

// TestReadOnlySpecDirKeepsLastGoodSpec remounts the spec dir read-only.
func TestReadOnlySpecDirKeepsLastGoodSpec(t *testing.T) {
	dir := smallTmpfs(t)
	path := filepath.Join(dir, "rdma.yaml")
	var content atomic.Value
	content.Store([]byte("v1\n"))
	gen := func(context.Context) (State, error) {
		changed, err := specio.WriteIfChanged(path, content.Load().([]byte), 0)
		return State{Path: path, Changed: changed}, err
	}
	events := make(chan Event)
	log, hook := newLogger()
	runLoop(t, &Loop{Generate: gen, Events: events, Debounce: 10 * time.Millisecond,
		RetryMin: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond, Log: log})
	eventually(t, time.Second, "the first spec", func() bool { b, _ := os.ReadFile(path); return string(b) == "v1\n" })
	mount(t, "-o", "remount,ro", dir)
	content.Store([]byte("v2\n"))
	events <- Event{Source: "test"}
	eventually(t, 2*time.Second, "a read-only failure", func() bool { return logged(hook, "read-only file system") })
	if b, _ := os.ReadFile(path); string(b) != "v1\n" {
		t.Fatalf("spec = %q after a failed write, want v1", b)
	}
	mount(t, "-o", "remount,rw", dir)
	eventually(t, 2*time.Second, "the new spec after remount rw", func() bool { b, _ := os.ReadFile(path); return string(b) == "v2\n" })
}

func smallTmpfs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	mount(t, "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", dir)
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

func mount(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		t.Fatalf("mount %v: %v: %s", args, err, out)
	}
}

// fill writes until the file system says it is full.
func fill(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			return nil
		}
	}
}

func TestBackoff(t *testing.T) {
	r := runner{Loop: &Loop{RetryMin: time.Second, RetryMax: 10 * time.Second}}
	want := []time.Duration{time.Second, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for failures, w := range want {
		r.failures = failures
		if got := r.backoff(); got != w {
			t.Errorf("backoff after %d failures = %s, want %s", failures, got, w)
		}
	}
	r.failures = 1000
	if got := r.backoff(); got != 10*time.Second {
		t.Errorf("backoff after 1000 failures = %s", got)
	}
}
