package reliability

// Hostile input: what a container's creator controls (config.json, env,
// annotations) and what anyone who can run the hook controls (the OCI
// state), plus the modes of what rdma-cdi creates on the host.

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// precreateSetup is a node with its spec in a private spec dir and a config
// that points the precreate hook at both.
type precreateSetup struct {
	n              *node
	specDir, cfg   string
	vendor, logDir string
}

func newPrecreateSetup(t *testing.T) *precreateSetup {
	t.Helper()
	s := &precreateSetup{n: newNode(t, "gid-not-3"), vendor: faultVendor}
	s.specDir = filepath.Join(s.n.dir, "cdi")
	s.logDir = filepath.Join(s.n.dir, "log")
	s.cfg = filepath.Join(s.n.dir, "config.toml")
	must(t, os.WriteFile(s.cfg, []byte(fmt.Sprintf("[cdi]\nvendor = %q\nspec_dir = %q\n[hooks]\nlog_file = %q\n", s.vendor, s.specDir, filepath.Join(s.logDir, "hooks.log"))), 0o644))
	if r := s.n.generate(t, s.specDir, s.vendor, "--config", s.cfg); r.code != 0 {
		t.Fatal(r)
	}
	return s
}

func (s *precreateSetup) precreate(t *testing.T, config []byte) result {
	t.Helper()
	args := append([]string{"--config", s.cfg}, s.n.roots()...)
	return rdmaCDI(t, config, append(args, "hook", "precreate")...)
}

func TestHostileConfigs(t *testing.T) {
	s := newPrecreateSetup(t)
	huge := strings.Repeat("x=y\nNCCL_IB_HCA=evil\n", (1<<20)/20) // 1 MB of newlines and '='
	crafted := []specs.LinuxDevice{
		{Path: "../../etc/shadow", Type: "c", Major: 231, Minor: 192},
		{Path: "/dev/infiniband/../../etc/passwd", Type: "c", Major: 1 << 40, Minor: -1},
		{Path: strings.Repeat("/a", 1<<15), Type: "b", Major: 8, Minor: 0},
	}
	mounts := []specs.Mount{
		{Destination: "../../etc/shadow", Source: "/etc/shadow", Type: "bind", Options: []string{"rbind", "rw"}},
		{Destination: "/etc/nccl.conf", Source: "/etc/passwd", Type: "bind", Options: []string{"bind"}},
	}
	base := func(env ...string) specs.Spec {
		return specs.Spec{
			Version: specs.Version,
			Root:    &specs.Root{Path: "rootfs"},
			Process: &specs.Process{Args: []string{"sh"}, Cwd: "/", Env: append([]string{"PATH=/bin", "HUGE=" + huge}, env...)},
			Mounts:  mounts,
			Linux:   &specs.Linux{Devices: crafted},
			Annotations: map[string]string{
				"io.example/huge":     huge,
				"cdi.k8s.io/other":    "vendor.example/gpu=" + strings.Repeat("0", 1000),
				s.vendor + "/comment": "",
			},
		}
	}
	cases := []struct {
		name    string
		spec    specs.Spec
		ok      bool   // the hook succeeds
		changed bool   // and changes the config
		errText string // in the hook's stderr otherwise
	}{
		{"no request: crafted paths and 1 MB values pass through byte for byte", base(), true, false, ""},
		{"request all with crafted paths and 1 MB values", base("RDMA_VISIBLE_DEVICES=all"), true, true, ""},
		{"request as 1 MB of names with newlines and '='", base("RDMA_VISIBLE_DEVICES=" + huge), false, false, "env RDMA_VISIBLE_DEVICES"},
		{"request in a 1 MB annotation", func() specs.Spec {
			sp := base()
			sp.Annotations[s.vendor+"/devices"] = huge
			return sp
		}(), false, false, "annotation " + s.vendor + "/devices"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, err := json.Marshal(tc.spec)
			must(t, err)
			r := s.precreate(t, in)
			if !tc.ok {
				if r.code == 0 || !strings.Contains(r.stderr, tc.errText) {
					t.Fatalf("want a refusal naming %q: %.3000s", tc.errText, r)
				}
				if len(r.stderr) > 16<<10 {
					t.Errorf("hook stderr is %d bytes for one bad request", len(r.stderr))
				}
				return
			}
			if r.code != 0 {
				t.Fatal(r)
			}
			if !tc.changed {
				if r.stdout != string(in) {
					t.Fatalf("config changed (%d -> %d bytes)", len(in), len(r.stdout))
				}
				return
			}
			var out specs.Spec
			must(t, json.Unmarshal([]byte(r.stdout), &out))
			// The creator's own entries are left as they are: not resolved,
			// not followed, not "fixed", and nothing of the host added.
			for i, d := range crafted {
				if out.Linux.Devices[i].Path != d.Path || out.Linux.Devices[i].Major != d.Major {
					t.Errorf("linux.devices[%d] changed: %+v", i, out.Linux.Devices[i])
				}
			}
			for _, m := range out.Mounts {
				if m.Source == "/etc/shadow" && m.Destination != "../../etc/shadow" {
					t.Errorf("a mount of /etc/shadow was added: %+v", m)
				}
			}
			if out.Annotations["io.example/huge"] != huge || !strings.Contains(strings.Join(out.Process.Env, "\x00"), "HUGE="+huge) {
				t.Error("1 MB values not kept byte for byte")
			}
			uverbs := 0
			for _, d := range out.Linux.Devices {
				if strings.HasPrefix(d.Path, "/dev/infiniband/uverbs") {
					uverbs++
				}
			}
			if want := len(s.n.rdmaDevices()); uverbs != want {
				t.Errorf("%d uverbs nodes injected, want %d", uverbs, want)
			}
		})
	}
}

// A hook invoked with a state whose bundle or pid is not that container's
// refuses, names why, and writes nothing anywhere.
func TestHostileHookState(t *testing.T) {
	n := newNode(t, "gid-not-3")
	cfg := filepath.Join(n.dir, "config.toml")
	must(t, os.WriteFile(cfg, []byte("[hooks]\nlog_file = \"\"\n"), 0o644))
	spec := specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"sh"}, Cwd: "/"}, Linux: &specs.Linux{Devices: n.rdmaDevices()}}
	a, b := newBundle(t, spec), newBundle(t, spec)
	selfPid := os.Getpid()
	cases := []struct {
		name    string
		pid     int
		bundle  string
		errText string
	}{
		{"another container's bundle", a.pid, b.dir, fmt.Sprintf("OCI state pid %d is not container", a.pid)},
		// "is not container", or "is not provably container" where even
		// root may not read /proc/1 (as on the project's VMs): refused both ways.
		{"host PID 1", 1, a.dir, "OCI state pid 1 is not "},
		{"the caller's own pid", selfPid, a.dir, fmt.Sprintf("OCI state pid %d is not container", selfPid)},
		{"a pid that does not exist", 1 << 22, a.dir, "no such file or directory"},
		{"bundle is the host root", a.pid, "/", "config.json"},
		{"bundle relative", a.pid, "bundle", "not an absolute path"},
		{"bundle with ..", a.pid, a.dir + "/../" + filepath.Base(b.dir), fmt.Sprintf("OCI state pid %d is not container", a.pid)},
	}
	libDir := []string{"--folder", "/usr/lib/x86_64-linux-gnu"}
	hookArgs := map[string][]string{
		"nccl-conf":        nil,
		"update-ldcache":   libDir,
		"memlock":          nil,
		"create-container": append([]string{"--steps", "update-ldcache,nccl-conf"}, libDir...),
	}
	for _, hook := range []string{"nccl-conf", "update-ldcache", "memlock", "create-container"} {
		for _, tc := range cases {
			t.Run(hook+"/"+tc.name, func(t *testing.T) {
				args := append([]string{"--config", cfg}, n.roots()...)
				args = append(args, "hook", hook)
				args = append(args, hookArgs[hook]...)
				r := rdmaCDI(t, a.state(tc.pid, tc.bundle), args...)
				if r.code == 0 || !strings.Contains(r.stderr, tc.errText) {
					t.Fatalf("want a refusal with %q: %s", tc.errText, r)
				}
				for _, bb := range []*bundle{a, b} {
					entries, _ := os.ReadDir(filepath.Join(bb.rootfs, "etc"))
					if len(entries) != 0 {
						t.Errorf("%s/etc was written: %v", bb.rootfs, entries)
					}
				}
			})
		}
	}
}

// Everything generate and the hooks create on the host is root-owned, not
// world-writable, 0644 files and 0755 dirs, whatever the umask.
func TestHostileSafeModes(t *testing.T) {
	n := newNode(t, "gid-not-3")
	for _, umask := range []string{"000", "022", "077"} {
		t.Run("umask "+umask, func(t *testing.T) {
			base := t.TempDir()
			specDir := filepath.Join(base, "a", "b", "cdi")
			logFile := filepath.Join(base, "log", "sub", "hooks.log")
			cfg := filepath.Join(base, "config.toml")
			must(t, os.WriteFile(cfg, []byte(fmt.Sprintf("[hooks]\nlog_file = %q\n", logFile)), 0o644))
			args := append([]string{"-c", `umask ` + umask + ` && exec "$@"`, "sh", rdmaBin(t)}, n.roots()...)
			args = append(args, "--config", cfg, "--spec-dir", specDir, "--vendor", faultVendor, "generate")
			if r := runBin(t, nil, "/bin/sh", args...); r.code != 0 {
				t.Fatal(r)
			}
			// A precreate run creates the hook log (and its dir).
			in, _ := json.Marshal(specs.Spec{Version: specs.Version, Process: &specs.Process{Env: []string{"RDMA_VISIBLE_DEVICES=none"}}})
			pargs := append([]string{"-c", `umask ` + umask + ` && exec "$@"`, "sh", rdmaBin(t), "--config", cfg, "--spec-dir", specDir, "--vendor", faultVendor}, n.roots()...)
			if r := runBin(t, in, "/bin/sh", append(pargs, "hook", "precreate")...); r.code != 0 {
				t.Fatal(r)
			}
			check := func(p string, want fs.FileMode) {
				t.Helper()
				fi, err := os.Lstat(p)
				if err != nil {
					t.Error(err)
					return
				}
				st := fi.Sys().(*syscall.Stat_t)
				if fi.Mode().Perm() != want || st.Uid != 0 || fi.Mode().Perm()&0o002 != 0 {
					t.Errorf("%s: mode %v uid %d, want %v root", p, fi.Mode().Perm(), st.Uid, want)
				}
			}
			check(specPath(specDir), 0o644)
			for _, d := range []string{specDir, filepath.Dir(specDir), filepath.Dir(filepath.Dir(specDir))} {
				check(d, 0o755)
			}
			if fi, err := os.Stat(logFile); err == nil && fi.Mode().Perm()&0o022 != 0 {
				t.Errorf("hook log %s is %v: group/world-writable", logFile, fi.Mode().Perm())
			}
			for _, d := range []string{filepath.Dir(logFile), filepath.Dir(filepath.Dir(logFile))} {
				if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o022 != 0 {
					t.Errorf("log dir %s is %v: group/world-writable", d, fi.Mode().Perm())
				}
			}
		})
	}
}
