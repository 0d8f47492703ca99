package hooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// testBundle is a bundle dir with a rootfs and a config.json.
type testBundle struct {
	Dir, Rootfs string
	Spec        specs.Spec
}

// newBundle makes BUNDLE/rootfs with /etc, and a config.json whose root.path
// is relative ("rootfs"), as runc's `spec` writes it.
func newBundle(t testing.TB) *testBundle {
	t.Helper()
	dir := t.TempDir()
	b := &testBundle{Dir: dir, Rootfs: filepath.Join(dir, "rootfs")}
	must(t, os.MkdirAll(filepath.Join(b.Rootfs, "etc"), 0o755))
	b.Spec = specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: "rootfs"},
		Process: &specs.Process{Args: []string{"sh"}, Cwd: "/", Env: []string{"PATH=/usr/bin:/bin"}},
		Linux:   &specs.Linux{},
	}
	b.save(t)
	return b
}

func (b *testBundle) save(t testing.TB) {
	t.Helper()
	data, err := json.Marshal(b.Spec)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(b.Dir, "config.json"), data, 0o644))
}

// write puts a file into the rootfs (test setup, host paths).
func (b *testBundle) write(t testing.TB, rel, body string) {
	t.Helper()
	p := filepath.Join(b.Rootfs, rel)
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte(body), 0o644))
}

// startInRoot starts `sleep 30` with its cwd at the rootfs, as runc starts
// its init, and returns it; it is killed at cleanup. wrap prefixes the
// command (e.g. unshare -n sh -c '...; exec sleep 30').
func startInRoot(t testing.TB, rootfs string, argv ...string) *exec.Cmd {
	t.Helper()
	if len(argv) == 0 {
		argv = []string{"sleep", "30"}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = rootfs
	cmd.Stderr = os.Stderr
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

func (b *testBundle) state(pid int) specs.State {
	return specs.State{Version: specs.Version, ID: "c1", Status: specs.StateCreating, Pid: pid, Bundle: b.Dir}
}

func (b *testBundle) stateJSON(pid int) string {
	data, _ := json.Marshal(b.state(pid))
	return string(data)
}

// load starts a process in the rootfs and loads the container.
func (b *testBundle) load(t testing.TB) *Container {
	t.Helper()
	p := startInRoot(t, b.Rootfs)
	c, err := Load(b.state(p.Process.Pid))
	must(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// testLog collects log lines.
func testLog() (*logrus.Entry, *bytes.Buffer) {
	var buf bytes.Buffer
	l := logrus.New()
	l.SetOutput(&buf)
	l.SetLevel(logrus.DebugLevel)
	l.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true, DisableColors: true})
	return l.WithField("hook", "test"), &buf
}

// canary is a directory outside every rootfs, holding a file, standing for
// a host path an image points its symlinks at.
type canary struct{ Dir, File string }

func newCanary(t testing.TB) canary {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "host-canary")
	must(t, os.MkdirAll(dir, 0o755))
	c := canary{Dir: dir, File: filepath.Join(dir, "secret")}
	must(t, os.WriteFile(c.File, []byte("host data\n"), 0o600))
	return c
}

// snapshot lists everything under the canary dir with modes and contents.
func (c canary) snapshot(t testing.TB) string {
	t.Helper()
	var lines []string
	must(t, filepath.WalkDir(c.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		line := fmt.Sprintf("%s %v %d", p, fi.Mode(), st.Ino)
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += " " + string(data)
		}
		if target, err := os.Readlink(p); err == nil {
			line += " -> " + target
		}
		lines = append(lines, line)
		return nil
	}))
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func (c canary) assertUntouched(t testing.TB, before string) {
	t.Helper()
	if after := c.snapshot(t); after != before {
		t.Fatalf("host canary changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func syscallMkfifo(p string) error { return syscall.Mkfifo(p, 0o644) }

func sleepMs(n int) { time.Sleep(time.Duration(n) * time.Millisecond) }

func discoverNode(o NCCLConfOptions) (model.Node, error) {
	res, err := discover.Discover(discover.Options{Roots: o.Roots, SkipNet: true})
	return res.Node, err
}
