package networker

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/sandboxlist"
)

// TestNewListsTheRestoredSandboxes: New writes the hook's sandbox list
// before anything is served, so that an agent restarted (or started after
// a reboot emptied the tmpfs, or by the install that turned pod
// networking on) never leaves the list missing while it registers with
// the kubelet: with pod networking on, the hook refuses every pod's
// container with an HCA while the list is missing. The sandboxes the
// records name are on it at once, and so are those the last process
// listed without a record (given nothing); a list that cannot be read is
// written again from the records.
func TestNewListsTheRestoredSandboxes(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	records := func(t *testing.T) string {
		t.Helper()
		b, err := os.ReadFile(releasedRecords) // sandbox-trainer, with two attachments
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, CheckpointFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	listed := func(t *testing.T, dir, id string) bool {
		t.Helper()
		ok, err := sandboxlist.Contains(dir, id)
		if err != nil {
			t.Fatalf("after New: %v", err)
		}
		return ok
	}
	newService := func(t *testing.T, stateDir, recordsDir string) {
		t.Helper()
		_, err := New(config.PodNetwork{StateDir: stateDir, NRISocket: filepath.Join(t.TempDir(), "nri.sock")},
			t.TempDir(), log, Options{RecordsDir: recordsDir})
		if err != nil {
			t.Fatal(err)
		}
	}

	t.Run("records, no list", func(t *testing.T) {
		stateDir := t.TempDir()
		newService(t, stateDir, records(t))
		if !listed(t, stateDir, "sandbox-trainer") {
			t.Error("the sandbox the records name is not listed before Run")
		}
	})
	t.Run("records and the last process's list", func(t *testing.T) {
		stateDir := t.TempDir()
		if err := sandboxlist.Write(stateDir, []string{"sb-given-nothing"}); err != nil {
			t.Fatal(err)
		}
		newService(t, stateDir, records(t))
		if !listed(t, stateDir, "sandbox-trainer") || !listed(t, stateDir, "sb-given-nothing") {
			t.Error("want both the recorded sandbox and the one the last process listed")
		}
	})
	t.Run("records, a broken list", func(t *testing.T) {
		stateDir := t.TempDir()
		if err := os.WriteFile(filepath.Join(stateDir, sandboxlist.File), []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
		newService(t, stateDir, records(t))
		if !listed(t, stateDir, "sandbox-trainer") {
			t.Error("the sandbox the records name is not listed before Run")
		}
	})
	t.Run("nothing restored", func(t *testing.T) {
		stateDir := filepath.Join(t.TempDir(), "rdma-cdi") // a fresh tmpfs: not there yet
		newService(t, stateDir, t.TempDir())
		if listed(t, stateDir, "sb-any") {
			t.Error("an empty list names a sandbox")
		}
	})
}

// TestListedSandboxGoneAtTheSynchronization: a sandbox the last process
// listed without a record, taken over by ListRestored, leaves the list at
// the first synchronization that no longer has it.
func TestListedSandboxGoneAtTheSynchronization(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	n := &Networker{IndexDir: t.TempDir(), Sysfs: t.TempDir(), Log: log}
	if err := sandboxlist.Write(n.IndexDir, []string{"sb-gone"}); err != nil {
		t.Fatal(err)
	}
	n.Restore(t.TempDir())
	if err := n.ListRestored(); err != nil {
		t.Fatal(err)
	}
	if ok, err := sandboxlist.Contains(n.IndexDir, "sb-gone"); err != nil || !ok {
		t.Fatalf("after ListRestored: listed %v, %v", ok, err)
	}
	if err := n.Present(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if ok, err := sandboxlist.Contains(n.IndexDir, "sb-gone"); err != nil || ok {
		t.Errorf("after a synchronization without it: listed %v, %v", ok, err)
	}
}
