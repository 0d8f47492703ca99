package hooks

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

func openTestRoot(t *testing.T, dir string) *Root {
	t.Helper()
	r, err := OpenRoot(dir)
	must(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

func TestWriteFileAtomicAndRegular(t *testing.T) {
	b := newBundle(t)
	r := openTestRoot(t, b.Rootfs)
	must(t, r.WriteFile("/etc/nccl.conf", []byte("A=1\n"), 0o644))
	must(t, r.WriteFile("/etc/nccl.conf", []byte("A=2\n"), 0o644))
	// ".." cannot climb out: it is cleaned against the root.
	must(t, r.WriteFile("../../../../etc/x.conf", []byte("x\n"), 0o600))
	// Missing parents are created.
	must(t, r.WriteFile("/etc/ld.so.conf.d/00-rdma-cdi.conf", []byte("/opt\n"), 0o644))

	got, err := os.ReadFile(filepath.Join(b.Rootfs, "etc/nccl.conf"))
	must(t, err)
	if string(got) != "A=2\n" {
		t.Fatalf("content %q", got)
	}
	for rel, mode := range map[string]os.FileMode{"etc/nccl.conf": 0o644, "etc/x.conf": 0o600, "etc/ld.so.conf.d/00-rdma-cdi.conf": 0o644} {
		fi, err := os.Lstat(filepath.Join(b.Rootfs, rel))
		must(t, err)
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want a regular file %v", rel, fi.Mode(), mode)
		}
	}
	entries, err := os.ReadDir(filepath.Join(b.Rootfs, "etc"))
	must(t, err)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".rdma-cdi-") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
	data, err := r.ReadFile("/etc/nccl.conf", 100)
	must(t, err)
	if string(data) != "A=2\n" {
		t.Fatalf("ReadFile %q", data)
	}
	if _, err := r.ReadFile("/etc/nccl.conf", 2); err == nil || !strings.Contains(err.Error(), "larger than 2 bytes") {
		t.Errorf("bound: %v", err)
	}
	if _, err := r.ReadFile("/etc/absent", 100); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent file: %v", err)
	}
	if _, err := r.ReadFile("/no/such/dir/f", 100); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent dir: %v", err)
	}
}

// The hostile-image suite for in-root I/O: every trick an image can play
// with /etc and the files the hooks touch. The host canary outside the
// rootfs must stay as it was, and a refusal must say why.
func TestHostileRootfsCannotReachTheHost(t *testing.T) {
	type setup func(t *testing.T, rootfs string, c canary)
	cases := []struct {
		name    string
		setup   setup
		wantErr string // "" = the write succeeds, inside the root
	}{
		// (ReadFile treats a dangling /etc as an absent file.)
		{"file symlink to host file", func(t *testing.T, root string, c canary) {
			must(t, os.Symlink(c.File, filepath.Join(root, "etc/nccl.conf")))
		}, "is a symlink"},
		{"file symlink climbing with ..", func(t *testing.T, root string, c canary) {
			must(t, os.Symlink(strings.Repeat("../", 20)+c.File[1:], filepath.Join(root, "etc/nccl.conf")))
		}, "is a symlink"},
		{"dangling file symlink to host path", func(t *testing.T, root string, c canary) {
			must(t, os.Symlink(filepath.Join(c.Dir, "new-file"), filepath.Join(root, "etc/nccl.conf")))
		}, "is a symlink"},
		// The link's target does not exist inside the root: refused.
		{"/etc symlink to host dir", func(t *testing.T, root string, c canary) {
			must(t, os.RemoveAll(filepath.Join(root, "etc")))
			must(t, os.Symlink(c.Dir, filepath.Join(root, "etc")))
		}, "not a directory"},
		// The same path exists inside the root too: the link resolves there.
		{"/etc symlink to host dir also in root", func(t *testing.T, root string, c canary) {
			must(t, os.RemoveAll(filepath.Join(root, "etc")))
			must(t, os.MkdirAll(filepath.Join(root, c.Dir), 0o755))
			must(t, os.Symlink(c.Dir, filepath.Join(root, "etc")))
		}, ""},
		{"/etc symlink climbing with ..", func(t *testing.T, root string, c canary) {
			must(t, os.RemoveAll(filepath.Join(root, "etc")))
			must(t, os.MkdirAll(filepath.Join(root, c.Dir), 0o755))
			must(t, os.Symlink(strings.Repeat("../", 20)+c.Dir[1:], filepath.Join(root, "etc")))
		}, ""},
		{"FIFO in place of the file", func(t *testing.T, root string, c canary) {
			must(t, unix.Mkfifo(filepath.Join(root, "etc/nccl.conf"), 0o644))
		}, "is a FIFO"},
		{"directory in place of the file", func(t *testing.T, root string, c canary) {
			must(t, os.Mkdir(filepath.Join(root, "etc/nccl.conf"), 0o755))
		}, "is a directory"},
		{"device node in place of the file", func(t *testing.T, root string, c canary) {
			needRoot(t)
			must(t, unix.Mknod(filepath.Join(root, "etc/nccl.conf"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		}, "is a device node"},
		{"/etc is a file", func(t *testing.T, root string, c canary) {
			must(t, os.RemoveAll(filepath.Join(root, "etc")))
			must(t, os.WriteFile(filepath.Join(root, "etc"), nil, 0o644))
		}, "not a directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBundle(t)
			c := newCanary(t)
			tc.setup(t, b.Rootfs, c)
			before := c.snapshot(t)
			r := openTestRoot(t, b.Rootfs)

			done := make(chan error, 1)
			go func() { done <- r.WriteFile("/etc/nccl.conf", []byte("NCCL_IB_HCA=evil\n"), 0o644) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("WriteFile blocked (opened a FIFO?)")
			}
			_, rerr := r.ReadFile("/etc/nccl.conf", 1<<20)
			c.assertUntouched(t, before)
			if tc.wantErr == "" {
				if err != nil || rerr != nil {
					t.Fatalf("write %v, read %v", err, rerr)
				}
				// The write landed inside the root, where the link points there.
				data, err := os.ReadFile(filepath.Join(b.Rootfs, c.Dir, "nccl.conf"))
				if err != nil || string(data) != "NCCL_IB_HCA=evil\n" {
					t.Fatalf("in-root target: %q, %v", data, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("write: got %v, want %q", err, tc.wantErr)
			}
			if dangling := tc.wantErr == "not a directory" && errors.Is(rerr, os.ErrNotExist); !dangling && (rerr == nil || !strings.Contains(rerr.Error(), tc.wantErr)) {
				t.Fatalf("read: got %v, want %q", rerr, tc.wantErr)
			}
			if !strings.Contains(err.Error(), "/etc") {
				t.Errorf("error does not name the file: %v", err)
			}
		})
	}
}

// mountReadOnly bind-mounts dir over itself read-only for the test.
func mountReadOnly(t *testing.T, dir string) {
	t.Helper()
	needRoot(t)
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Skipf("read-only remount: %v", err)
	}
}

func TestWriteFileReadOnlyRoot(t *testing.T) {
	b := newBundle(t)
	mountReadOnly(t, b.Rootfs)
	r := openTestRoot(t, b.Rootfs)
	err := r.WriteFile("/etc/nccl.conf", []byte("A=1\n"), 0o644)
	if !errors.Is(err, ErrReadOnly) || !strings.Contains(err.Error(), "/etc") {
		t.Fatalf("got %v, want ErrReadOnly naming the path", err)
	}
}

// A hook killed between create and rename leaves a temporary file; the next
// write of the same file (a restarted container) removes it once it is old
// enough not to belong to a hook still running.
func TestWriteFileRemovesStaleTemps(t *testing.T) {
	b := newBundle(t)
	r := openTestRoot(t, b.Rootfs)
	etc := filepath.Join(b.Rootfs, "etc")
	old := time.Now().Add(-time.Hour)
	files := map[string]bool{ // name -> should survive
		".rdma-cdi-nccl.conf.0123456789ab":   false,
		".rdma-cdi-nccl.conf.fresh000000":    true, // young: maybe another hook's
		".rdma-cdi-ld.so.cache.0123456789ab": true, // another file's temp
		".rdma-cdi-nccl.conf.dir000000000":   true, // a directory, not ours
		".rdma-cdi-nccl.conf.link00000000":   true, // a symlink, not ours
		"hosts":                              true,
	}
	for name := range files {
		p := filepath.Join(etc, name)
		switch {
		case strings.Contains(name, "dir0"):
			must(t, os.Mkdir(p, 0o755))
		case strings.Contains(name, "link0"):
			must(t, os.Symlink("/etc/hosts", p))
		default:
			must(t, os.WriteFile(p, []byte("partial"), 0o600))
		}
		if !strings.Contains(name, "fresh") && !strings.Contains(name, "link0") {
			must(t, os.Chtimes(p, old, old))
		}
	}
	must(t, r.WriteFile("/etc/nccl.conf", []byte("A=1\n"), 0o644))
	for name, survives := range files {
		_, err := os.Lstat(filepath.Join(etc, name))
		if survives != (err == nil) {
			t.Errorf("%s: exists=%v, want %v", name, err == nil, survives)
		}
	}
}

// A hostile image's /etc with more entries than the sweep lists: the write
// succeeds, the sweep stops at its bound, and the log says so; under the
// bound it says nothing.
func TestWriteFileBoundsTheStaleTempSweep(t *testing.T) {
	b := newBundle(t)
	r := openTestRoot(t, b.Rootfs)
	var buf bytes.Buffer
	log := logrus.New()
	log.SetOutput(&buf)
	r.log = log
	must(t, r.WriteFile("/etc/nccl.conf", []byte("A=1\n"), 0o644))
	if buf.Len() != 0 {
		t.Fatalf("logged under the bound: %s", buf.String())
	}
	etc := filepath.Join(b.Rootfs, "etc")
	for i := range maxStaleTempScan {
		must(t, os.Symlink("nowhere", filepath.Join(etc, fmt.Sprintf("filler%d", i))))
	}
	must(t, r.WriteFile("/etc/nccl.conf", []byte("A=2\n"), 0o644))
	if want := fmt.Sprintf("stopped looking for stale temporary files after %d entries of /etc/", maxStaleTempScan); !strings.Contains(buf.String(), want) {
		t.Fatalf("log %q lacks %q", buf.String(), want)
	}
}
