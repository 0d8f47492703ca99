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

// TestOutcomeReportsTheInitsCgroup, on the real kernel: a container's init
// moved into a cgroup of its own, in each hierarchy of the host's that the
// hook reports (v2's, at /sys/fs/cgroup or a hybrid host's unified; v1's
// pids), is reported with that cgroup's path under /sys/fs/cgroup, which
// the agent finds alive while the init runs, and gone once it has exited
// and once the cgroup is removed. Under a sysfs root where that path is no
// cgroup holding the init, nothing is reported.
func TestOutcomeReportsTheInitsCgroup(t *testing.T) {
	needRoot(t)
	layout := hookevents.CgroupLayoutAt("/sys/fs/cgroup")
	hierarchies := map[hookevents.CgroupLayout][]string{
		hookevents.CgroupV2:     {""},
		hookevents.CgroupHybrid: {"/unified", "/pids"},
		hookevents.CgroupV1:     {"/pids"},
	}[layout]
	for _, h := range hierarchies {
		t.Run("at /sys/fs/cgroup"+h, func(t *testing.T) { testReportsCgroupIn(t, h, layout) })
	}
}

func testReportsCgroupIn(t *testing.T, hierarchy string, layout hookevents.CgroupLayout) {
	cgroup := hierarchy + "/rdma-cdi-test-" + strconv.Itoa(os.Getpid())
	dir := filepath.Join("/sys/fs/cgroup", cgroup)
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
	pid := strconv.Itoa(initProc.Process.Pid)
	if hierarchy == "/pids" && layout == hookevents.CgroupHybrid {
		own, err := os.ReadFile("/proc/" + pid + "/cgroup")
		must(t, err)
		if v2 := hookevents.ProcCgroups(own, hookevents.CgroupV2); len(v2) > 0 {
			t.Skipf("the init inherits the v2 cgroup %s, which the hook reports first", v2[0])
		}
	}
	must(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0o644))
	c, err := Load(b.state(initProc.Process.Pid))
	must(t, err)
	defer c.Close()

	o := c.Outcome("create-runtime", sysfs.Root("/sys"))
	if o.Cgroup != cgroup {
		t.Fatalf("cgroup %q, want %q", o.Cgroup, cgroup)
	}
	if err := hookevents.Check(o); err != nil {
		t.Errorf("the agent refuses the report: %v", err)
	}
	if got := c.Outcome("create-runtime", sysfs.Root(t.TempDir())).Cgroup; got != "" {
		t.Errorf("under a sysfs root without the cgroup: %q reported", got)
	}
	// No procfs: the cgroup alone decides, and must know.
	populated := func() bool {
		alive, known := hookevents.CgroupPopulated("/sys/fs/cgroup", o.Cgroup)
		if !known {
			t.Fatalf("the agent cannot tell %s", o.Cgroup)
		}
		return alive
	}
	if !populated() || !(hookevents.Liveness{Sysfs: "/sys"}).Alive(o.Init()) {
		t.Error("the running init's container is not alive to the agent")
	}

	must(t, initProc.Process.Kill())
	_ = initProc.Wait()
	for deadline := time.Now().Add(5 * time.Second); populated(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the exited init's container is still alive to the agent")
		}
	}
	must(t, os.Remove(dir))
	if populated() {
		t.Error("the removed cgroup's container is alive to the agent")
	}
}
