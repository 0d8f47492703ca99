package userspace_test

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/hooks"
	"github.com/rdma-cdi/rdma-cdi/pkg/hostlibs/ldcache"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/userspace"
)

// fakeLib is enough of a libibverbs for Probe: an ELF header of this
// machine's class and architecture, and the private ABI's version node name.
func fakeLib(pabi string) string {
	return elfHeader(elf.ELFCLASS64, nativeMachine()) + "IBVERBS_PRIVATE_" + pabi + "\x00"
}

func elfHeader(class elf.Class, machine elf.Machine) string {
	h := make([]byte, 64)
	copy(h, elf.ELFMAG)
	h[4], h[5], h[6] = byte(class), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	binary.LittleEndian.PutUint16(h[18:], uint16(machine))
	return string(h)
}

func nativeMachine() elf.Machine {
	return map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]
}

type image struct {
	t    *testing.T
	root string
}

func newImage(t *testing.T) *image { return &image{t, t.TempDir()} }

func (im *image) file(p, data string) {
	full := filepath.Join(im.root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		im.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
		im.t.Fatal(err)
	}
}

func (im *image) link(p, target string) {
	full := filepath.Join(im.root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		im.t.Fatal(err)
	}
	if err := os.Symlink(target, full); err != nil {
		im.t.Fatal(err)
	}
}

// rdmaCore lays out rdma-core as Debian (dir /usr/lib/<triplet>) or RHEL
// (/usr/lib64) packages it.
func (im *image) rdmaCore(dir, pabi string) {
	im.file(dir+"/libibverbs.so.1.14.56.1", fakeLib(pabi))
	im.link(dir+"/libibverbs.so.1", "libibverbs.so.1.14.56.1")
	im.file(dir+"/libibverbs/libmlx5-rdmav"+pabi+".so", "\x7fELF")
	im.file(dir+"/libibverbs/libefa-rdmav"+pabi+".so", "\x7fELF")
	im.file("/etc/libibverbs.d/mlx5.driver", "driver mlx5\n")
	im.file("/etc/libibverbs.d/efa.driver", "driver efa\n")
}

func (im *image) cache(paths ...string) {
	native, ok := ldcache.NativeFlags()
	if !ok {
		im.t.Skip("ld.so.cache flags of this architecture are unknown")
	}
	var entries []ldcache.Entry
	for _, p := range paths {
		entries = append(entries, ldcache.Entry{Name: filepath.Base(p), Path: p, Flags: native})
	}
	im.file("/etc/ld.so.cache", string(ldcache.Encode(entries)))
}

func (im *image) probe(env ...string) userspace.ImageStack {
	im.t.Helper()
	r, err := hooks.OpenRoot(im.root)
	if err != nil {
		im.t.Fatal(err)
	}
	defer r.Close()
	return userspace.Probe(r.ImageView(), env)
}

func multiarch() string {
	triplets := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
	return "/usr/lib/" + triplets[runtime.GOARCH]
}

func TestProbeLayouts(t *testing.T) {
	t.Run("Debian multiarch, standard directory", func(t *testing.T) {
		im := newImage(t)
		im.rdmaCore(multiarch(), "34")
		s := im.probe()
		if s.Libibverbs != multiarch()+"/libibverbs.so.1" || s.FoundBy != "a standard library directory" || s.PABI != 34 {
			t.Errorf("found %+v", s)
		}
		if s.ProviderDir != multiarch()+"/libibverbs" || s.Providers["mlx5"] != 34 || s.Providers["efa"] != 34 || !s.DriverConfigs["mlx5"] {
			t.Errorf("providers %+v", s)
		}
	})
	t.Run("RHEL lib64, the image's cache", func(t *testing.T) {
		im := newImage(t)
		im.rdmaCore("/usr/lib64", "34")
		im.cache("/usr/lib64/libibverbs.so.1")
		if s := im.probe(); s.Libibverbs != "/usr/lib64/libibverbs.so.1" || s.FoundBy != "the image's /etc/ld.so.cache" || s.Providers["mlx5"] != 34 {
			t.Errorf("found %+v", s)
		}
	})
	t.Run("MLNX_OFED outside the standard dirs, through the cache", func(t *testing.T) {
		im := newImage(t)
		im.rdmaCore("/usr/lib64/mlnx_ofed/valgrind", "2")
		im.cache("/usr/lib64/mlnx_ofed/valgrind/libibverbs.so.1")
		if s := im.probe(); s.Libibverbs != "/usr/lib64/mlnx_ofed/valgrind/libibverbs.so.1" || s.PABI != 2 || s.Providers["mlx5"] != 2 {
			t.Errorf("found %+v", s)
		}
	})
	t.Run("DOCA under /opt through LD_LIBRARY_PATH, ahead of the cache", func(t *testing.T) {
		im := newImage(t)
		im.rdmaCore("/opt/mellanox/doca/lib", "34")
		im.rdmaCore("/usr/lib64", "34")
		im.cache("/usr/lib64/libibverbs.so.1")
		s := im.probe("LD_LIBRARY_PATH=relative:/nowhere:/opt/mellanox/doca/lib")
		if s.Libibverbs != "/opt/mellanox/doca/lib/libibverbs.so.1" || s.FoundBy != "LD_LIBRARY_PATH" {
			t.Errorf("found %+v", s)
		}
	})
	t.Run("glibc image without rdma-core", func(t *testing.T) {
		im := newImage(t)
		im.file(multiarch()+"/libc.so.6", "\x7fELF")
		im.cache(multiarch() + "/libc.so.6")
		if s := im.probe(); s.Carries() {
			t.Errorf("found %+v", s)
		}
	})
	t.Run("multilib: only a 32-bit libibverbs", func(t *testing.T) {
		im := newImage(t)
		im.file("/usr/lib/libibverbs.so.1", elfHeader(elf.ELFCLASS32, elf.EM_386)+"IBVERBS_PRIVATE_34")
		if s := im.probe(); s.Carries() || len(s.Unreadable) != 1 || !strings.Contains(s.Unreadable[0], "another architecture") {
			t.Errorf("found %+v", s)
		}
	})
	t.Run("libibverbs without providers", func(t *testing.T) {
		im := newImage(t)
		im.file(multiarch()+"/libibverbs.so.1", fakeLib("34"))
		s := im.probe()
		if !s.Carries() || len(s.Providers) != 0 {
			t.Errorf("found %+v", s)
		}
		if d := userspace.Decide(userspace.Choice{Mode: model.UserSpaceAuto}, s, []string{"mlx5"}, true); d.Lend || len(d.Problems) != 1 {
			t.Errorf("decision %+v: want the image's own stack and one problem", d)
		}
	})
}

// A container restarted after the host's set was lent to it keeps the
// empty mount points (and the linker cache that lists them): that is no
// stack of its own.
func TestProbeEmptyMountPointIsNoStack(t *testing.T) {
	im := newImage(t)
	im.file(multiarch()+"/libibverbs.so.1", "")
	im.cache(multiarch() + "/libibverbs.so.1")
	if s := im.probe(); s.Carries() {
		t.Errorf("an empty file counted as libibverbs: %+v", s)
	}
}

// What a hostile image can do to the probe: point it at the host, at a
// FIFO, at a loop. It finds no stack (and so gets the host's, fill-only),
// never hangs, never reads outside its root.
func TestProbeHostileImage(t *testing.T) {
	im := newImage(t)
	// The host's own libibverbs, if any, through /proc and absolute links:
	// resolved in-root these lead nowhere.
	im.link("/usr/lib64/libibverbs.so.1", "/proc/1/root"+multiarch()+"/libibverbs.so.1")
	im.link("/lib64/libibverbs.so.1", "../../../../../../../../"+multiarch()+"/libibverbs.so.1")
	im.link("/usr/lib/libibverbs.so.1", "libibverbs.so.1") // a loop
	im.cache("/usr/lib64/libibverbs.so.1", "/etc/passwd")
	if err := os.MkdirAll(filepath.Join(im.root, "opt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(im.root, "opt/libibverbs.so.1"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan userspace.ImageStack, 1)
	go func() { done <- im.probe("LD_LIBRARY_PATH=/opt") }()
	select {
	case s := <-done:
		if s.Carries() {
			t.Errorf("the hostile image was found to carry %+v", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Probe hangs on a FIFO")
	}
}

// A corrupt cache narrows the search to the standard dirs; it is noted.
func TestProbeCorruptCache(t *testing.T) {
	im := newImage(t)
	im.rdmaCore(multiarch(), "34")
	im.file("/etc/ld.so.cache", "glibc-ld.so.cache1.1 garbage")
	s := im.probe()
	if !s.Carries() || len(s.Unreadable) == 0 || !strings.Contains(s.Unreadable[0], "/etc/ld.so.cache") {
		t.Errorf("found %+v", s)
	}
}

// The hook runs as the host's root: a device node the image names as its
// libibverbs (or its cache, or a provider dir) must never be opened, since
// opening some devices acts (a watchdog arms). inotify sees every open.
func TestProbeNeverOpensADeviceOrFIFO(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root")
	}
	im := newImage(t)
	dev := filepath.Join(im.root, multiarch(), "libibverbs.so.1")
	fifo := filepath.Join(im.root, "opt/libibverbs.so.1")
	for _, d := range []string{filepath.Dir(dev), filepath.Dir(fifo), filepath.Join(im.root, "etc")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mknod(dev, unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	im.link("/etc/ld.so.cache", "."+multiarch()+"/libibverbs.so.1")
	im.link("/etc/libibverbs.d", "../opt/libibverbs.so.1")
	in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in)
	for _, p := range []string{dev, fifo} {
		if _, err := unix.InotifyAddWatch(in, p, unix.IN_OPEN); err != nil {
			t.Fatal(err)
		}
	}
	if s := im.probe("LD_LIBRARY_PATH=/opt"); s.Carries() {
		t.Errorf("a device or FIFO counted as libibverbs: %+v", s)
	}
	buf := make([]byte, 4096)
	if n, err := unix.Read(in, buf); n > 0 {
		t.Errorf("the probe opened a device node or FIFO of the image (%d bytes of inotify events)", n)
	} else if err != unix.EAGAIN {
		t.Fatalf("inotify read: %v", err)
	}
}

// A cache that names one path a hundred thousand times, each a big file
// without an ELF header: each path is looked at once, and only its header.
func TestProbeBoundsAHostileCache(t *testing.T) {
	im := newImage(t)
	paths := make([]string, 100000)
	for i := range paths {
		paths[i] = "/x/libibverbs.so.1"
	}
	im.cache(paths...)
	im.file("/x/libibverbs.so.1", strings.Repeat("x", 8<<20))
	r, err := hooks.OpenRoot(im.root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	counting := &countingFS{ImageFS: r.ImageView(), reads: map[string]int{}}
	if s := userspace.Probe(counting, nil); s.Carries() {
		t.Errorf("found %+v", s)
	}
	if n := counting.reads["/x/libibverbs.so.1"]; n != 1 || counting.bytes > 16<<20 {
		t.Errorf("read /x/libibverbs.so.1 %d times, %d bytes in all", n, counting.bytes)
	}
}

// countingFS counts the reads of an ImageFS.
type countingFS struct {
	userspace.ImageFS
	reads map[string]int
	bytes int
}

func (c *countingFS) ReadFile(p string, max int64) ([]byte, error) {
	c.reads[p]++
	data, err := c.ImageFS.ReadFile(p, max)
	c.bytes += len(data)
	return data, err
}
