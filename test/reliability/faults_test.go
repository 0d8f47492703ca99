package reliability

// Faults: broken sysfs attributes, device nodes, host libraries and spec
// dirs; concurrent writers; a hook killed mid-write. Each case asserts the
// outcome: a clear error that names the thing (or a warning where the
// container can still be served), the previous spec intact, and nothing
// half-written.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

const faultVendor = "fault.rdma-cdi.test"

// specPath is where generate writes for faultVendor.
func specPath(dir string) string { return filepath.Join(dir, faultVendor+"-hca.yaml") }

// A good spec first, then a fault in one HCA's sysfs: generate warns,
// naming the file, and writes a valid spec of every other HCA (one odd
// device loses the node nothing else); the spec never holds a device read
// half. A fault in every HCA leaves nothing to serve: generate then fails
// and the spec written before is byte for byte what it was.
func TestFaultSysfsAttributes(t *testing.T) {
	cases := []struct {
		name  string
		file  string // relative to the sysfs root, through class/ links
		apply func(path string) error
	}{
		{"state malformed", "class/infiniband/mlx5_1/ports/1/state", func(p string) error { return os.WriteFile(p, []byte("ACTIVE\n"), 0o644) }},
		{"link_layer unknown", "class/infiniband/mlx5_1/ports/1/link_layer", func(p string) error { return os.WriteFile(p, []byte("Token Ring\n"), 0o644) }},
		{"GID malformed", "class/infiniband/mlx5_1/ports/1/gids/0", func(p string) error { return os.WriteFile(p, []byte("fe80::1\n"), 0o644) }},
		{"GID type unknown", "class/infiniband/mlx5_1/ports/1/gid_attrs/types/0", func(p string) error { return os.WriteFile(p, []byte("RoCE v9\n"), 0o644) }},
		{"uverbs dev malformed", "class/infiniband_verbs/uverbs1/dev", func(p string) error { return os.WriteFile(p, []byte("231-193\n"), 0o644) }},
		{"attribute over a page", "class/infiniband/mlx5_1/ports/1/phys_state", func(p string) error { return os.WriteFile(p, bytes.Repeat([]byte("x"), 5000), 0o644) }},
		{"attribute unreadable (a directory)", "class/infiniband/mlx5_1/ports/1/state", func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Mkdir(p, 0o755)
		}},
		{"numa_node malformed", "class/infiniband/mlx5_1/device/numa_node", func(p string) error { return os.WriteFile(p, []byte("one\n"), 0o644) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "gid-not-3")
			specDir := filepath.Join(n.dir, "cdi")
			if r := n.generate(t, specDir, faultVendor); r.code != 0 {
				t.Fatalf("first generate: %s", r)
			}
			devicesBefore := specDevices(t, specDir)
			must(t, tc.apply(filepath.Join(n.sys, tc.file)))
			r := n.generate(t, specDir, faultVendor)
			if r.code != 0 {
				t.Fatalf("generate failed over one broken %s: %s", tc.file, r)
			}
			// The warning names the attribute (as the class link or the
			// device path it resolves to) and says the device is left out.
			if base := filepath.Base(tc.file); !strings.Contains(r.stderr, filepath.Dir(filepath.Join(n.sys, tc.file))+"/"+base) &&
				!strings.Contains(r.stderr, "/"+base) || !strings.Contains(r.stderr, "left out") {
				t.Errorf("the warning does not name %s and the device left out: %s", tc.file, r.stderr)
			}
			// Exactly one HCA fewer, the others as before.
			after := specDevices(t, specDir)
			var gone []string
			for _, d := range devicesBefore {
				if !slices.Contains(after, d) {
					gone = append(gone, d)
				}
			}
			if len(gone) != 1 || len(after) != len(devicesBefore)-1 {
				t.Errorf("the spec went from %v to %v: want exactly the broken HCA left out", devicesBefore, after)
			}
		})
	}
	t.Run("every HCA broken", func(t *testing.T) {
		n := newNode(t, "gid-not-3")
		specDir := filepath.Join(n.dir, "cdi")
		if r := n.generate(t, specDir, faultVendor); r.code != 0 {
			t.Fatalf("first generate: %s", r)
		}
		before, err := os.ReadFile(specPath(specDir))
		must(t, err)
		states, err := filepath.Glob(filepath.Join(n.sys, "class/infiniband/*/ports/*/state"))
		must(t, err)
		for _, p := range states {
			must(t, os.WriteFile(p, []byte("ACTIVE\n"), 0o644))
		}
		r := n.generate(t, specDir, faultVendor)
		if r.code == 0 {
			t.Fatalf("generate succeeded with every HCA broken: %s", r)
		}
		if !strings.Contains(r.stderr, "/state") {
			t.Errorf("the error does not name a broken state file: %s", r.stderr)
		}
		after, err := os.ReadFile(specPath(specDir))
		must(t, err)
		if !bytes.Equal(before, after) {
			t.Errorf("previous spec changed")
		}
	})
}

// specDevices are the device names of the spec generate wrote for
// faultVendor, which the CDI library must accept.
func specDevices(t *testing.T, specDir string) []string {
	t.Helper()
	spec, err := cdi.ReadSpec(specPath(specDir), 0)
	if err != nil {
		t.Fatalf("the CDI library rejects %s: %v", specPath(specDir), err)
	}
	var names []string
	for _, d := range spec.Devices {
		names = append(names, d.Name)
	}
	return names
}

// A device that vanishes while discovery reads it (hot unplug, driver
// reload) is either read whole or skipped with a warning: never an error,
// never a device with half its ports or nodes.
func TestFaultSysfsDeviceVanishesMidScan(t *testing.T) {
	n := newNode(t, "gid-not-3")
	want := map[string]int{} // device -> ports
	for _, d := range n.res.Node.Devices {
		want[d.Name] = len(d.Ports)
	}
	victim := "mlx5_1"
	target, err := filepath.EvalSymlinks(filepath.Join(n.sys, "class/infiniband", victim))
	must(t, err)
	verbsLink := filepath.Join(n.sys, "class/infiniband_verbs/uverbs2")
	verbsTarget, err := os.Readlink(verbsLink)
	must(t, err)

	// A replugged device is a new sysfs directory (new inodes), as the
	// kernel makes it: rotate among copies of the device dir.
	const copies = 8
	for i := 1; i < copies; i++ { // slot 0 is free
		out, err := exec.Command("cp", "-a", target, fmt.Sprintf("%s.copy%d", target, i)).CombinedOutput()
		if err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
	}
	var stop atomic.Bool
	var flips atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; !stop.Load(); i++ {
			// Unplug: the device dir and its uverbs class entry go, then a
			// new one comes.
			if err := os.Rename(target, fmt.Sprintf("%s.copy%d", target, i%copies)); err != nil {
				panic(err)
			}
			_ = os.Remove(verbsLink)
			time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
			if err := os.Rename(fmt.Sprintf("%s.copy%d", target, (i+1)%copies), target); err != nil {
				panic(err)
			}
			_ = os.Symlink(verbsTarget, verbsLink)
			time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
			flips.Add(1)
		}
	}()
	runs, skipped, whole := 0, 0, 0
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		res, err := discover.Discover(discover.Options{Roots: model.Roots{Sysfs: n.sys, Dev: n.dev}, SkipNet: true})
		runs++
		if err != nil {
			stop.Store(true)
			<-done
			t.Fatalf("run %d: discovery failed while %s was unplugged and replugged: %v", runs, victim, err)
		}
		found := false
		for _, d := range res.Node.Devices {
			if want[d.Name] != len(d.Ports) {
				t.Fatalf("run %d: %s has %d ports, want %d", runs, d.Name, len(d.Ports), want[d.Name])
			}
			found = found || d.Name == victim
		}
		if found {
			whole++
		} else {
			skipped++
			if !strings.Contains(strings.Join(res.Warnings, "\n"), victim) {
				t.Fatalf("run %d: %s skipped without a warning: %v", runs, victim, res.Warnings)
			}
		}
	}
	stop.Store(true)
	<-done
	t.Logf("RESULT vanish: %d discoveries during %d unplug/replug cycles: %d read whole, %d skipped with a warning, 0 errors", runs, flips.Load(), whole, skipped)
	if skipped == 0 || whole == 0 {
		t.Logf("note: the race did not hit both outcomes (whole %d, skipped %d)", whole, skipped)
	}
}

// Device nodes missing or with other numbers than sysfs: the spec is still
// written (the kernel's numbers), and a warning names the nodes.
func TestFaultDevNodes(t *testing.T) {
	cases := []struct {
		name  string
		apply func(dev string) error
		warn  string
	}{
		{"uverbs1 missing", func(dev string) error { return os.Remove(filepath.Join(dev, "infiniband/uverbs1")) }, "are missing: uverbs1"},
		{"all nodes missing", func(dev string) error { return os.RemoveAll(filepath.Join(dev, "infiniband")) }, "are missing: issm0 issm1 umad1 umad0 uverbs0"},
		{"uverbs1 wrong numbers", func(dev string) error {
			p := filepath.Join(dev, "infiniband/uverbs1")
			if err := os.Remove(p); err != nil {
				return err
			}
			return unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(231, 250)))
		}, "uverbs1 is 231:250 but sysfs says 231:193"},
		{"uverbs1 a regular file", func(dev string) error {
			p := filepath.Join(dev, "infiniband/uverbs1")
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.WriteFile(p, nil, 0o666)
		}, "are not character devices: uverbs1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "gid-not-3")
			must(t, tc.apply(n.dev))
			specDir := filepath.Join(n.dir, "cdi")
			r := n.generate(t, specDir, faultVendor)
			if r.code != 0 {
				t.Fatalf("generate failed: %s", r)
			}
			if !strings.Contains(r.stderr, "level=warning") || !strings.Contains(r.stderr, tc.warn) {
				t.Errorf("want a warning %q: %s", tc.warn, r.stderr)
			}
			if _, err := cdi.ReadSpec(specPath(specDir), 0); err != nil {
				t.Errorf("spec not valid: %v", err)
			}
		})
	}
}

// copyHostStack copies the host's rdma-core files (libibverbs, librdmacm,
// providers, their symlinks, ld.so.cache and the libraries they need) into
// a fake host root, so they can be broken without touching the host.
func copyHostStack(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	lib := "/usr/lib/x86_64-linux-gnu"
	if _, err := os.Stat(lib + "/libibverbs.so.1"); err != nil {
		e2e.Missing(t, "host rdma-core missing (run `make deps`)")
	}
	must(t, os.MkdirAll(root+lib, 0o755))
	must(t, os.MkdirAll(root+"/etc", 0o755))
	script := `set -e
lib=$1 root=$2
cp -a $lib/libibverbs* $lib/librdmacm* $lib/libnl-3* $lib/libnl-route-3* $root$lib/
for p in $lib/libibverbs/*; do t=$(readlink -f "$p"); [ -e "$t" ] && cp -a "$t" $root$lib/; done
cp -a /etc/ld.so.cache $root/etc/
[ -d /etc/libibverbs.d ] && cp -a /etc/libibverbs.d $root/etc/
ln -s usr/lib $root/lib
ln -s usr/lib64 $root/lib64
`
	out, err := exec.Command("sh", "-c", script, "sh", lib, root).CombinedOutput()
	if err != nil {
		t.Fatalf("copy host stack: %v %s", err, out)
	}
	return root
}

// A broken user-space stack costs the lent libraries, never the spec:
// devices are still given, and a warning says why there are no libraries.
func TestFaultHostLibraries(t *testing.T) {
	lib := "/usr/lib/x86_64-linux-gnu"
	cases := []struct {
		name  string
		apply func(root string) error
		warn  string
	}{
		{"libibverbs missing", func(root string) error {
			m, _ := filepath.Glob(root + lib + "/libibverbs.so*")
			for _, p := range m {
				if err := os.Remove(p); err != nil {
					return err
				}
			}
			return nil
		}, "RDMA libraries not lent to containers"},
		{"provider symlink dangling", func(root string) error {
			return os.Symlink("../libgone.so.1", root+lib+"/libibverbs/libgone-rdmav34.so")
		}, "dangling symlink"},
		{"provider of another build", func(root string) error {
			return os.WriteFile(root+lib+"/libibverbs/libold-rdmav25.so", []byte("\x7fELF old provider"), 0o644)
		}, "has ABI rdmav25"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "gid-not-3")
			root := copyHostStack(t)
			specDir := filepath.Join(n.dir, "cdi")
			// The intact copy gives libraries to lend.
			r := n.generate(t, specDir, faultVendor, "--host-root", root, "--hook-binary", "/usr/bin/rdma-cdi")
			if r.code != 0 {
				t.Fatalf("generate: %s", r)
			}
			good, err := cdi.ReadSpec(specPath(specDir), 0)
			must(t, err)
			if len(e2e.LentFiles(good.Spec)) == 0 {
				t.Fatalf("intact stack: nothing to lend:\n%s", r.stderr)
			}
			must(t, tc.apply(root))
			r = n.generate(t, specDir, faultVendor, "--host-root", root, "--hook-binary", "/usr/bin/rdma-cdi")
			if r.code != 0 {
				t.Fatalf("generate failed over a broken stack: %s", r)
			}
			if !strings.Contains(r.stderr, "level=warning") || !strings.Contains(r.stderr, tc.warn) {
				t.Errorf("want a warning %q: %s", tc.warn, r.stderr)
			}
			spec, err := cdi.ReadSpec(specPath(specDir), 0)
			must(t, err)
			if lent := e2e.LentFiles(spec.Spec); len(spec.ContainerEdits.Mounts) != 0 || len(lent) != 0 {
				t.Errorf("broken stack still lent: %v, mounts %v", lent, spec.ContainerEdits.Mounts)
			}
			for _, h := range spec.ContainerEdits.Hooks {
				if strings.Contains(strings.Join(h.Args, " "), "--folder") {
					t.Errorf("linker cache folders kept without libraries: %v", h.Args)
				}
			}
			if len(spec.Devices) != len(good.Devices) {
				t.Errorf("devices %d, want %d", len(spec.Devices), len(good.Devices))
			}
		})
	}
}

// mountTmpfs mounts a tmpfs of size at dir for the test.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0755"); err != nil {
		e2e.Missing(t, "mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

// The spec dir broken under generate: read-only, full, or replaced by a
// symlink. The error names the spec file and why; the previous spec stays.
func TestFaultSpecDir(t *testing.T) {
	a := newNode(t, "gid-not-3")
	b := newNode(t, "seed002")
	t.Run("read-only", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "cdi")
		mountTmpfs(t, dir, "1m")
		if r := a.generate(t, dir, faultVendor); r.code != 0 {
			t.Fatal(r)
		}
		before, _ := os.ReadFile(specPath(dir))
		must(t, unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""))
		r := b.generate(t, dir, faultVendor)
		if r.code == 0 || !strings.Contains(r.stderr, specPath(dir)) || !strings.Contains(r.stderr, "read-only file system") {
			t.Fatalf("want an error naming %s and EROFS: %s", specPath(dir), r)
		}
		after, _ := os.ReadFile(specPath(dir))
		if !bytes.Equal(before, after) {
			t.Error("previous spec changed")
		}
	})
	t.Run("full", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "cdi")
		mountTmpfs(t, dir, "64k")
		if r := a.generate(t, dir, faultVendor); r.code != 0 {
			t.Fatal(r)
		}
		before, _ := os.ReadFile(specPath(dir))
		// Fill what is left.
		f, err := os.Create(filepath.Join(dir, "filler"))
		must(t, err)
		_, _ = f.Write(make([]byte, 1<<20))
		f.Close()
		r := b.generate(t, dir, faultVendor)
		if r.code == 0 || !strings.Contains(r.stderr, specPath(dir)) || !strings.Contains(r.stderr, "no space left on device") {
			t.Fatalf("want an error naming %s and ENOSPC: %s", specPath(dir), r)
		}
		after, _ := os.ReadFile(specPath(dir))
		if !bytes.Equal(before, after) {
			t.Error("previous spec changed")
		}
		if tmp := tempFiles(t, dir); len(tmp) != 0 {
			t.Errorf("temp files left: %v", tmp)
		}
	})
	t.Run("symlink to a directory is followed", func(t *testing.T) {
		base := t.TempDir()
		real, link := filepath.Join(base, "real"), filepath.Join(base, "cdi")
		must(t, os.Mkdir(real, 0o755))
		must(t, os.Symlink(real, link))
		if r := a.generate(t, link, faultVendor); r.code != 0 {
			t.Fatal(r)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("the link was replaced: %v %v", fi.Mode(), err)
		}
		if _, err := cdi.ReadSpec(specPath(real), 0); err != nil {
			t.Errorf("spec not in the link's target: %v", err)
		}
	})
	for _, tc := range []struct{ name, target, why string }{
		{"symlink dangling", "/nonexistent-rdma-cdi-dir", "file exists"},
		{"symlink to a file", "/etc/hostname", "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			link := filepath.Join(t.TempDir(), "cdi")
			must(t, os.Symlink(tc.target, link))
			r := a.generate(t, link, faultVendor)
			if r.code == 0 || !strings.Contains(r.stderr, specPath(link)) || !strings.Contains(r.stderr, tc.why) {
				t.Fatalf("want an error naming %s (%s): %s", specPath(link), tc.why, r)
			}
			if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("the link was replaced")
			}
		})
	}
}

// Two generate writers at once, 200 times each, alternating two nodes into
// one spec file, while a reader parses it with the CDI library: every read
// is one complete, valid version.
func TestFaultConcurrentGenerate(t *testing.T) {
	a := newNode(t, "gid-not-3")
	b := newNode(t, "seed002")
	dir := filepath.Join(t.TempDir(), "cdi")
	versions := map[string]string{}
	for name, n := range map[string]*node{"a": a, "b": b} {
		r := n.generate(t, dir, faultVendor)
		if r.code != 0 {
			t.Fatal(r)
		}
		data, err := os.ReadFile(specPath(dir))
		must(t, err)
		versions[string(data)] = name
	}
	if len(versions) != 2 {
		t.Fatal("the two nodes give the same spec")
	}
	iterations := 200
	var wg sync.WaitGroup
	var failures atomic.Int64
	var firstFail atomic.Value
	for _, n := range []*node{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < iterations; i++ {
				if r := n.generate(t, dir, faultVendor); r.code != 0 {
					failures.Add(1)
					firstFail.CompareAndSwap(nil, r.String())
				}
			}
		}()
	}
	stop := make(chan struct{})
	var reads, parsed atomic.Int64
	readerDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				readerDone <- nil
				return
			default:
			}
			data, err := os.ReadFile(specPath(dir))
			if err != nil {
				readerDone <- err
				return
			}
			reads.Add(1)
			if _, ok := versions[string(data)]; !ok {
				readerDone <- errBadRead(data)
				return
			}
			if reads.Load()%10 == 0 {
				if _, err := cdi.ReadSpec(specPath(dir), 0); err != nil {
					readerDone <- err
					return
				}
				parsed.Add(1)
			}
		}
	}()
	wg.Wait()
	close(stop)
	if err := <-readerDone; err != nil {
		t.Fatalf("reader saw a bad spec: %v", err)
	}
	if failures.Load() > 0 {
		t.Fatalf("%d generate runs failed; first: %v", failures.Load(), firstFail.Load())
	}
	if tmp := tempFiles(t, dir); len(tmp) != 0 {
		t.Errorf("temp files left: %v", tmp)
	}
	t.Logf("RESULT concurrent generate: 2x%d writers, %d reads all complete (one of 2 versions), %d parsed by cdi.ReadSpec", iterations, reads.Load(), parsed.Load())
}

type errBadRead []byte

func (e errBadRead) Error() string {
	return fmt.Sprintf("read %d bytes that are neither complete version", len(e))
}

// SIGKILL the nccl-conf hook at random points of its run: the container's
// /etc/nccl.conf is always the image's file or the complete merged one,
// never a part (temp file, then rename).
func TestFaultHookKilledMidWrite(t *testing.T) {
	n := newNode(t, "gid-not-3")
	cfg := filepath.Join(n.dir, "config.toml")
	must(t, os.WriteFile(cfg, []byte("[hooks]\nlog_file = \"\"\n"), 0o644))
	b := newBundle(t, specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"sh"}, Cwd: "/"}, Linux: &specs.Linux{Devices: n.rdmaDevices()}})
	// A large image nccl.conf makes the write long enough to be hit.
	var image bytes.Buffer
	image.WriteString("NCCL_DEBUG=WARN\n")
	for image.Len() < 900<<10 {
		image.WriteString("# padding line of an image's nccl.conf, long enough to make the write take a while\n")
	}
	confPath := filepath.Join(b.rootfs, "etc/nccl.conf")
	must(t, os.WriteFile(confPath, image.Bytes(), 0o644))
	args := append([]string{"--config", cfg}, n.roots()...)
	args = append(args, "hook", "nccl-conf")
	state := b.state(b.pid, b.dir)

	// The complete result, from an undisturbed run.
	r := rdmaCDI(t, state, args...)
	if r.code != 0 {
		t.Fatal(r)
	}
	complete, err := os.ReadFile(confPath)
	must(t, err)
	if !bytes.Contains(complete, []byte("\nNCCL_IB_HCA=")) || !bytes.HasPrefix(complete, image.Bytes()) {
		t.Fatalf("merged file unexpected: %.300q", complete[len(image.Bytes())-10:])
	}
	full := r.wall

	bin := e2e.Binary(t, "rdma-cdi")
	kills, midWrite, completed := 0, 0, 0
	iterations := 150
	for i := 0; i < iterations; i++ {
		must(t, os.WriteFile(confPath, image.Bytes(), 0o644))
		for _, tmp := range tempFiles(t, filepath.Join(b.rootfs, "etc")) {
			os.Remove(filepath.Join(b.rootfs, "etc", tmp))
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		cmd.Stdin = bytes.NewReader(state)
		must(t, cmd.Start())
		if i%2 == 0 {
			// The write comes last: aim at the second half of the run.
			time.Sleep(time.Duration(int64(full)/2 + rand.Int64N(int64(full)*3/4)))
		} else {
			// Kill the moment the temp file shows up: mid-write.
			etc := filepath.Join(b.rootfs, "etc")
			for deadline := time.Now().Add(2 * full); time.Now().Before(deadline); {
				if len(tempFiles(t, etc)) > 0 {
					break
				}
			}
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		got, rerr := os.ReadFile(confPath)
		must(t, rerr)
		switch {
		case bytes.Equal(got, image.Bytes()):
		case bytes.Equal(got, complete):
		default:
			t.Fatalf("kill %d left a partial /etc/nccl.conf (%d bytes; image %d, complete %d)", i, len(got), image.Len(), len(complete))
		}
		if err != nil {
			kills++
			if len(tempFiles(t, filepath.Join(b.rootfs, "etc"))) > 0 {
				midWrite++
			}
		} else {
			completed++
		}
	}
	t.Logf("RESULT hook kill: %d runs (undisturbed run %v): %d killed, %d of them between temp file and rename, %d finished first; /etc/nccl.conf always whole", iterations, full, kills, midWrite, completed)
	if kills == 0 {
		t.Error("no run was killed: the test does not test anything")
	}

	// The container started again, its hook undisturbed: the temp files
	// the killed runs left (aged past staleTempAge) are gone.
	etc := filepath.Join(b.rootfs, "etc")
	must(t, os.WriteFile(confPath, image.Bytes(), 0o644)) // as the killed run left it
	must(t, os.WriteFile(filepath.Join(etc, ".rdma-cdi-nccl.conf.killedrun00"), []byte("partial"), 0o600))
	old := time.Now().Add(-time.Hour)
	for _, tmp := range tempFiles(t, etc) {
		must(t, os.Chtimes(filepath.Join(etc, tmp), old, old))
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdin = bytes.NewReader(state)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("restart hook: %v\n%s", err, out)
	}
	if left := tempFiles(t, etc); len(left) > 0 {
		t.Errorf("temp files of killed runs left after a clean run: %v", left)
	}
}
