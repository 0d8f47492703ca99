package hooks

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
)

func TestReadStateErrorsNameTheProblem(t *testing.T) {
	cases := map[string]string{
		"":         "OCI state on stdin: empty",
		"  \n":     "OCI state on stdin: empty",
		"{":        "OCI state on stdin: unexpected EOF",
		"not json": "OCI state on stdin: invalid character",
		`{"ociVersion":"1.0.2","id":"c","pid":"12","bundle":"/b"}`:  "State.pid of type int",
		`{"ociVersion":"1.0.2","id":"c","pid":12,"bundle":"/b"} {}`: "trailing data",
		`{"id":"c","pid":12,"bundle":"/b"}`:                         "ociVersion missing",
		`{"ociVersion":"1.0.2","pid":12,"bundle":"/b"}`:             "id missing",
		`{"ociVersion":"1.0.2","id":"c","pid":12}`:                  "bundle missing",
		`{"ociVersion":"1.0.2","id":"c","pid":12,"bundle":"b"}`:     `bundle "b" is not an absolute path`,
		`{"ociVersion":"1.0.2","id":"c","bundle":"/b"}`:             "pid 0: want the container's process id",
		`{"ociVersion":"1.0.2","id":"c","pid":-5,"bundle":"/b"}`:    "pid -5",
		`[1,2]`: "OCI state on stdin: json: cannot unmarshal array",
		`{"ociVersion":"1.0.2","id":"c","pid":1,"bundle":"/b","x":"` + strings.Repeat("a", MaxStateSize) + `"}`: "larger than",
	}
	for in, want := range cases {
		_, err := ReadState(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "OCI state on stdin: ") {
			t.Errorf("%.60q: got %v, want an error containing %q", in, err, want)
		}
	}
}

func TestReadStateAcceptsARealState(t *testing.T) {
	// As runc writes it, plus a field a newer runtime might add.
	in := `{"ociVersion":"1.0.2-dev","id":"abc","status":"creating","pid":4242,"bundle":"/run/b","annotations":{"k":"v"},"future":1}`
	st, err := ReadState(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if st.ID != "abc" || st.Pid != 4242 || st.Bundle != "/run/b" || st.Annotations["k"] != "v" || st.Status != "creating" {
		t.Fatalf("parsed %+v", st)
	}
}

func TestLoadBundleErrors(t *testing.T) {
	b := newBundle(t)
	p := startInRoot(t, b.Rootfs)
	pid := p.Process.Pid

	st := b.state(pid)
	st.Bundle = filepath.Join(b.Dir, "absent")
	if _, err := Load(st); err == nil || !strings.Contains(err.Error(), "bundle") || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing bundle: %v", err)
	}
	st.Bundle = filepath.Join(b.Dir, "config.json")
	if _, err := Load(st); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("bundle is a file: %v", err)
	}

	empty := t.TempDir()
	st.Bundle = empty
	if _, err := Load(st); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("no config.json: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(empty, "config.json"), []byte(`{"ociVersion":`), 0o644))
	if _, err := Load(st); err == nil || !strings.Contains(err.Error(), empty+"/config.json") {
		t.Errorf("bad config.json: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(empty, "config.json"), []byte(`{"ociVersion":"1.0.2","root":{"path":""}}`), 0o644))
	if _, err := Load(st); err == nil || !strings.Contains(err.Error(), "root.path missing") {
		t.Errorf("no root.path: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(empty, "config.json"), []byte(`{"ociVersion":"1.0.2","root":{"path":"nope"}}`), 0o644))
	if _, err := Load(st); err == nil || !strings.Contains(err.Error(), "container root") {
		t.Errorf("missing rootfs: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(empty, "config.json"), []byte(`{"ociVersion":"1.0.2","root":{"path":"/"}}`), 0o644))
	if _, err := Load(st); err == nil || !strings.Contains(err.Error(), "host's root directory") {
		t.Errorf("rootfs /: %v", err)
	}
}

// A state whose pid is not the container (the hook itself, the host's
// init, an unrelated process, a process of another container) is refused.
func TestLoadRefusesAPidThatIsNotTheContainer(t *testing.T) {
	b := newBundle(t)
	other := newBundle(t)
	otherProc := startInRoot(t, other.Rootfs)
	for name, pid := range map[string]int{
		"self": os.Getpid(), "host init": 1, "other container": otherProc.Process.Pid, "no such process": 1 << 22,
	} {
		_, err := Load(b.state(pid))
		if err == nil {
			t.Errorf("%s (pid %d): loaded", name, pid)
			continue
		}
		if !strings.Contains(err.Error(), "OCI state pid "+strconv.Itoa(pid)) {
			t.Errorf("%s: error does not name the pid: %v", name, err)
		}
	}
	// The real process is accepted, and the relative root.path resolved.
	p := startInRoot(t, b.Rootfs)
	c, err := Load(b.state(p.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Pid != p.Process.Pid || c.ProcPid != p.Process.Pid || c.Path() != b.Rootfs {
		t.Fatalf("pid %d/%d root %s", c.Pid, c.ProcPid, c.Path())
	}
}

// A createContainer hook's cwd is the rootfs, so the hook's own process
// passes the root/cwd check: it is refused by its pid, both as /proc and as
// its own pid namespace number it.
func TestLoadRefusesTheHookItselfInTheRootfs(t *testing.T) {
	b := newBundle(t)
	t.Chdir(b.Rootfs)
	self, err := os.Readlink("/proc/self")
	must(t, err)
	pid, err := strconv.Atoi(self)
	must(t, err)
	for _, p := range []int{pid, os.Getpid()} {
		_, err := Load(b.state(p))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("OCI state pid %d is this hook's own process, not container c1", p)) {
			t.Errorf("pid %d: %v", p, err)
		}
	}
}

func TestRunLogsFailuresToStderrAndFile(t *testing.T) {
	logFile := filepath.Join(t.TempDir(), "sub", "dir", "hooks.log")
	var stderr strings.Builder
	log, closer := NewLogger("nccl-conf", &stderr, logFile, 4)
	err := Run(log, strings.NewReader(`{"ociVersion":"1.0.2","id":"c9","pid":1,"bundle":"/nonexistent-bundle"}`), nil)
	closer.Close()
	if err == nil {
		t.Fatal("want an error")
	}
	data, rerr := os.ReadFile(logFile)
	must(t, rerr)
	for name, out := range map[string]string{"stderr": stderr.String(), "log file": string(data)} {
		if !strings.Contains(out, "/nonexistent-bundle") || !strings.Contains(out, "container=c9") || !strings.Contains(out, "hook=nccl-conf") {
			t.Errorf("%s lacks the failure: %q", name, out)
		}
	}
	fi, err := os.Stat(logFile)
	must(t, err)
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("log file mode %v, want 0640", fi.Mode().Perm())
	}
	di, err := os.Stat(filepath.Dir(logFile))
	must(t, err)
	if di.Mode().Perm() != 0o755 {
		t.Errorf("log dir mode %v, want 0755", di.Mode().Perm())
	}
	// An unusable log file is a warning on stderr, not a failure.
	stderr.Reset()
	log, closer = NewLogger("memlock", &stderr, filepath.Join(logFile, "under-a-file.log"), 4)
	log.Info("still logging")
	closer.Close()
	if !strings.Contains(stderr.String(), "logging to stderr only") || !strings.Contains(stderr.String(), "still logging") {
		t.Errorf("stderr: %q", stderr.String())
	}
}

// A failing hook whose log file cannot be opened ends its stderr with the
// error, and the line podman picks to show is the error too: the log-file
// note comes first and does not read like an errno string.
func TestRunFailureIsTheLineEnginesShow(t *testing.T) {
	b := newBundle(t)
	otherPid := startInRoot(t, newBundle(t).Rootfs).Process.Pid
	var stderr strings.Builder
	// mkdir in /proc fails with ENOENT, "no such file or directory".
	log, closer := NewLogger("create-container", &stderr, "/proc/rdma-cdi-test/hooks.log", logrus.InfoLevel)
	err := Run(log, strings.NewReader(b.stateJSON(otherPid)), nil)
	closer.Close()
	if err == nil {
		t.Fatal("another container's process accepted as the container")
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if !strings.Contains(lines[0], "hook log file /proc/rdma-cdi-test/hooks.log not opened (ENOENT)") {
		t.Errorf("first line is not the log-file note: %q", lines[0])
	}
	refusal := fmt.Sprintf("OCI state pid %d is not container c1", otherPid)
	if last := lines[len(lines)-1]; !strings.Contains(last, refusal) {
		t.Errorf("last line is not the error: %q", last)
	}
	if shown := podmanShows(stderr.String()); !strings.Contains(shown, refusal) {
		t.Errorf("podman would show %q, not the error", shown)
	}
}

// podmanShows is what podman 4 prints of a runtime's failure message
// (libpod getOCIRuntimeError): the first line reading like a permission or
// a missing-file errno, else all of it.
func podmanShows(msg string) string {
	for _, re := range []string{
		"(?i).*permission denied.*|.*operation not permitted.*",
		"(?i).*executable file not found in.*|.*no such file or directory.*|.*open executable.*",
	} {
		if m := regexp.MustCompile(re).FindString(msg); m != "" {
			return m
		}
	}
	return msg
}

// runc runs createContainer hooks as children of the container's init,
// inside its pid namespace, with the state's pid as that namespace numbers
// it (1) while /proc is still the host's. This reproduces it: sh is pid 1
// of a new pid namespace with its cwd at the rootfs, and runs this test
// binary as its child with a state saying pid 1.
func TestLoadFromInsideThePidNamespace(t *testing.T) {
	if os.Getenv(childStateEnv) != "" {
		return // the child half, run below
	}
	needRoot(t)
	b := newBundle(t)
	out := runAsInitChild(t, b.Rootfs, b.stateJSON(1), "TestLoadFromInsideThePidNamespaceChild")
	if !strings.Contains(out, "loaded: pid 1, /proc pid ") {
		t.Fatalf("child output:\n%s", out)
	}
}

func TestLoadFromInsideThePidNamespaceChild(t *testing.T) {
	st := childState(t)
	c, err := Load(st)
	must(t, err)
	defer c.Close()
	if c.Pid != 1 || c.ProcPid == 1 {
		t.Fatalf("pid %d, /proc pid %d", c.Pid, c.ProcPid)
	}
	if got := c.netNSToOpen(); got != "" {
		t.Fatalf("in the container's netns already, but would switch to %s", got)
	}
	fmt.Printf("loaded: pid %d, /proc pid %d\n", c.Pid, c.ProcPid)
}

// In a user-namespaced container the hook may not read its parent's
// /proc/PID/root or cwd (a ptrace check it fails: runc's init is
// non-dumpable and its memory is the host user namespace's). The child
// here loses CAP_SYS_PTRACE, which makes its root-owned parent just as
// unreadable. The init's child is accepted by what it inherited (its cwd
// at the rootfs, a pid namespace below /proc's), and refused when its cwd
// is elsewhere.
func TestLoadAsTheChildOfAnUnreadableInit(t *testing.T) {
	if os.Getenv(childStateEnv) != "" {
		return
	}
	needRoot(t)
	b := newBundle(t)
	const child = "TestLoadAsTheChildOfAnUnreadableInitChild"
	noPtrace := []string{"setpriv", "--bounding-set=-sys_ptrace"}
	out := runAsInitChild(t, b.Rootfs, b.stateJSON(1), child, noPtrace...)
	if !strings.Contains(out, "loaded: pid 1, /proc pid ") {
		t.Fatalf("cwd at the rootfs: child output:\n%s", out)
	}
	out = runAsInitChild(t, b.Dir, b.stateJSON(1), child, noPtrace...)
	for _, want := range []string{"refused: OCI state pid 1 (/proc/", "is not container c1", "cannot be read from this user namespace", "working directory (inherited from pid 1) is not its root " + b.Rootfs} {
		if !strings.Contains(out, want) {
			t.Errorf("cwd elsewhere: want %q in the child output:\n%s", want, out)
		}
	}
}

func TestLoadAsTheChildOfAnUnreadableInitChild(t *testing.T) {
	st := childState(t)
	ppid, err := procParent()
	must(t, err)
	// The setup is faithful only when the parent's links are unreadable.
	if _, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", ppid)); !errors.Is(err, os.ErrPermission) {
		t.Fatalf("the parent's cwd link: %v, want permission denied", err)
	}
	c, err := Load(st)
	if err != nil {
		fmt.Printf("refused: %v\n", err)
		return
	}
	defer c.Close()
	if c.Pid != 1 || c.ProcPid != ppid {
		t.Fatalf("pid %d, /proc pid %d, want 1, %d", c.Pid, c.ProcPid, ppid)
	}
	// The hook's own /proc entry stands for the namespaces it shares.
	if got := c.netNSToOpen(); got != "" {
		t.Fatalf("in the container's netns already, but would switch to %s", got)
	}
	fmt.Printf("loaded: pid %d, /proc pid %d\n", c.Pid, c.ProcPid)
}

// childStateEnv carries the state to a child half of a test.
const childStateEnv = "RDMA_CDI_TEST_LOAD_STATE"

func childState(t *testing.T) specs.State {
	t.Helper()
	state := os.Getenv(childStateEnv)
	if state == "" {
		t.Skip("the child half of another test")
	}
	st, err := ReadState(strings.NewReader(state))
	must(t, err)
	return st
}

// runAsInitChild runs this test binary's test named child as runc runs a
// createContainer hook: sh is pid 1 of a new pid namespace, with its cwd at
// dir, and the child is its child (through wrap, e.g. setpriv), with state
// in the environment. It returns the child's output, failing unless the
// child test passed.
func runAsInitChild(t *testing.T, dir, state, child string, wrap ...string) string {
	t.Helper()
	exe, err := os.Executable()
	must(t, err)
	script := `cd "$1" && shift && "$@"; echo "exit=$?"`
	args := append([]string{"--pid", "--fork", "sh", "-c", script, "sh", dir}, wrap...)
	args = append(args, "env", childStateEnv+"="+state, exe, "-test.run", "^"+child+"$", "-test.v")
	out, err := exec.Command("unshare", args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "exit=0") {
		t.Fatalf("%v: %s", err, out)
	}
	return string(out)
}
