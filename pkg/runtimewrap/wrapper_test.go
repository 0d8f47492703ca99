package runtimewrap_test

// These tests run the real wrapper: the test binary, symlinked as
// rdma-container-runtime, acts as the wrapper (see TestMain) and execs a
// fake runtime script that records its argv and the config.json it saw.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/runtimewrap"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

func TestMain(m *testing.M) {
	if runtimewrap.IsWrapper(os.Args[0]) {
		os.Exit(runtimewrap.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

const fakeRuntime = `#!/bin/sh
# Records what it was given, as the real runc would see it.
rec=%q
printf '%%s\n' "$@" > "$rec/argv"
pwd > "$rec/cwd"
bundle=.
prev=
for a in "$@"; do
	case "$prev" in --bundle|-b) bundle=$a ;; esac
	case "$a" in --bundle=*) bundle=${a#--bundle=} ;; esac
	prev=$a
done
[ -f "$bundle/config.json" ] && cp "$bundle/config.json" "$rec/seen.json"
exit 0
`

type env struct {
	dir, wrapper, rec, config string
}

func setup(t *testing.T, extraConfig string) env {
	t.Helper()
	dir := t.TempDir()
	e := env{dir: dir, wrapper: filepath.Join(dir, "bin", runtimewrap.Name), rec: filepath.Join(dir, "rec"), config: filepath.Join(dir, "config.toml")}
	for _, d := range []string{"bin", "rec", "cdi", "sys"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, e.wrapper); err != nil {
		t.Fatal(err)
	}
	runtime := filepath.Join(dir, "fake-runc")
	if err := os.WriteFile(runtime, []byte(fmt.Sprintf(fakeRuntime, e.rec)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cdi", "rdma.yaml"), []byte(fixture.TwoHCASpec), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`[cdi]
spec_dir = %q
[hooks]
memlock = "8M"
[runtime]
path = %q
log_file = %q
[nccl.tunables]
NCCL_IB_TIMEOUT = "22"
%s`, filepath.Join(dir, "cdi"), runtime, filepath.Join(dir, "runtime.log"), extraConfig)
	if err := os.WriteFile(e.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e env) bundle(t *testing.T, config string) string {
	t.Helper()
	b := filepath.Join(e.dir, "bundle")
	if err := os.MkdirAll(b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b, "config.json"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

// run starts the wrapper with args in cwd and returns its exit code and stderr.
func (e env) run(t *testing.T, cwd string, args ...string) (int, string) {
	t.Helper()
	return e.runEnv(t, cwd, nil, args...)
}

// runEnv is run with more environment (a later PATH wins).
func (e env) runEnv(t *testing.T, cwd string, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(e.wrapper, args...)
	cmd.Dir = cwd
	cmd.Env = append(append(os.Environ(), runtimewrap.EnvConfig+"="+e.config, runtimewrap.EnvSysfsRoot+"="+filepath.Join(e.dir, "sys")), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), stderr.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, stderr.String()
}

func (e env) argv(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.rec, "argv"))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

const requesting = `{"ociVersion":"1.0.2","process":{"user":{"uid":1000,"gid":1000},"args":["sh"],"cwd":"/",` +
	`"env":["PATH=/bin","RDMA_VISIBLE_DEVICES=all","NCCL_IB_HCA=mlx5_3:1"],` +
	`"capabilities":{"bounding":["CAP_KILL"],"effective":["CAP_KILL"],"permitted":["CAP_KILL"]}},"root":{"path":"rootfs"},"linux":{}}`

func TestWrapperCreateEditsThenExecs(t *testing.T) {
	e := setup(t, "")
	b := e.bundle(t, requesting)
	// Docker 20.10's argv, with --bundle= and flags after the id.
	args := []string{"--root", "/run/r", "--log", filepath.Join(e.dir, "log.json"), "--log-format", "json", "create", "--bundle=" + b, "id1", "--pid-file", filepath.Join(e.dir, "pid")}
	code, stderr := e.run(t, "/", args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got := e.argv(t); !slices.Equal(got, args) {
		t.Fatalf("runtime argv = %q, want %q", got, args)
	}
	data, err := os.ReadFile(filepath.Join(e.rec, "seen.json"))
	if err != nil {
		t.Fatal("runtime did not see a config.json:", err)
	}
	var seen specs.Spec
	if err := json.Unmarshal(data, &seen); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, d := range seen.Linux.Devices {
		paths = append(paths, d.Path)
	}
	slices.Sort(paths)
	if !slices.Equal(paths, []string{"/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1"}) {
		t.Fatalf("devices = %v", paths)
	}
	c := seen.Process.Capabilities
	for _, set := range [][]string{c.Bounding, c.Effective, c.Permitted, c.Ambient, c.Inheritable} {
		if !slices.Contains(set, "CAP_IPC_LOCK") {
			t.Fatalf("uid 1000 caps = %+v", c)
		}
	}
	if len(seen.Process.Rlimits) != 1 || seen.Process.Rlimits[0] != (specs.POSIXRlimit{Type: "RLIMIT_MEMLOCK", Hard: 8 << 20, Soft: 8 << 20}) {
		t.Fatalf("rlimits = %+v", seen.Process.Rlimits)
	}
	env := strings.Join(seen.Process.Env, " ")
	if !strings.Contains(env, "NCCL_IB_TIMEOUT=22") || !strings.Contains(env, "NCCL_IB_HCA=mlx5_3:1") {
		t.Fatalf("env = %v", seen.Process.Env)
	}
	if info, _ := os.Stat(filepath.Join(b, "config.json")); info.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v", info.Mode())
	}
	if log, _ := os.ReadFile(filepath.Join(e.dir, "runtime.log")); !strings.Contains(string(log), "gave RDMA devices mlx5_0,mlx5_1") {
		t.Fatalf("runtime log = %q", log)
	}
}

func TestWrapperNoRequestLeavesBytes(t *testing.T) {
	e := setup(t, "")
	orig := "{\"ociVersion\": \"1.0.2\",\n \"process\":{\"args\":[\"sh\"],\"cwd\":\"/\",\"env\":[\"PATH=/bin\"]},\"root\":{\"path\":\"rootfs\"}}"
	b := e.bundle(t, orig)
	before, _ := os.Stat(filepath.Join(b, "config.json"))
	// -b, and the bundle as the working directory (runc's default).
	for _, args := range [][]string{{"create", "-b", b, "id2"}, {"create", "id3"}} {
		if code, stderr := e.run(t, b, args...); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, stderr)
		}
		if got := e.argv(t); !slices.Equal(got, args) {
			t.Fatalf("argv = %q", got)
		}
		if seen, _ := os.ReadFile(filepath.Join(e.rec, "seen.json")); string(seen) != orig {
			t.Fatalf("runtime saw %q", seen)
		}
	}
	after, _ := os.Stat(filepath.Join(b, "config.json"))
	if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("config.json rewritten")
	}
}

func TestWrapperOtherCommandsUntouched(t *testing.T) {
	e := setup(t, "")
	// No bundle exists anywhere: nothing may be read.
	for _, args := range [][]string{
		{"--root", "/r", "start", "id"},
		{"delete", "--force", "id"},
		{"frobnicate", "--bundle", "/nonexistent", "--weird=1", "x"},
		{"--version"},
	} {
		os.Remove(filepath.Join(e.rec, "argv"))
		if code, stderr := e.run(t, e.dir, args...); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, stderr)
		}
		if got := e.argv(t); !slices.Equal(got, args) {
			t.Fatalf("argv = %q, want %q", got, args)
		}
	}
}

func TestWrapperFailures(t *testing.T) {
	e := setup(t, "")
	logPath := filepath.Join(e.dir, "log.json")

	// config.json that does not parse: clear error naming it, file untouched, no runtime.
	b := e.bundle(t, `{"process": `)
	code, stderr := e.run(t, "/", "--log", logPath, "--log-format", "json", "create", "--bundle", b, "id")
	if code == 0 || !strings.Contains(stderr, filepath.Join(b, "config.json")) || !strings.Contains(stderr, "not a valid OCI config") {
		t.Fatalf("bad json: exit %d, %q", code, stderr)
	}
	if data, _ := os.ReadFile(filepath.Join(b, "config.json")); string(data) != `{"process": ` {
		t.Fatalf("config.json changed: %q", data)
	}
	if e.argv(t) != nil {
		t.Fatal("runtime ran")
	}
	logData, _ := os.ReadFile(logPath)
	var entry map[string]string
	if err := json.Unmarshal(bytes.TrimSpace(logData), &entry); err != nil || entry["level"] != "error" || !strings.Contains(entry["msg"], "not a valid OCI config") {
		t.Fatalf("runc log = %q (%v)", logData, err)
	}

	// Missing bundle.
	code, stderr = e.run(t, "/", "create", "--bundle", filepath.Join(e.dir, "gone"), "id")
	if code == 0 || !strings.Contains(stderr, "gone") || e.argv(t) != nil {
		t.Fatalf("missing bundle: exit %d, %q", code, stderr)
	}

	// Unknown device: the known ones are listed.
	b = e.bundle(t, `{"process":{"args":["sh"],"cwd":"/","env":["RDMA_VISIBLE_DEVICES=mlx5_7"]}}`)
	code, stderr = e.run(t, "/", "create", "--bundle", b, "id")
	if code == 0 || !strings.Contains(stderr, `unknown RDMA device "mlx5_7"`) || !strings.Contains(stderr, "known: mlx5_0, mlx5_1") || e.argv(t) != nil {
		t.Fatalf("unknown device: exit %d, %q", code, stderr)
	}
}

func TestWrapperNeverExecsItself(t *testing.T) {
	e := setup(t, "")
	cfg, _ := os.ReadFile(e.config)
	cfg = bytes.Replace(cfg, []byte(filepath.Join(e.dir, "fake-runc")), []byte(e.wrapper), 1)
	if err := os.WriteFile(e.config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stderr := e.run(t, "/", "start", "id")
	if code == 0 || !strings.Contains(stderr, "wrapper itself") {
		t.Fatalf("exit %d, %q", code, stderr)
	}
}

// A config that does not parse, or is from a newer version, never stops a
// container that asked for nothing, nor delete/kill/state of a running
// one: the defaults are used (runtime "runc" from PATH), and only an RDMA
// request is refused, naming the file.
func TestWrapperWithABrokenOrNewerConfig(t *testing.T) {
	e := setup(t, "")
	// The defaults' runtime is "runc" from PATH: the recording fake here.
	pathDir := filepath.Join(e.dir, "path")
	if err := os.MkdirAll(pathDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(e.dir, "fake-runc"), filepath.Join(pathDir, "runc")); err != nil {
		t.Fatal(err)
	}
	withPath := []string{"PATH=" + pathDir + ":/usr/bin:/bin"}
	if err := os.WriteFile(e.config, []byte("[runtime\npath = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"delete", "--force", "id"}, {"kill", "id", "KILL"}, {"state", "id"}} {
		if code, stderr := e.runEnv(t, "/", withPath, args...); code != 0 || !slices.Equal(e.argv(t), args) {
			t.Errorf("%v with a broken config: exit %d, argv %q, %q", args, code, e.argv(t), stderr)
		}
	}
	plain := `{"process":{"args":["sh"],"cwd":"/","env":["PATH=/bin"]}}`
	b := e.bundle(t, plain)
	if code, stderr := e.runEnv(t, "/", withPath, "create", "--bundle", b, "id"); code != 0 {
		t.Fatalf("a container that asked for nothing, broken config: exit %d, %q", code, stderr)
	}
	if seen, _ := os.ReadFile(filepath.Join(e.rec, "seen.json")); string(seen) != plain {
		t.Errorf("the bystander's config changed: %s", seen)
	}
	b = e.bundle(t, requesting)
	code, stderr := e.runEnv(t, "/", withPath, "create", "--bundle", b, "id2")
	if code == 0 || !strings.Contains(stderr, e.config) || !strings.Contains(stderr, "fix the file") || slices.Contains(e.argv(t), "id2") {
		t.Fatalf("an RDMA request with a broken config: exit %d, %q; want a refusal naming %s and the fix", code, stderr, e.config)
	}

	// Newer config: the unknown key is a warning, the request is served.
	cfg := fmt.Sprintf("[cdi]\nspec_dir = %q\nfrom_the_future = true\n[runtime]\npath = %q\nlog_file = %q\n",
		filepath.Join(e.dir, "cdi"), filepath.Join(e.dir, "fake-runc"), filepath.Join(e.dir, "runtime.log"))
	if err := os.WriteFile(e.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, stderr := e.run(t, "/", "create", "--bundle", b, "id3"); code != 0 {
		t.Fatalf("newer config: exit %d, %q", code, stderr)
	}
	if log, _ := os.ReadFile(filepath.Join(e.dir, "runtime.log")); !strings.Contains(string(log), "cdi.from_the_future") {
		t.Errorf("no warning about the unknown key in the wrapper's log:\n%s", log)
	}
	if seen, _ := os.ReadFile(filepath.Join(e.rec, "seen.json")); !bytes.Contains(seen, []byte("CAP_IPC_LOCK")) {
		t.Errorf("newer config: the request was not served: %s", seen)
	}
}

// conmon runs `delete --force` with an empty environment: the runtime is
// still found, in the standard system PATH.
func TestWrapperFindsTheRuntimeWithoutPATH(t *testing.T) {
	if got := runtimewrap.SearchPath(""); got != runtimewrap.SystemPath {
		t.Errorf("SearchPath(\"\") = %q", got)
	}
	if got := runtimewrap.SearchPath("/opt/bin"); got != "/opt/bin" {
		t.Errorf("SearchPath(/opt/bin) = %q", got)
	}
	e := setup(t, "")
	// runtime.path "sh" stands for "runc": a bare name only /bin holds.
	cfg, _ := os.ReadFile(e.config)
	cfg = bytes.Replace(cfg, []byte(filepath.Join(e.dir, "fake-runc")), []byte("sh"), 1)
	if err := os.WriteFile(e.config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(e.wrapper, "-c", "echo found-in-system-path")
	cmd.Env = []string{runtimewrap.EnvConfig + "=" + e.config}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "found-in-system-path") {
		t.Fatalf("with no PATH: %v\n%s", err, out)
	}
}

// kubernetesRequesting is requesting as containerd's CRI plugin writes it
// for a pod's container: its CRI annotations, and the pod's env asking
// for every HCA.
const kubernetesRequesting = `{"ociVersion":"1.0.2","process":{"user":{"uid":1000,"gid":1000},"args":["sh"],"cwd":"/",` +
	`"env":["PATH=/bin","RDMA_VISIBLE_DEVICES=all"],` +
	`"capabilities":{"bounding":["CAP_KILL"],"effective":["CAP_KILL"],"permitted":["CAP_KILL"]}},"root":{"path":"rootfs"},"linux":{},` +
	`"annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.sandbox-id":"4f2a","io.kubernetes.cri.sandbox-namespace":"tenant"}}`

// Under Kubernetes a container's own env is no request (the finding: any
// pod gave itself every HCA and CAP_IPC_LOCK): the runtime gets the
// original bytes, and the log names what was ignored and the switch.
// runtime.kubernetes_accept_env = true turns the env request back on.
func TestWrapperKubernetesEnvRequest(t *testing.T) {
	e := setup(t, "")
	b := e.bundle(t, kubernetesRequesting)
	if code, stderr := e.run(t, "/", "create", "--bundle", b, "k8s1"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if seen, _ := os.ReadFile(filepath.Join(e.rec, "seen.json")); string(seen) != kubernetesRequesting {
		t.Fatalf("a Kubernetes container's env request was served; the runtime saw:\n%s", seen)
	}
	log, _ := os.ReadFile(filepath.Join(e.dir, "runtime.log"))
	t.Logf("runtime log: %s", log)
	for _, want := range []string{"env RDMA_VISIBLE_DEVICES", "runtime.kubernetes_accept_env", "io.kubernetes.cri."} {
		if !strings.Contains(string(log), want) {
			t.Errorf("runtime log does not name %q:\n%s", want, log)
		}
	}

	e = setup(t, "")
	cfg, _ := os.ReadFile(e.config)
	cfg = bytes.Replace(cfg, []byte("[runtime]\n"), []byte("[runtime]\nkubernetes_accept_env = true\n"), 1)
	if err := os.WriteFile(e.config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	b = e.bundle(t, kubernetesRequesting)
	if code, stderr := e.run(t, "/", "create", "--bundle", b, "k8s2"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if seen, _ := os.ReadFile(filepath.Join(e.rec, "seen.json")); !bytes.Contains(seen, []byte("uverbs1")) || !bytes.Contains(seen, []byte("CAP_IPC_LOCK")) {
		t.Fatalf("kubernetes_accept_env = true: the env request was not served:\n%s", seen)
	}
}
