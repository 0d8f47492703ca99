package node

// A user-namespaced container (podman --uidmap/--gidmap;
// Kubernetes hostUsers: false is the same case for the hooks) with devices
// from our spec starts and gets the hooks' work, while a state whose pid is
// not the container is still refused, with the error as the line podman
// shows and the last line of the hook's stderr.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
	cdi "tags.cncf.io/container-device-interface/specs-go"
)

var hostUsersFalse = []string{"--uidmap", "0:100000:65536", "--gidmap", "0:100000:65536"}

// usernsHookSetup is a fixture node of this test's own whose files the
// hooks can read as the container's root, host uid 100000, as they read a
// node's /etc, /sys and /dev (a scratch dir is 0700).
func usernsHookSetup(t *testing.T) *hookSetup {
	t.Helper()
	n := e2e.NewFixtureNode(t, "gid-not-3")
	if err := os.Chmod(n.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	vendor := e2e.UniqueVendor(t)
	n.GenerateSpec(t, e2e.SpecOptions{Vendor: vendor, Path: filepath.Join(e2e.CDIDir, vendor+"-hca.json")})
	return &hookSetup{dir: n.Dir, sys: n.Sys, dev: n.Dev, config: n.Config, log: n.HookLog, vendor: vendor, topo: n.Topo}
}

// usernsPodman is `podman run --rm` with the user namespace flags and the
// device, in a private mount namespace where the fixture's char devices
// are at /dev/infiniband: in a user namespace runc cannot mknod, so it
// binds each device node from its container path on the host, where a real
// node has them. An empty /dev/infiniband is made on the host for the
// mount when there is none, and removed after.
func usernsPodman(t *testing.T, p *e2e.PodmanEnv, s *hookSetup, device string, args ...string) *exec.Cmd {
	t.Helper()
	if err := os.Mkdir("/dev/infiniband", 0o755); err == nil {
		t.Cleanup(func() { os.Remove("/dev/infiniband") })
	} else if !os.IsExist(err) {
		t.Fatal(err)
	}
	full := append(append([]string{"run", "--rm"}, hostUsersFalse...), "--device", s.device(device))
	podman := p.Command(append(full, args...)...)
	cmd := exec.Command(e2e.RequireBinary(t, "unshare"), "--mount", "--propagation", "private",
		"sh", "-c", `mount --bind "$0" /dev/infiniband && exec "$@"`, filepath.Join(s.dev, "infiniband"))
	cmd.Args = append(cmd.Args, podman.Args...)
	cmd.Env = podman.Env
	return cmd
}

func TestHooksUserNamespacedContainerStarts(t *testing.T) {
	s := usernsHookSetup(t)
	p := e2e.Podman(t)
	cmd := usernsPodman(t, p, s, "mlx5_1", e2e.Glibc.Ref, "sh", "-c",
		"cat /proc/self/uid_map; ls /dev/infiniband; cat /etc/nccl.conf; echo memlock=$(ulimit -l); ldconfig -p | grep libibverbs.so.1; "+
			"stat -c 'owner %n %u:%g' /etc/nccl.conf /etc/ld.so.cache /etc/ld.so.conf.d/00-rdma-cdi.conf")
	// podman under a 64 KiB memlock soft limit, within this machine's
	// 8 MiB hard one: the memlock hook must raise the container's.
	underMemlock(t, cmd, 65536, 8388608)
	so, se, err := e2e.Run(cmd)
	if err != nil {
		t.Fatalf("a user-namespaced container with a device did not start: %v\n%s\nhook log:\n%s", err, se, s.hookLog())
	}
	for _, want := range []string{
		"0     100000      65536",                // the user namespace
		"uverbs2",                                // mlx5_1's device, bound in
		"\nNCCL_IB_HCA=mlx5_1:1\n",               // nccl-conf
		"memlock=8192\n",                         // memlock: 64 KiB raised to the hard limit
		"libibverbs.so.1 (libc6,x86-64) => /usr", // update-ldcache
		// written by the host's root, owned by the container's
		"owner /etc/nccl.conf 0:0\n",
		"owner /etc/ld.so.cache 0:0\n",
		"owner /etc/ld.so.conf.d/00-rdma-cdi.conf 0:0\n",
	} {
		if !strings.Contains(so, want) {
			t.Errorf("container output lacks %q:\n%s\nhook log:\n%s", want, so, s.hookLog())
		}
	}
	// The one hook is a createRuntime hook: it runs as the host's root and
	// logs to the host file (a createContainer hook, the user namespace's
	// root, could not open it), every step included.
	for _, step := range []string{"memlock", "user-space", "nccl-conf"} {
		if !strings.Contains(s.hookLog(), "hook=create-runtime step="+step) {
			t.Errorf("no %s line in the hook log:\n%s", step, s.hookLog())
		}
	}
}

// forgedPidHook writes a hooks.d file for stage that runs the spec's hook
// (create-runtime, which older specs ran at createContainer) as runc would (exec'd, so the hook is still the init's
// child), with the state's pid replaced by pid ("self": the hook's own, as
// its pid namespace numbers it; "self-proc": as /proc does), and its stderr
// copied to the returned file.
func forgedPidHook(t *testing.T, s *hookSetup, stage, pid string) (hooksDir, stderrFile string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "rdma-cdi-e2e-forged-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The hook runs as host uid 100000 under the user namespace.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stderrFile = filepath.Join(dir, "hook.stderr")
	if err := os.WriteFile(stderrFile, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(stderrFile, 0o666); err != nil {
		t.Fatal(err)
	}
	script := `pid=$1 errfile=$2 path=$3 argv0=$4; shift 4
[ "$pid" = self ] && pid=$$
# cd, not a subshell, reads this very process's /proc entry; back to the rootfs after.
[ "$pid" = self-proc ] && cd -P /proc/self && pid=${PWD#/proc/} && cd - >/dev/null
state=$(cat)
[[ $state =~ \"pid\":[0-9]+ ]] || { echo "no pid in $state" >&2; exit 1; }
exec -a "$argv0" "$path" "$@" <<<"${state/${BASH_REMATCH[0]}/\"pid\":$pid}" 2> >(tee -a "$errfile" >&2)
`
	var spec cdi.Spec
	data, err := os.ReadFile(filepath.Join(e2e.CDIDir, s.vendor+"-hca.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.ContainerEdits.Hooks) == 0 {
		t.Fatal("the spec has no hook")
	}
	h := spec.ContainerEdits.Hooks[0]
	hook := map[string]any{
		"version": "1.0.0",
		"hook":    map[string]any{"path": e2e.RequireBinary(t, "bash"), "args": append([]string{"bash", "-c", script, "forged", pid, stderrFile, h.Path}, h.Args...)},
		"when":    map[string]any{"always": true},
		"stages":  []string{stage},
	}
	out, err := json.Marshal(hook)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "forged.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, stderrFile
}

// A state whose pid is not the container's is refused under a user
// namespace as before: another running container's init, the hook itself
// (createContainer, the user namespace's root) and the host's PID 1
// (createRuntime). The error names the pid; it is the line podman shows,
// and the last line of the hook's stderr.
func TestHooksUserNamespacedRefuseAPidThatIsNotTheContainer(t *testing.T) {
	s := usernsHookSetup(t)
	p := e2e.Podman(t)
	other := e2e.UniqueID("rdma-cdi-other-")
	if _, se, err := p.Podman(append(append([]string{"run", "-d", "--name", other}, hostUsersFalse...), e2e.BB.Ref, "sleep", "600")...); err != nil {
		t.Fatalf("%v\n%s", err, se)
	}
	t.Cleanup(func() { _, _, _ = p.Podman("rm", "--force", "--time", "0", other) })
	otherPid, _, err := p.Podman("inspect", "--format", "{{.State.Pid}}", other)
	if err != nil {
		t.Fatal(err)
	}
	otherPid = strings.TrimSpace(otherPid)
	if n, err := strconv.Atoi(otherPid); err != nil || n <= 1 {
		t.Fatalf("pid of %s: %q", other, otherPid)
	}
	for _, c := range []struct{ name, stage, pid string }{
		{"another container", "createContainer", otherPid},
		{"the hook itself", "createContainer", "self"},
		{"the hook itself as /proc numbers it", "createContainer", "self-proc"},
		{"host PID 1", "createRuntime", "1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hooksDir, stderrFile := forgedPidHook(t, s, c.stage, c.pid)
			so, se, err := e2e.Run(usernsPodman(t, p.WithHooksDir(hooksDir), s, "mlx5_1", e2e.BB.Ref, "echo", "started"))
			if err == nil || strings.Contains(so, "started") {
				t.Fatalf("the container started with pid %s in the state:\n%s%s", c.pid, so, se)
			}
			data, _ := os.ReadFile(stderrFile)
			hookStderr := strings.TrimSpace(string(data))
			pid := c.pid
			if strings.HasPrefix(pid, "self") {
				pid = `\d+`
			}
			refusal := regexp.MustCompile(`OCI state pid ` + pid + ` (\(/proc/\d+\) )?is (not (provably )?container|this hook's own process, not container) [0-9a-f]{64}`)
			lines := strings.Split(hookStderr, "\n")
			if !refusal.MatchString(lines[len(lines)-1]) {
				t.Errorf("the last line of the hook's stderr is not the refusal:\n%s", hookStderr)
			}
			podmanSays := se[strings.LastIndex(se, "Error: "):]
			if !refusal.MatchString(podmanSays) {
				t.Errorf("podman does not show the refusal:\n%s\nhook stderr:\n%s", podmanSays, hookStderr)
			}
			t.Logf("podman: %s", strings.TrimSpace(podmanSays))
		})
	}
}
