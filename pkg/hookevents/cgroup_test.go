package hookevents

import (
	"os"
	"path/filepath"
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

func TestUnifiedCgroup(t *testing.T) {
	for content, want := range map[string]string{
		"0::/system.slice/containerd.service\n": "/system.slice/containerd.service",
		// A hybrid host: v1 hierarchies, and the unified one last.
		"12:pids:/docker/abc\n1:name=systemd:/docker/abc\n0::/docker/abc\n": "/docker/abc",
		"4:memory:/docker/abc\n1:name=systemd:/docker/abc\n":                "", // cgroup v1 alone
		"": "",
	} {
		if got := UnifiedCgroup([]byte(content)); got != want {
			t.Errorf("UnifiedCgroup(%q) = %q, want %q", content, got, want)
		}
	}
}

// cgroupTree is a sysfs root laid out like a cgroup v2 host's: the
// hierarchy at fs/cgroup with its root's cgroup.controllers.
func cgroupTree(t *testing.T) string {
	t.Helper()
	sys := t.TempDir()
	writeFile(t, filepath.Join(sys, "fs/cgroup/cgroup.controllers"), "cpu io memory pids\n")
	return sys
}

// addCgroup makes the cgroup at path under sys with its cgroup.events.
func addCgroup(t *testing.T, sys, path string, populated bool) {
	t.Helper()
	events := "populated 0\nfrozen 0\n"
	if populated {
		events = "populated 1\nfrozen 0\n"
	}
	writeFile(t, filepath.Join(sys, "fs/cgroup", path, "cgroup.events"), events)
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

// TestLivenessByCgroup: a usable cgroup decides, whatever the pid says; the
// root cgroup, a path the agent would refuse, or a host whose fs/cgroup is
// not cgroup v2 falls back to the pid and start time, where the agent has
// a procfs, and to "gone" where it has none.
func TestLivenessByCgroup(t *testing.T) {
	self := os.Getpid()
	start, err := ProcessStart("/proc", self)
	if err != nil {
		t.Fatal(err)
	}
	running := Init{Pid: self, StartTime: start}
	ended := Init{Pid: self, StartTime: start + 1}

	sys := cgroupTree(t)
	const live, exited, removed = "/kubepods.slice/ctr-live.scope", "/kubepods.slice/ctr-exited.scope", "/kubepods.slice/ctr-removed.scope"
	addCgroup(t, sys, live, true)
	addCgroup(t, sys, exited, false)
	// v1 and hybrid hosts: /sys/fs/cgroup is a tmpfs of hierarchies, with
	// the unified one (if any) below it.
	hybrid := t.TempDir()
	writeFile(t, filepath.Join(hybrid, "fs/cgroup/unified/cgroup.controllers"), "")
	addCgroup(t, hybrid, "unified"+live, true)

	withProc := func(sys string) Liveness { return Liveness{Sysfs: sys, Proc: "/proc"} }
	noProc := func(sys string) Liveness { return Liveness{Sysfs: sys} }
	for _, c := range []struct {
		name string
		l    Liveness
		init Init
		want bool
	}{
		{"populated cgroup, pid gone", withProc(sys), Init{Pid: ended.Pid, StartTime: ended.StartTime, Cgroup: live}, true},
		{"populated cgroup, no procfs", noProc(sys), Init{Cgroup: live}, true},
		{"emptied cgroup, pid running", withProc(sys), Init{Pid: self, StartTime: start, Cgroup: exited}, false},
		{"removed cgroup, pid running", withProc(sys), Init{Pid: self, StartTime: start, Cgroup: removed}, false},
		{"root cgroup: the pid decides", withProc(sys), Init{Pid: self, StartTime: start, Cgroup: "/"}, true},
		{"root cgroup: the pid decides, gone", withProc(sys), Init{Pid: ended.Pid, StartTime: ended.StartTime, Cgroup: "/"}, false},
		{"root cgroup, no procfs", noProc(sys), Init{Pid: self, StartTime: start, Cgroup: "/"}, false},
		{"an older hook's report: the pid decides", withProc(sys), running, true},
		{"an older hook's report, no procfs", noProc(sys), running, false},
		{"a path out of the mount is not read", withProc(sys), Init{Pid: ended.Pid, StartTime: ended.StartTime, Cgroup: "/kubepods.slice/../kubepods.slice/ctr-live.scope"}, false},
		{"hybrid host: the pid decides", withProc(hybrid), Init{Pid: self, StartTime: start, Cgroup: live}, true},
		{"hybrid host, no procfs", noProc(hybrid), Init{Pid: self, StartTime: start, Cgroup: live}, false},
	} {
		if got := c.l.Alive(c.init); got != c.want {
			t.Errorf("%s: alive %v, want %v", c.name, got, c.want)
		}
	}
}

// TestCgroupPopulatedKnown: what CgroupPopulated can tell, and what it
// leaves to the fallback.
func TestCgroupPopulatedKnown(t *testing.T) {
	sys := cgroupTree(t)
	root := filepath.Join(sys, "fs/cgroup")
	addCgroup(t, sys, "/a", true)
	writeFile(t, filepath.Join(root, "b/cgroup.events"), "frozen 0\n") // no populated line
	for _, c := range []struct {
		cgroup       string
		alive, known bool
	}{
		{"/a", true, true},
		{"/gone", false, true},
		{"/b", false, false},
		{"/", false, false},
		{"", false, false},
		{"a", false, false},
	} {
		if alive, known := CgroupPopulated(root, c.cgroup); alive != c.alive || known != c.known {
			t.Errorf("%q: alive %v known %v, want %v %v", c.cgroup, alive, known, c.alive, c.known)
		}
	}
}
