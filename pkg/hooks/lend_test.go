package hooks

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseLentFile(t *testing.T) {
	f, err := ParseLentFile("/usr/lib/x/libibverbs.so.1=/host/usr/lib/x/../x/libibverbs.so.1")
	if err != nil || f.Path != "/usr/lib/x/libibverbs.so.1" || f.HostPath != "/host/usr/lib/x/libibverbs.so.1" {
		t.Errorf("got %+v, %v", f, err)
	}
	for _, bad := range []string{"", "/a", "a=/b", "/a=b", "/a=/b\x00c"} {
		if _, err := ParseLentFile(bad); err == nil || !strings.Contains(err.Error(), "CONTAINERPATH=HOSTPATH") {
			t.Errorf("%q: err %v", bad, err)
		}
	}
}

// mountPoint prepares where a lent file goes without mounting anything:
// what it refuses and keeps is tested here on plain directories; the
// mount itself, in real containers (test/e2e/node/userspace_test.go).
func TestMountPoint(t *testing.T) {
	dir := t.TempDir()
	put := func(p, data string) {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		must(t, os.WriteFile(filepath.Join(dir, p), []byte(data), 0o644))
	}
	link := func(p, target string) {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		must(t, os.Symlink(target, filepath.Join(dir, p)))
	}
	put("lib/own.so.1.2", "\x7fELF image")
	link("lib/own.so.1", "own.so.1.2")
	link("lib/abs.so.1", "/lib/own.so.1.2") // absolute: in-root, the image's file
	put("lib/empty.so.1", "")
	must(t, os.MkdirAll(filepath.Join(dir, "lib/dir.so.1"), 0o755))
	must(t, syscall.Mkfifo(filepath.Join(dir, "lib/fifo.so.1"), 0o644))
	link("gone", "/nowhere")
	r, err := OpenRoot(dir)
	must(t, err)
	defer r.Close()

	sameFile := func(h *os.File, p string) bool {
		var a, b syscall.Stat_t
		return syscall.Fstat(int(h.Fd()), &a) == nil && syscall.Stat(filepath.Join(dir, p), &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev
	}
	cases := []struct {
		path    string
		replace bool
		want    string // the file the handle is, "" for nil
		err     string
	}{
		{"/new/dir/lib.so.1", false, "new/dir/lib.so.1", ""},
		{"/lib/own.so.1.2", false, "", ""},
		{"/lib/own.so.1", false, "", ""},
		{"/lib/empty.so.1", false, "lib/empty.so.1", ""},
		{"/lib/own.so.1.2", true, "lib/own.so.1.2", ""},
		{"/lib/own.so.1", true, "lib/own.so.1.2", ""},
		{"/lib/abs.so.1", true, "lib/own.so.1.2", ""},
		{"/lib/dir.so.1", false, "", ""},
		{"/lib/dir.so.1", true, "", "is a directory"},
		{"/lib/fifo.so.1", true, "", "is a FIFO"},
		{"/gone/lib.so.1", false, "", "create directory /gone/"},
		{"/../../lib/../new/up.so.1", false, "new/up.so.1", ""},
	}
	for _, tc := range cases {
		h, err := r.mountPoint(tc.path, tc.replace)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s replace=%v: err %v, want %q", tc.path, tc.replace, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s replace=%v: %v", tc.path, tc.replace, err)
		case tc.want == "" && h != nil:
			t.Errorf("%s replace=%v: the image's own file would be covered", tc.path, tc.replace)
		case tc.want != "" && (h == nil || !sameFile(h, tc.want)):
			t.Errorf("%s replace=%v: handle is not %s", tc.path, tc.replace, tc.want)
		}
		if h != nil {
			h.Close()
		}
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "lib/own.so.1.2")); string(data) != "\x7fELF image" {
		t.Errorf("the image's file changed: %q", data)
	}
	if fi, err := os.Stat(filepath.Join(dir, "new/dir/lib.so.1")); err != nil || fi.Size() != 0 || fi.Mode().Perm() != 0o644 {
		t.Errorf("mount point: %v %v", fi, err)
	}
}

// Before pivot_root the container's /proc and /sys are in its root and not
// yet masked: a link of the image into them is no file of the image.
func TestNotKernelFS(t *testing.T) {
	file := filepath.Join(t.TempDir(), "lib.so")
	must(t, os.WriteFile(file, []byte("\x7fELF"), 0o644))
	for _, tc := range []struct{ path, want string }{
		{file, ""},
		{"/proc/self/status", "is on procfs"},
		{"/sys/kernel/uevent_seqnum", "is on sysfs"},
	} {
		h, err := os.OpenFile(tc.path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Skipf("%s: %v", tc.path, err)
		}
		err = notKernelFS(h, tc.path)
		h.Close()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.path, err, tc.want)
		}
	}
}
