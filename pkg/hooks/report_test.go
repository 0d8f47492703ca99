package hooks

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/hookevents"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// cgroup2Mount is the host's cgroup v2 hierarchy: /sys/fs/cgroup, or its
// unified/ on a hybrid host ("" on a host of cgroup v1 alone).
func cgroup2Mount() string {
	for _, m := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(m, "cgroup.controllers")); err == nil {
			return m
		}
	}
	return ""
}

// TestOutcomeReportsTheInitsCgroup, on the real kernel: a container's init
// moved into a cgroup of its own is reported with that cgroup's path, which
// the agent, reading the same hierarchy under its sysfs root, finds
// populated while the init runs and not once it exits. Under a sysfs root
// where that path is no cgroup holding the init (another hierarchy, as a
// hybrid host's /sys/fs/cgroup is), nothing is reported.
func TestOutcomeReportsTheInitsCgroup(t *testing.T) {
	needRoot(t)
	mount := cgroup2Mount()
	if mount == "" {
		t.Skip("no cgroup v2 hierarchy")
	}
	cgroup := "/rdma-cdi-test-" + strconv.Itoa(os.Getpid())
	dir := filepath.Join(mount, cgroup)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup here: %v", err)
	}
	// Registered first, so it runs after the init is killed.
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("removing the test cgroup: %v", err)
		}
	})
	b := newBundle(t)
	initProc := startInRoot(t, b.Rootfs)
	must(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(initProc.Process.Pid)), 0o644))
	c, err := Load(b.state(initProc.Process.Pid))
	must(t, err)
	defer c.Close()

	sys := t.TempDir()
	must(t, os.Mkdir(filepath.Join(sys, "fs"), 0o755))
	must(t, os.Symlink(mount, filepath.Join(sys, "fs/cgroup")))
	o := c.Outcome("create-runtime", sysfs.Root(sys))
	if o.Cgroup != cgroup {
		t.Fatalf("cgroup %q, want %q", o.Cgroup, cgroup)
	}
	if err := hookevents.Check(o); err != nil {
		t.Errorf("the agent refuses the report: %v", err)
	}
	agent := hookevents.Liveness{Sysfs: sys} // no procfs: the cgroup alone decides
	if !agent.Alive(o.Init()) {
		t.Error("the running init's container is not alive to the agent")
	}
	if got := c.Outcome("create-runtime", sysfs.Root(t.TempDir())).Cgroup; got != "" {
		t.Errorf("under a sysfs root without the cgroup: %q reported", got)
	}

	must(t, initProc.Process.Kill())
	_ = initProc.Wait()
	for deadline := time.Now().Add(5 * time.Second); agent.Alive(o.Init()); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the exited init's container is still alive to the agent")
		}
	}
}
