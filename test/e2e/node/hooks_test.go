package node

// End-to-end tests of the container hooks (update-ldcache, nccl-conf,
// memlock) in real podman 4.3 + runc 1.1.5, against the gid-not-3 fixture:
// real char device nodes (mknod), a CDI spec with the hooks written by the
// real `rdma-cdi generate`, and the host's RDMA libraries.

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
	cdi "tags.cncf.io/container-device-interface/specs-go"
)

// hookSetup is a fixture node with a CDI spec whose devices carry the hooks,
// written by the real `rdma-cdi generate` (which adds the hooks itself).
type hookSetup struct {
	dir, sys, dev, config, log string
	vendor                     string
	topo                       fixture.Topology
	node                       discover.Result
}

func newHookSetup(t *testing.T) *hookSetup {
	t.Helper()
	n := e2e.SharedFixtureNode(t, "gid-not-3")
	s := &hookSetup{dir: n.Dir, sys: n.Sys, dev: n.Dev, config: n.Config, log: n.HookLog, vendor: e2e.UniqueVendor(t), topo: n.Topo}
	var err error
	if s.node, err = discover.Discover(discover.Options{Roots: model.Roots{Sysfs: s.sys, Dev: s.dev}, SkipNet: true}); err != nil {
		t.Fatal(err)
	}
	spec := n.GenerateSpec(t, e2e.SpecOptions{Vendor: s.vendor, Path: filepath.Join(e2e.CDIDir, s.vendor+"-hca.json")})
	data := spec.Data(t)
	if !strings.Contains(data, `"createRuntime"`) || !strings.Contains(data, `"create-runtime"`) || !strings.Contains(data, `"memlock,user-space,nccl-conf"`) ||
		strings.Contains(data, `"createContainer"`) {
		t.Fatalf("generate wrote no single createRuntime hook create-runtime with the steps memlock, user-space and nccl-conf into %s:\n%s", spec.Path, data)
	}
	return s
}

func (s *hookSetup) device(name string) string { return s.vendor + "/hca=" + name }

// hookLog is what the hooks appended to their host log file.
func (s *hookSetup) hookLog() string {
	data, _ := os.ReadFile(s.log)
	return string(data)
}

func TestHooksLdcacheListsInjectedLibibverbs(t *testing.T) {
	s := newHookSetup(t)
	p := e2e.Podman(t)
	so, se, err := p.Run("--device", s.device("mlx5_1"), e2e.Glibc.Ref, "sh", "-c", "ldconfig -p; cat /etc/ld.so.conf.d/00-rdma-cdi.conf")
	if err != nil {
		t.Fatalf("%v\n%s\nhook log: %s", err, se, s.hookLog())
	}
	if !strings.Contains(so, "libibverbs.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libibverbs.so.1") {
		t.Fatalf("ldconfig -p inside does not list the injected libibverbs:\n%s", so)
	}
	if !strings.Contains(so, "# Written by rdma-cdi update-ldcache") {
		t.Errorf("no ld.so.conf.d entry:\n%s", so)
	}
	if !strings.Contains(s.hookLog(), "hook=create-runtime step=user-space user-space=host") {
		t.Errorf("hook log: %s", s.hookLog())
	}
}

// ncclConf runs the bb image and prints /etc/nccl.conf.
func (s *hookSetup) ncclConf(t *testing.T, p *e2e.PodmanEnv, args ...string) string {
	t.Helper()
	full := append(args, e2e.BB.Ref, "cat", "/etc/nccl.conf")
	so, se, err := p.Run(full...)
	if err != nil {
		t.Fatalf("%v\n%s\nhook log: %s", err, se, s.hookLog())
	}
	return so
}

func TestHooksNCCLConfHCAIsTheInjectedDevices(t *testing.T) {
	s := newHookSetup(t)
	p := e2e.Podman(t)
	one := s.ncclConf(t, p, "--device", s.device("mlx5_1"))
	if !strings.Contains(one, "\nNCCL_IB_HCA=mlx5_1:1\n") {
		t.Errorf("=mlx5_1:\n%s", one)
	}
	all := s.ncclConf(t, p, "--device", s.device("all"))
	// The container has its own (empty) network namespace: every active
	// port of every injected device, as the policy computes it.
	want := nccl.Compute(s.node.Node, config.Default().NCCL, nccl.Scope{Devices: s.node.Node.DeviceNames(), HeldAddrs: []netip.Addr{}})
	hca, _ := want.Get("NCCL_IB_HCA")
	if !strings.Contains(all, "\nNCCL_IB_HCA="+hca+"\n") {
		t.Errorf("=all: want NCCL_IB_HCA=%s:\n%s", hca, all)
	}
	for _, d := range []string{"mlx4_0:1", "mlx4_0:2", "mlx5_0:1", "mlx5_1:1"} {
		if !strings.Contains(hca, d) {
			t.Errorf("=all: %s missing from %s", d, hca)
		}
	}
}

func TestHooksNCCLConfUserEnvWins(t *testing.T) {
	s := newHookSetup(t)
	p := e2e.Podman(t)
	so, se, err := p.Run("--device", s.device("mlx5_1"), "-e", "NCCL_IB_GID_INDEX=7", e2e.BB.Ref,
		"sh", "-c", "cat /etc/nccl.conf; echo env=$NCCL_IB_GID_INDEX")
	if err != nil {
		t.Fatalf("%v\n%s", err, se)
	}
	if strings.Contains(strings.Split(so, "env=")[0], "NCCL_IB_GID_INDEX") || !strings.Contains(so, "env=7\n") {
		t.Fatalf("the file sets a key the user's env sets, or the env lost:\n%s", so)
	}
	if !strings.Contains(so, "NCCL_IB_HCA=mlx5_1:1") {
		t.Fatalf("other keys missing:\n%s", so)
	}
}

// A container started in a prepared network namespace that holds one
// fixture address gets the GID index of that address (mlx5_1's IPv4 v2 GID
// of 10.10.1.5 sits at index 5 in gid-not-3) and only the HCA behind it.
func TestHooksNCCLConfGIDIndexOfTheContainerNetNS(t *testing.T) {
	s := newHookSetup(t)
	p := e2e.Podman(t)
	h, nsPath := fixture.NewNetNS(t)
	// Only eth1 (10.10.1.5), with the default route, goes into the namespace.
	sub := s.topo
	sub.NetDevs = nil
	out := false
	for _, n := range s.topo.NetDevs {
		if n.Name == "eth1" {
			n.Addrs = []string{"10.10.1.5/24"}
			n.DefaultRoute = true
		} else {
			n.InNetNS = &out
			n.DefaultRoute = false
		}
		sub.NetDevs = append(sub.NetDevs, n)
	}
	if err := fixture.SetupNetNS(sub, h); err != nil {
		t.Fatal(err)
	}
	// Given every HCA, the container still gets only mlx5_1: the other
	// RoCE ports have no GID for its addresses, and the kernel refuses a
	// GID of another namespace.
	for _, dev := range []string{"mlx5_1", "all"} {
		conf := s.ncclConf(t, p, "--network", "ns:"+nsPath, "--device", s.device(dev))
		for _, want := range []string{"NCCL_IB_HCA=mlx5_1:1\n", "NCCL_IB_GID_INDEX=5\n", "NCCL_SOCKET_IFNAME=eth1\n"} {
			if !strings.Contains(conf, want) {
				t.Errorf("=%s: want %q in:\n%s\nhook log: %s", dev, want, conf, s.hookLog())
			}
		}
	}
	if !strings.Contains(s.hookLog(), "left out of NCCL_IB_HCA: mlx4_0:1,mlx4_0:2") {
		t.Errorf("the hook log does not name the ports left out:\n%s", s.hookLog())
	}
}

func TestHooksMemlockRaisesSoftLimit(t *testing.T) {
	s := newHookSetup(t)
	p := e2e.Podman(t)
	cmd := p.Command("run", "--rm", "--device", s.device("mlx5_1"), e2e.BB.Ref, "sh", "-c", "ulimit -l")
	// podman under a 64 KiB soft limit, within this machine's 8 MiB hard one.
	underMemlock(t, cmd, 65536, 8388608)
	so, se, err := e2e.Run(cmd)
	if err != nil {
		t.Fatalf("%v\n%s", err, se)
	}
	// unlimited is asked for; without CAP_SYS_RESOURCE the soft limit rises
	// to the 8 MiB hard limit (ulimit -l prints KiB).
	if got := strings.TrimSpace(so); got != "8192" && got != "unlimited" {
		t.Fatalf("ulimit -l = %q, want 8192 (or unlimited with CAP_SYS_RESOURCE); hook log: %s", got, s.hookLog())
	}
	// Without the hook the container keeps podman's 64 KiB.
	cmd = p.Command("run", "--rm", e2e.BB.Ref, "sh", "-c", "ulimit -l")
	underMemlock(t, cmd, 65536, 8388608)
	if so, _, err := e2e.Run(cmd); err != nil || strings.TrimSpace(so) != "64" {
		t.Errorf("without the device: ulimit -l = %q, %v; want 64", so, err)
	}
}

// underMemlock makes cmd start under prlimit(1) with these RLIMIT_MEMLOCK
// soft and hard limits (bytes), as an engine started from a shell with
// those limits would.
func underMemlock(t *testing.T, cmd *exec.Cmd, soft, hard uint64) {
	t.Helper()
	cmd.Args = append([]string{"prlimit", fmt.Sprintf("--memlock=%d:%d", soft, hard)}, cmd.Args...)
	cmd.Path = e2e.RequireBinary(t, "prlimit")
}

// hostileImage imports the bb image with edit applied to its rootfs.
func hostileImage(t *testing.T, p *e2e.PodmanEnv, edit func(root string)) string {
	t.Helper()
	dir, err := e2e.ScratchDir(t, "img")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	if out, err := exec.Command("tar", "-C", hookMkdir(t, root), "-xf", e2e.BB.RootfsTar(t)).CombinedOutput(); err != nil {
		t.Fatalf("untar: %v: %s", err, out)
	}
	edit(root)
	tarPath := filepath.Join(dir, "img.tar")
	if err := hookTarDir(root, tarPath); err != nil {
		t.Fatal(err)
	}
	ref := "localhost/" + e2e.UniqueID("rdma-cdi-hostile-") + ":latest"
	if _, se, err := p.Podman("import", "--quiet", tarPath, ref); err != nil {
		t.Fatalf("import: %v %s", err, se)
	}
	t.Cleanup(func() { _, _, _ = p.Podman("rmi", "--force", ref) })
	return ref
}

func hookMkdir(t *testing.T, d string) string {
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// hookTarDir writes dir as a tar, symlinks kept as symlinks.
func hookTarDir(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr.Name = rel
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, src)
			src.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// hookCanary is a host directory that hostile images point at: a file, a
// symlink, and a real library under a name other than its soname (ldconfig
// reaching the dir would add a soname link beside it).
func hookCanary(t *testing.T) (dir, file string, snapshot func() string) {
	d, err := e2e.ScratchDir(t, "canary")
	if err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(d, "secret")
	hookMust(t, os.WriteFile(file, []byte("host data\n"), 0o600))
	hookMust(t, os.Symlink("secret", filepath.Join(d, "link")))
	lib, err := os.ReadFile("/usr/lib/x86_64-linux-gnu/libibverbs.so.1")
	hookMust(t, err)
	hookMust(t, os.WriteFile(filepath.Join(d, "libcanary-1.2.3.so"), lib, 0o644))
	return d, file, func() string {
		var lines []string
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, _ := os.Lstat(p)
			line := fmt.Sprintf("%s %v %v", p, fi.Mode(), fi.ModTime().UnixNano())
			if fi.Mode().IsRegular() {
				b, _ := os.ReadFile(p)
				line += fmt.Sprintf(" %x", sha256.Sum256(b))
			}
			if target, err := os.Readlink(p); err == nil {
				line += " -> " + target
			}
			lines = append(lines, line)
			return nil
		})
		sort.Strings(lines)
		return strings.Join(lines, "\n")
	}
}

func TestHooksHostileImagesLeaveTheHostAlone(t *testing.T) {
	s := newHookSetup(t)
	p := e2e.Podman(t)
	cases := []struct {
		name     string
		edit     func(root, dir, file string)
		startsOK bool
		errText  string // in podman's stderr when it fails
	}{
		{"nccl.conf links to a host file", func(root, dir, file string) {
			hookMust(t, os.Symlink(file, filepath.Join(root, "etc/nccl.conf")))
		}, false, "/etc/nccl.conf in container root is a symlink"},
		{"ld.so.cache links to a host file", func(root, dir, file string) {
			hookMust(t, os.Symlink(file, filepath.Join(root, "etc/ld.so.cache")))
		}, true, ""},
		{"ld.so.conf.d links to a host dir", func(root, dir, file string) {
			hookMust(t, os.Symlink(dir, filepath.Join(root, "etc/ld.so.conf.d")))
		}, false, "ld.so.conf.d"},
		{"/etc links to a host dir", func(root, dir, file string) {
			hookMust(t, os.RemoveAll(filepath.Join(root, "etc")))
			hookMust(t, os.Symlink(dir, filepath.Join(root, "etc")))
		}, false, "/etc"},
		// Before pivot_root the container's /proc/1 is runc's init, whose root
		// is the host's "/".
		{"ld.so.conf.d lists a host dir through /proc/1/root", func(root, dir, file string) {
			writeImageFile(t, root, "etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")
			writeImageFile(t, root, "etc/ld.so.conf.d/evil.conf", "/proc/1/root"+dir+"\n")
		}, true, ""},
		{"a library dir links into /proc/1/root", func(root, dir, file string) {
			writeImageFile(t, root, "etc/ld.so.conf", "/opt/lib\n")
			hookMkdir(t, filepath.Join(root, "opt"))
			hookMust(t, os.Symlink("/proc/1/root"+dir, filepath.Join(root, "opt/lib")))
		}, true, ""},
		{"a library's soname climbs into /proc/1/root", func(root, dir, file string) {
			writeImageFile(t, root, "etc/ld.so.conf", "/opt/lib\n")
			soname := strings.Repeat("../", 8) + "proc/1/root" + dir + "/link"
			writeImageFile(t, root, "opt/lib/libevil.so.1.0", string(fixture.SharedObject(t, soname)))
		}, true, ""},
		{"ld.so.conf includes itself", func(root, dir, file string) {
			writeImageFile(t, root, "etc/ld.so.conf", "include /etc/ld.so.conf\ninclude ld.so.conf\n")
		}, false, "/etc/ld.so.conf includes itself: an include loop"},
		{"ld.so.conf includes /dev/zero", func(root, dir, file string) {
			writeImageFile(t, root, "etc/ld.so.conf", "include /dev/zero\n")
		}, true, ""},
		{"ld.so.conf is a FIFO", func(root, dir, file string) {
			hookMust(t, syscall.Mkfifo(filepath.Join(root, "etc/ld.so.conf"), 0o644))
		}, false, "/etc/ld.so.conf is a FIFO"},
		// /d/0../d/49 all lead back to /d: 50^6 names to expand. The walk's
		// bound refuses it at once, naming the file; unbounded, it grew in
		// the runtime's cgroup until the 10 s timeout ("killed after").
		{"ld.so.conf includes a glob bomb", func(root, dir, file string) {
			writeImageFile(t, root, "etc/ld.so.conf", "include /d/*/*/*/*/*/*\n")
			for i := range 50 {
				hookMust(t, os.Symlink("/d", filepath.Join(hookMkdir(t, filepath.Join(root, "d")), fmt.Sprint(i))))
			}
		}, false, "linker config /etc/ld.so.conf: include"},
		// The lent libraries' paths, where the image has no stack (bb): a link
		// resolves in-root, where these lead nowhere, and the start is
		// refused naming the path; nothing lands on the host.
		{"the library dir links to a host dir", func(root, dir, file string) {
			hookMkdir(t, filepath.Join(root, "usr/lib"))
			hookMust(t, os.Symlink(dir, filepath.Join(root, "usr/lib/x86_64-linux-gnu")))
		}, false, "create directory /usr/lib/x86_64-linux-gnu/"},
		{"the library dir links into /proc/1/root", func(root, dir, file string) {
			hookMkdir(t, filepath.Join(root, "usr/lib"))
			hookMust(t, os.Symlink("/proc/1/root"+dir, filepath.Join(root, "usr/lib/x86_64-linux-gnu")))
		}, false, "/usr/lib/x86_64-linux-gnu"},
		{"the provider dir climbs out with ..", func(root, dir, file string) {
			hookMkdir(t, filepath.Join(root, "usr/lib/x86_64-linux-gnu"))
			hookMust(t, os.Symlink(strings.Repeat("../", 12)+dir[1:], filepath.Join(root, "usr/lib/x86_64-linux-gnu/libibverbs")))
		}, false, "create directory /usr/lib/x86_64-linux-gnu/libibverbs/"},
		{"libibverbs.so.1 is a FIFO and a link to a host file", func(root, dir, file string) {
			hookMkdir(t, filepath.Join(root, "usr/lib/x86_64-linux-gnu"))
			hookMust(t, syscall.Mkfifo(filepath.Join(root, "usr/lib/x86_64-linux-gnu/libibverbs.so.1"), 0o644))
			hookMust(t, os.Symlink(file, filepath.Join(root, "usr/lib/x86_64-linux-gnu/libmlx5.so.1")))
		}, true, ""},
		{"/etc/libibverbs.d links to a host dir", func(root, dir, file string) {
			hookMust(t, os.Symlink(dir, filepath.Join(root, "etc/libibverbs.d")))
		}, false, "create directory /etc/libibverbs.d/"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, file, snap := hookCanary(t)
			ref := hostileImage(t, p, func(root string) { tc.edit(root, dir, file) })
			before := snap()
			so, se, err := p.Run("--device", s.device("mlx5_1"), ref, "sh", "-c", "echo started")
			if after := snap(); after != before {
				t.Fatalf("host canary changed:\n%s\n-> \n%s", before, after)
			}
			if tc.startsOK {
				if err != nil || strings.TrimSpace(so) != "started" {
					t.Fatalf("want a start: %v\n%s", err, se)
				}
				return
			}
			if err == nil {
				t.Fatalf("started (%q), want a clear refusal", so)
			}
			if !strings.Contains(se+err.Error(), tc.errText) {
				t.Fatalf("podman's error does not say why (want %q):\n%v", tc.errText, err)
			}
		})
	}
}

func writeImageFile(t *testing.T, root, name, data string) {
	t.Helper()
	hookMkdir(t, filepath.Dir(filepath.Join(root, name)))
	hookMust(t, os.WriteFile(filepath.Join(root, name), []byte(data), 0o644))
}

func hookMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A spec written before the hooks were merged (create-container with its
// two steps at createContainer, memlock at createRuntime, naming the full
// rdma-cdi binary) still gives a container all three: specs outlive
// binaries.
func TestHooksOlderSpecLayoutStillWorks(t *testing.T) {
	s := newHookSetup(t)
	data, err := os.ReadFile(filepath.Join(e2e.CDIDir, s.vendor+"-hca.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdi.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	merged := spec.ContainerEdits.Hooks[0]
	steps := slices.Index(merged.Args, "--steps")
	if len(spec.ContainerEdits.Hooks) != 1 || steps < 0 {
		t.Fatalf("want one hook with --steps, got %+v", spec.ContainerEdits.Hooks)
	}
	// The older layout mounted the libraries itself (the engine did): the
	// files the hook lends now, and no --lend or --provider flags.
	var global []string
	for i := 3; i < steps; i++ {
		switch arg := merged.Args[i]; arg {
		case "--lend":
			ctr, host, _ := strings.Cut(merged.Args[i+1], "=")
			spec.ContainerEdits.Mounts = append(spec.ContainerEdits.Mounts,
				&cdi.Mount{HostPath: host, ContainerPath: ctr, Options: []string{"ro", "nosuid", "nodev", "bind"}})
			i++
		case "--provider":
			i++
		default:
			global = append(global, arg)
		}
	}
	if len(spec.ContainerEdits.Mounts) == 0 {
		t.Fatalf("the generated spec's hook lends nothing: %v", merged.Args)
	}
	old := func(stage, name string, extra ...string) *cdi.Hook {
		args := slices.Concat([]string{"rdma-cdi", "hook", name}, global, extra)
		if name == "memlock" {
			args = slices.DeleteFunc(args, func(a string) bool { return a == "--folder" || strings.HasPrefix(a, "/usr/lib") })
		}
		return &cdi.Hook{HookName: stage, Path: e2e.Binary(t, "rdma-cdi"), Args: args, Env: merged.Env}
	}
	spec.ContainerEdits.Hooks = []*cdi.Hook{
		old("createContainer", "create-container", "--steps", "update-ldcache,nccl-conf"),
		old("createRuntime", "memlock"),
	}
	vendor := e2e.UniqueVendor(t)
	spec.Kind = vendor + "/hca"
	if data, err = json.Marshal(spec); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e2e.CDIDir, vendor+"-hca.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })

	p := e2e.Podman(t)
	cmd := p.Command("run", "--rm", "--device", vendor+"/hca=mlx5_1", e2e.Glibc.Ref, "sh", "-c",
		"cat /etc/nccl.conf; echo memlock=$(ulimit -l); ldconfig -p | grep libibverbs.so.1")
	underMemlock(t, cmd, 65536, 8388608)
	so, se, err := e2e.Run(cmd)
	if err != nil {
		t.Fatalf("%v\n%s\nhook log: %s", err, se, s.hookLog())
	}
	for _, want := range []string{"NCCL_IB_HCA=mlx5_1:1\n", "libibverbs.so.1 (libc6,x86-64) => /usr"} {
		if !strings.Contains(so, want) {
			t.Errorf("the older spec's hooks did not give %q:\n%s\nhook log: %s", want, so, s.hookLog())
		}
	}
	if !strings.Contains(so, "memlock=8192\n") && !strings.Contains(so, "memlock=unlimited\n") {
		t.Errorf("the older spec's memlock hook did not raise the limit:\n%s", so)
	}
	for _, line := range []string{"hook=create-container step=update-ldcache", "hook=create-container step=nccl-conf", "hook=memlock"} {
		if !strings.Contains(s.hookLog(), line) {
			t.Errorf("no %q in the hook log:\n%s", line, s.hookLog())
		}
	}
}
