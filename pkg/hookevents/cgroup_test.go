package hookevents

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestIsCgroupPath(t *testing.T) {
	for _, p := range []string{
		"/",
		"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0b1c_2d3e.slice/cri-containerd-0123abcd.scope",
		"/kubepods/burstable/pod0b1c-2d3e/0123abcd",
		"/machine.slice/libpod-0123abcd.scope/container",
		"/user.slice/user-1000.slice/user@1000.service/app.slice",
		"/" + strings.Repeat("a", maxCgroupLen-1),
	} {
		if !IsCgroupPath(p) {
			t.Errorf("%q refused", p)
		}
	}
	for _, p := range []string{
		"", "kubepods/x", "/a/../../etc", "/..", "/a/./b", "/a//b", "/a/", "/a b", "/a\nb", `/a\x2db`, "/a\x00b",
		"/" + strings.Repeat("a", maxCgroupLen),
	} {
		if IsCgroupPath(p) {
			t.Errorf("%q accepted", p)
		}
	}
}

func TestProcCgroups(t *testing.T) {
	const (
		v1     = "9:name=systemd:/docker/abc\n8:pids:/docker/abc\n4:memory:/docker/abc\n1:cpu,cpuacct:/docker/abc\n0::/\n"
		hybrid = "12:pids:/docker/abc\n1:name=systemd:/docker/abc\n0::/docker/abc" // no final newline
	)
	for _, c := range []struct {
		text   string
		layout CgroupLayout
		want   []string
	}{
		{"0::/kubepods/besteffort/pod1/abc\n", CgroupV2, []string{"/kubepods/besteffort/pod1/abc"}},
		{"0::/\n", CgroupV2, nil},
		{v1, CgroupV1, []string{"/pids/docker/abc", "/systemd/docker/abc"}},
		{v1, CgroupV2, nil}, // 0::/ alone
		{v1, CgroupHybrid, []string{"/pids/docker/abc", "/systemd/docker/abc"}},
		{"4:memory:/x\n1:name=systemd:/x\n", CgroupV1, []string{"/systemd/x"}},
		{"8:pids:/\n1:name=systemd:/\n0::/\n", CgroupV1, nil},
		{hybrid, CgroupHybrid, []string{"/unified/docker/abc", "/pids/docker/abc", "/systemd/docker/abc"}},
		{hybrid, CgroupV1, []string{"/pids/docker/abc", "/systemd/docker/abc"}},
		{hybrid, CgroupV2, []string{"/docker/abc"}},
		{"8:pids:/a b\n8:pids:x\n", CgroupV1, nil},
		{"8:pids:/a/../b\n1:name=systemd:/ok\n", CgroupV1, []string{"/systemd/ok"}},
		{"", CgroupV2, nil},
	} {
		if got := ProcCgroups([]byte(c.text), c.layout); !slices.Equal(got, c.want) {
			t.Errorf("ProcCgroups(%q, %d) = %q, want %q", c.text, c.layout, got, c.want)
		}
	}
}

// cgroupTree is a sysfs root whose fs/cgroup is laid out as layout's:
// the v2 hierarchy itself, or a tmpfs of v1 hierarchies (pids, systemd),
// with v2's at unified on a hybrid host.
func cgroupTree(t *testing.T, layout CgroupLayout) string {
	t.Helper()
	sys := t.TempDir()
	if layout == CgroupV2 {
		addCgroup(t, sys, "", true, 1)
		return sys
	}
	addCgroup(t, sys, "/pids", false, 1)
	addCgroup(t, sys, "/systemd", false, 1)
	if layout == CgroupHybrid {
		addCgroup(t, sys, "/unified", true, 1)
	}
	return sys
}

// addCgroup makes the cgroup at path under sys's fs/cgroup with the
// processes pids; a v2 one also has its cgroup.events.
func addCgroup(t *testing.T, sys, path string, v2 bool, pids ...int) {
	t.Helper()
	dir := filepath.Join(sys, "fs/cgroup", path)
	procs := ""
	for _, pid := range pids {
		procs += strconv.Itoa(pid) + "\n"
	}
	writeFile(t, filepath.Join(dir, "cgroup.procs"), procs)
	if v2 {
		writeFile(t, filepath.Join(dir, "cgroup.events"), fmt.Sprintf("populated %d\nfrozen 0\n", min(len(pids), 1)))
		writeFile(t, filepath.Join(dir, "cgroup.controllers"), "")
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCgroupLayoutAt(t *testing.T) {
	for _, layout := range []CgroupLayout{CgroupV1, CgroupHybrid, CgroupV2} {
		if got := CgroupLayoutAt(filepath.Join(cgroupTree(t, layout), "fs/cgroup")); got != layout {
			t.Errorf("layout %d read as %d", layout, got)
		}
	}
}

// TestCgroupPopulated: what CgroupPopulated tells in each layout, and what
// it leaves to the fallback.
func TestCgroupPopulated(t *testing.T) {
	v2, v1, hybrid := cgroupTree(t, CgroupV2), cgroupTree(t, CgroupV1), cgroupTree(t, CgroupHybrid)
	addCgroup(t, v2, "/kubepods.slice/live.scope", true, 42)
	addCgroup(t, v2, "/kubepods.slice/exited.scope", true)
	writeFile(t, filepath.Join(v2, "fs/cgroup/kubepods.slice/odd/cgroup.events"), "frozen 0\n") // no populated line
	// More pids than readSmall's one read takes in.
	many := make([]int, 200)
	for i := range many {
		many[i] = 100000 + i
	}
	addCgroup(t, v1, "/pids/kubepods/besteffort/pod1/live", false, many...)
	addCgroup(t, v1, "/pids/kubepods/besteffort/pod1/exited", false)
	addCgroup(t, v1, "/systemd/system.slice/docker-abc.scope", false, 42)
	// A hierarchy whose mount the agent does not see: an empty mount point.
	if err := os.Mkdir(filepath.Join(v1, "fs/cgroup/memory"), 0o755); err != nil {
		t.Fatal(err)
	}
	addCgroup(t, hybrid, "/unified/docker/abc", true, 42)
	addCgroup(t, hybrid, "/unified/docker/exited", true)
	trees := map[string]string{"v2": v2, "v1": v1, "hybrid": hybrid}
	for _, c := range []struct {
		tree, cgroup string
		alive, known bool
	}{
		{"v2", "/kubepods.slice/live.scope", true, true},
		{"v2", "/kubepods.slice/exited.scope", false, true},
		{"v2", "/kubepods.slice/removed.scope", false, true},
		{"v2", "/removed.scope", false, true}, // at the top: the hierarchy is the mount root
		{"v2", "/kubepods.slice/odd", false, false},
		{"v2", "/", false, false},
		{"v2", "", false, false},
		{"v2", "kubepods.slice/live.scope", false, false},
		{"v2", "/kubepods.slice/../kubepods.slice/live.scope", false, false},
		{"v1", "/pids/kubepods/besteffort/pod1/live", true, true},
		{"v1", "/pids/kubepods/besteffort/pod1/exited", false, true},
		{"v1", "/pids/kubepods/besteffort/pod1/removed", false, true},
		{"v1", "/systemd/system.slice/docker-abc.scope", true, true},
		{"v1", "/systemd/system.slice/docker-removed.scope", false, true},
		{"v1", "/pids", false, false},
		{"v1", "/", false, false},
		{"v1", "/memory/kubepods/x", false, false},
		{"v1", "/cpu/kubepods/x", false, false},
		{"v1", "/kubepods.slice/live.scope", false, false}, // a v2 path: no such hierarchy
		{"hybrid", "/unified/docker/abc", true, true},
		{"hybrid", "/unified/docker/exited", false, true},
		{"hybrid", "/unified/docker/removed", false, true},
		{"hybrid", "/unified", false, false},
		{"hybrid", "/pids/docker/removed", false, true},
	} {
		alive, known := CgroupPopulated(filepath.Join(trees[c.tree], "fs/cgroup"), c.cgroup)
		if alive != c.alive || known != c.known {
			t.Errorf("%s %q: alive %v known %v, want %v %v", c.tree, c.cgroup, alive, known, c.alive, c.known)
		}
	}
}

// TestLivenessByCgroup: a usable cgroup decides, whatever the pid says;
// one that tells nothing falls back to the pid and start time, where the
// agent has a procfs, and to "gone" where it has none.
func TestLivenessByCgroup(t *testing.T) {
	self := os.Getpid()
	start, err := ProcessStart("/proc", self)
	if err != nil {
		t.Fatal(err)
	}
	running := Init{Pid: self, StartTime: start}
	ended := Init{Pid: self, StartTime: start + 1}
	with := func(init Init, cgroup string) Init { init.Cgroup = cgroup; return init }

	sys := cgroupTree(t, CgroupV1)
	const live, exited, removed, unseen = "/pids/ctr-live", "/pids/ctr-exited", "/pids/ctr-removed", "/cpu/ctr-live"
	addCgroup(t, sys, live, false, 42)
	addCgroup(t, sys, exited, false)
	withProc, noProc := Liveness{Sysfs: sys, Proc: "/proc"}, Liveness{Sysfs: sys}
	for _, c := range []struct {
		name string
		l    Liveness
		init Init
		want bool
	}{
		{"populated cgroup, pid gone", withProc, with(ended, live), true},
		{"populated cgroup, no procfs", noProc, with(Init{}, live), true},
		{"emptied cgroup, pid running", withProc, with(running, exited), false},
		{"removed cgroup, pid running", withProc, with(running, removed), false},
		{"root cgroup: the pid decides", withProc, with(running, "/pids"), true},
		{"root cgroup: the pid decides, gone", withProc, with(ended, "/pids"), false},
		{"root cgroup, no procfs", noProc, with(running, "/pids"), false},
		{"unseen hierarchy: the pid decides", withProc, with(running, unseen), true},
		{"unseen hierarchy, no procfs", noProc, with(running, unseen), false},
		{"an older hook's report: the pid decides", withProc, running, true},
		{"an older hook's report, no procfs", noProc, running, false},
	} {
		if got := c.l.Alive(c.init); got != c.want {
			t.Errorf("%s: alive %v, want %v", c.name, got, c.want)
		}
	}
}
