package hooks

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
)

func TestRunStepsOrderErrorsAndUnknownSteps(t *testing.T) {
	var mu sync.Mutex
	var ran []string
	recorder := func(name string, err error) Step {
		return func(_ context.Context, _ *Container, log *logrus.Entry) error {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, name+"/"+log.Data["step"].(string))
			return err
		}
	}
	known := map[apis.HookName]Step{
		apis.HookUpdateLDCache: recorder(string(apis.HookUpdateLDCache), nil),
		apis.HookNCCLConf:      recorder(string(apis.HookNCCLConf), nil),
	}
	logger, hook := test.NewNullLogger()
	log := logrus.NewEntry(logger)

	// Every step requested runs (nccl-conf beside the others, so in no
	// fixed order with them); unknown steps warned about.
	err := runSteps(context.Background(), []string{"nccl-conf", "from-the-future", "update-ldcache"}, known, nil, log)
	if want := []string{"nccl-conf/nccl-conf", "update-ldcache/update-ldcache"}; err != nil || !slices.Equal(slices.Sorted(slices.Values(ran)), want) {
		t.Errorf("ran %v (err %v), want %v", ran, err, want)
	}
	if len(hook.Entries) != 1 || hook.Entries[0].Level != logrus.WarnLevel || !strings.Contains(hook.Entries[0].Message, `unknown step "from-the-future"`) {
		t.Errorf("log = %v, want one warning naming the unknown step", hook.AllEntries())
	}

	// A failing step stops the later ones of the chain (memlock stops
	// update-ldcache), not nccl-conf beside it; the error names the step.
	ran = nil
	known[apis.HookMemlock] = recorder(string(apis.HookMemlock), errors.New("prlimit: operation not permitted"))
	err = runSteps(context.Background(), []string{"memlock", "update-ldcache", "nccl-conf"}, known, nil, log)
	if want := []string{"memlock/memlock", "nccl-conf/nccl-conf"}; !slices.Equal(slices.Sorted(slices.Values(ran)), want) {
		t.Errorf("ran %v, want %v", ran, want)
	}
	if err == nil || err.Error() != "memlock: prlimit: operation not permitted" {
		t.Errorf("err = %v, want the memlock step's error", err)
	}
	// Two failures: the first in step order is the hook's error, whichever
	// ended first.
	ran = nil
	delete(known, apis.HookMemlock)
	known[apis.HookUpdateLDCache] = recorder(string(apis.HookUpdateLDCache), errors.New("ld.so.conf.d is a symlink"))
	known[apis.HookNCCLConf] = recorder(string(apis.HookNCCLConf), errors.New("no space left on device"))
	hook.Reset()
	err = runSteps(context.Background(), []string{"update-ldcache", "nccl-conf"}, known, nil, log)
	if err == nil || err.Error() != "update-ldcache: ld.so.conf.d is a symlink" {
		t.Errorf("err = %v, want the update-ldcache step's error", err)
	}
	if e := hook.LastEntry(); e == nil || e.Level != logrus.ErrorLevel || !strings.Contains(e.Message, "nccl-conf: no space left on device") {
		t.Errorf("log = %v, want nccl-conf's error logged", hook.AllEntries())
	}
	// The agent's report names that step.
	if got := failedStep(err, apis.HookCreateRuntime, true); got != string(apis.HookUpdateLDCache) {
		t.Errorf("failed step %q, want update-ldcache", got)
	}
}

func TestFailedStep(t *testing.T) {
	plain := errors.New("no space left on device")
	for _, c := range []struct {
		err    error
		hook   apis.HookName
		loaded bool
		want   string
	}{
		{&stepError{step: apis.HookNCCLConf, err: plain}, apis.HookCreateRuntime, true, "nccl-conf"},
		{plain, apis.HookMemlock, true, "memlock"},     // a one-step hook of an older spec
		{plain, apis.HookCreateRuntime, false, "load"}, // the state, the container or the config
	} {
		if got := failedStep(c.err, c.hook, c.loaded); got != c.want {
			t.Errorf("failedStep(%v, %s, %v) = %q, want %q", c.err, c.hook, c.loaded, got, c.want)
		}
	}
}

// At debug level each step says how long it took (bench/podman.sh's
// breakdown reads these lines); at info level nothing more is logged.
func TestRunStepsLogsEachStepsTimeAtDebugLevel(t *testing.T) {
	slow := func(_ context.Context, _ *Container, _ *logrus.Entry) error {
		time.Sleep(5 * time.Millisecond)
		return nil
	}
	known := map[apis.HookName]Step{apis.HookMemlock: slow, apis.HookNCCLConf: slow}
	logger, hook := test.NewNullLogger()
	logger.SetLevel(logrus.DebugLevel)
	if err := runSteps(context.Background(), []string{"memlock", "nccl-conf"}, known, nil, logrus.NewEntry(logger)); err != nil {
		t.Fatal(err)
	}
	took := map[string]float64{}
	for _, e := range hook.AllEntries() {
		if ms, ok := e.Data[TookField].(float64); ok && e.Message == "step done" && e.Level == logrus.DebugLevel {
			took[e.Data["step"].(string)] = ms
		}
	}
	if len(took) != 2 || took["memlock"] < 5 || took["nccl-conf"] < 5 {
		t.Errorf("debug timings %v, want memlock and nccl-conf at 5 ms or more", took)
	}

	logger.SetLevel(logrus.InfoLevel)
	hook.Reset()
	if err := runSteps(context.Background(), []string{"memlock"}, known, nil, logrus.NewEntry(logger)); err != nil {
		t.Fatal(err)
	}
	if len(hook.AllEntries()) != 0 {
		t.Errorf("at info level: %v, want nothing logged", hook.AllEntries())
	}
}
