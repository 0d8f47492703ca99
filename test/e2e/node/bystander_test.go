package node

// One bad config, a missing PATH or a low memlock hard limit must
// never stop containers. Real podman + runc, with the shipped hooks.d file
// and the runtime wrapper installed as docs/engines.md says (paths moved into the
// test's scratch dir).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/runtimewrap"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// defaultHookLog is where hooks log when the config naming another log
// file could not be used.
const defaultHookLog = "/var/log/rdma-cdi/hooks.log"

// shippedPrecreateHooks is a hooks dir holding the shipped
// rdma-cdi-precreate-always.json, its binary and config paths moved to
// binary and configPath.
func shippedPrecreateHooks(t *testing.T, binary, configPath string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e2e.RepoRoot(), "deploy/hooks.d/rdma-cdi-precreate-always.json"))
	if err != nil {
		t.Fatal(err)
	}
	hook := string(data)
	for _, sub := range [][2]string{{`"/usr/bin/rdma-cdi"`, fmt.Sprintf("%q", binary)}, {`"/etc/rdma-cdi/config.toml"`, fmt.Sprintf("%q", configPath)}} {
		if !strings.Contains(hook, sub[0]) {
			t.Fatalf("the shipped hook no longer names %s", sub[0])
		}
		hook = strings.Replace(hook, sub[0], sub[1], 1)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rdma-cdi-precreate-always.json"), []byte(hook), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestPrecreateConfigMissingBrokenOrNewer(t *testing.T) {
	s := newRDMASetup(t)
	good, err := os.ReadFile(s.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.toml")
	p := e2e.Podman(t).WithHooksDir(shippedPrecreateHooks(t, s.binary, cfg))
	request := []string{"-e", "RDMA_VISIBLE_DEVICES=mlx5_1"}
	cases := []struct {
		name, config string // "" = no file
		requestOK    bool
	}{
		{"missing", "", false}, // the defaults: no devices in the default spec dir's vendor
		{"syntax error", "[cdi\nvendor = 1\n", false},
		{"bad value", "[hooks]\nmemlock = \"lots\"\n", false},
		{"key from a newer version", string(good) + "\n[from_the_future]\nenabled = true\n", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(cfg)
			if tc.config != "" {
				if err := os.WriteFile(cfg, []byte(tc.config), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if so, se, err := p.Run(e2e.BB.Ref, "echo", "bystander"); err != nil || strings.TrimSpace(so) != "bystander" {
				t.Fatalf("a container that asked for nothing did not start: %v\n%s", err, se)
			}
			so, se, err := p.Run(append(request, e2e.BB.Ref, "ls", "/dev/infiniband")...)
			if tc.requestOK {
				if err != nil || !strings.Contains(so, "uverbs1") {
					t.Fatalf("request with a newer config: %v\n%s%s", err, so, se)
				}
				return
			}
			if err == nil {
				t.Fatalf("request started without its devices (%q)", so)
			}
			if tc.config == "" {
				return // the defaults name another spec dir: the usual "no devices" error
			}
			log, _ := os.ReadFile(defaultHookLog)
			if !strings.Contains(string(log), cfg) || !strings.Contains(string(log), "fix the file") {
				t.Errorf("%s does not say which config failed and how to fix it:\n%s", defaultHookLog, e2e.TailString(string(log), 2000))
			}
		})
	}
}

// wrapperRuntime is the runtime wrapper as podman's runtime: a script
// that passes on only the config's path (podman and conmon give their own
// environment, or none at all for delete) and execs the wrapper.
func wrapperRuntime(t *testing.T, s *rdmaSetup, configPath string) string {
	t.Helper()
	wrapper := s.wrapperBinary(t)
	script := filepath.Join(t.TempDir(), "rdma-runtime")
	body := fmt.Sprintf("#!/bin/sh\nexport %s=%q\nexec %q \"$@\"\n", runtimewrap.EnvConfig, configPath, wrapper)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// runcKeeps reports whether runc (default root, as podman runs it) still
// keeps state for container id.
func runcKeeps(t *testing.T, id string) bool {
	t.Helper()
	out, err := exec.Command(e2e.RequireBinary(t, "runc"), "list", "-q").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "no such file") {
		t.Fatalf("runc list: %v\n%s", err, out)
	}
	return slices.Contains(strings.Fields(string(out)), id)
}

// The wrapper as podman's runtime, the config it is given missing, broken
// or newer: every container that asked for nothing starts, and `run --rm`
// ends in conmon's `delete --force` through the wrapper with no
// environment at all (no PATH: the wrapper finds runc in the system PATH);
// a request is refused with the file's name and the fix in what podman
// shows, or, with a newer config, gets its devices.
func TestWrapperUnderPodmanConfigMissingBrokenOrNewer(t *testing.T) {
	s := newRDMASetup(t)
	good, err := os.ReadFile(s.config)
	if err != nil {
		t.Fatal(err)
	}
	// The setup's config records through a script; here runc is found by name.
	goodRunc := regexp.MustCompile(`(?m)^path = .*$`).ReplaceAllString(string(good), `path = "runc"`)
	cfg := filepath.Join(t.TempDir(), "config.toml")
	p := e2e.Podman(t)
	runtime := wrapperRuntime(t, s, cfg)
	var cidFile string
	podmanRun := func(args ...string) (string, string, error) {
		cidFile = filepath.Join(t.TempDir(), "cid")
		so, se, err := p.Podman(append([]string{"--runtime", runtime, "run", "--rm", "--cidfile", cidFile}, args...)...)
		if cid, rerr := os.ReadFile(cidFile); rerr == nil && runcKeeps(t, strings.TrimSpace(string(cid))) {
			t.Errorf("podman run --rm left runc state of %s behind (conmon's delete did not reach runc)", cid)
		}
		return so, se, err
	}
	cases := []struct {
		name, config string // "" = no file
		requestOK    bool
		// recorded: the file's runtime.path is the setup's recording runc,
		// and the bystander must be created through it.
		recorded bool
	}{
		{"missing", "", false, false},
		{"syntax error", "[runtime\npath = \"runc\"\n", false, false},
		{"bad value", string(good) + "\n[nccl]\nroce_version = 7\n", false, true},
		{"key from a newer version", goodRunc + "\n[from_the_future]\nenabled = true\n", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(cfg)
			if tc.config != "" {
				if err := os.WriteFile(cfg, []byte(tc.config), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if so, se, err := podmanRun(e2e.BB.Ref, "echo", "bystander"); err != nil || strings.TrimSpace(so) != "bystander" {
				t.Fatalf("a container that asked for nothing did not start: %v\n%s", err, se)
			}
			if tc.recorded {
				s.recorded(t, cidFile) // a file that parsed keeps its runtime.path
			}
			if tc.config == "" {
				return // the defaults name another vendor: the request is the precreate test's
			}
			so, se, err := podmanRun("-e", "RDMA_VISIBLE_DEVICES=mlx5_1", e2e.BB.Ref, "ls", "/dev/infiniband")
			if tc.requestOK {
				if err != nil || !strings.Contains(so, "uverbs1") {
					t.Fatalf("request with a newer config: %v\n%s%s", err, so, se)
				}
				return
			}
			if err == nil {
				t.Fatalf("request started although its config is unusable (%q)", so)
			}
			if !strings.Contains(se, cfg) || !strings.Contains(se, "fix the file") {
				t.Errorf("podman does not show which config failed and how to fix it:\n%s", se)
			}
		})
	}
}

// The wrapper under podman: a config that breaks while a container runs
// must not stop `podman rm -f` (which ends in the wrapper's delete), and
// conmon's empty environment must not leave runc state behind.
func TestWrapperUnderPodmanBrokenConfigAndNoPATH(t *testing.T) {
	s := newRDMASetup(t)
	cfg := filepath.Join(t.TempDir(), "config.toml")
	// runtime.path "runc": found in PATH, or in the system PATH without one.
	if err := os.WriteFile(cfg, []byte("[runtime]\npath = \"runc\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := e2e.Podman(t)
	runtime := wrapperRuntime(t, s, cfg)
	podman := func(args ...string) (string, string, error) {
		return p.Podman(append([]string{"--runtime", runtime}, args...)...)
	}

	cidFile := filepath.Join(t.TempDir(), "cid")
	so, se, err := podman("run", "--rm", "--cidfile", cidFile, e2e.BB.Ref, "echo", "ran")
	if err != nil || strings.TrimSpace(so) != "ran" {
		t.Fatalf("podman run --rm through the wrapper: %v\n%s", err, se)
	}
	cid, err := os.ReadFile(cidFile)
	if err != nil {
		t.Fatal(err)
	}
	if runcKeeps(t, strings.TrimSpace(string(cid))) {
		t.Errorf("podman run --rm left runc state of %s behind", cid)
	}

	id, se, err := podman("run", "-d", e2e.BB.Ref, "sleep", "600")
	if err != nil {
		t.Fatalf("podman run -d: %v\n%s", err, se)
	}
	id = strings.TrimSpace(id)
	if err := os.WriteFile(cfg, []byte("[runtime\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// state, as an engine without PATH runs it, reaches runc.
	state := exec.Command(runtime, "state", id)
	state.Env = []string{}
	if out, err := state.Output(); err != nil || !strings.Contains(string(out), `"status": "running"`) {
		t.Fatalf("state through the wrapper with a broken config and no PATH: %v\n%s", err, out)
	}
	if _, se, err := podman("rm", "--force", "--time", "0", id); err != nil {
		t.Fatalf("podman rm -f with a broken config: %v\n%s", err, se)
	}
	if runcKeeps(t, id) {
		t.Errorf("runc still runs %s after podman rm -f: an orphan", id)
	}
}

// Where the runtime may not raise the hard limit (here: root without
// CAP_SYS_RESOURCE under a 2 MiB hard limit), precreate and the wrapper
// give the container its hard limit instead of the config's 4 MiB, which
// runc cannot set. The config editor runs in podman (precreate) or in the
// runtime's place (the wrapper); both inherit podman's limits.
func TestPrecreateMemlockWithinTheHardLimit(t *testing.T) {
	s := newRDMASetup(t)
	p := e2e.Podman(t).WithHooksDir(s.hooksDir(t, `{"always":true}`))
	assertMemlockWithinHardLimit(t, p.Command("run", "--rm", "-e", "RDMA_VISIBLE_DEVICES=mlx5_1", e2e.BB.Ref, "sh", "-c", "ulimit -l"))
}

func TestWrapperMemlockWithinTheHardLimit(t *testing.T) {
	s := newRDMASetup(t)
	good, err := os.ReadFile(s.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, regexp.MustCompile(`(?m)^path = .*$`).ReplaceAll(good, []byte(`path = "runc"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := e2e.Podman(t)
	assertMemlockWithinHardLimit(t, p.Command("--runtime", wrapperRuntime(t, s, cfg), "run", "--rm", "-e", "RDMA_VISIBLE_DEVICES=mlx5_1", e2e.BB.Ref, "sh", "-c", "ulimit -l"))
}

// assertMemlockWithinHardLimit runs podman (cmd, printing `ulimit -l` of
// a container that asked for RDMA) under a 2 MiB memlock hard limit.
func assertMemlockWithinHardLimit(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	underMemlock(t, cmd, 65536, 2097152)
	so, se, err := e2e.Run(cmd)
	if err != nil {
		t.Fatalf("a request under a 2 MiB hard limit did not start: %v\n%s", err, se)
	}
	if got := strings.TrimSpace(so); got != "2048" && got != fmt.Sprint(wrapperMemlock>>10) {
		t.Errorf("ulimit -l = %q, want 2048 (the hard limit) or %d (the config's, where it may be raised)", got, wrapperMemlock>>10)
	}
}
