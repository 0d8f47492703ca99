package hooks

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/ldsandbox"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// realLib is a real shared library of the host, copied into test roots.
func realLib(t testing.TB) (path, soname string) {
	t.Helper()
	for _, c := range []struct{ path, soname string }{
		{"/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "libibverbs.so.1"},
		{"/usr/lib/x86_64-linux-gnu/libz.so.1", "libz.so.1"},
		{"/lib/x86_64-linux-gnu/libz.so.1", "libz.so.1"},
	} {
		if p, err := filepath.EvalSymlinks(c.path); err == nil {
			return p, c.soname
		}
	}
	t.Skip("no host shared library to copy")
	return "", ""
}

func needLdconfig(t testing.TB) {
	t.Helper()
	needRoot(t)
	if _, err := os.Stat(ldsandbox.DefaultLdconfig); err != nil {
		t.Skipf("no host ldconfig: %v", err)
	}
}

// glibcBundle is a bundle whose rootfs looks like a glibc image: an
// ld.so.conf including ld.so.conf.d, and a real library in /opt/rdma/lib.
func glibcBundle(t testing.TB) (*testBundle, string) {
	t.Helper()
	lib, soname := realLib(t)
	b := newBundle(t)
	b.write(t, "etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")
	data, err := os.ReadFile(lib)
	must(t, err)
	b.write(t, filepath.Join("opt/rdma/lib", filepath.Base(lib)), string(data))
	return b, soname
}

// cacheListing prints the root's ld.so.cache as `ldconfig -p` inside would.
func cacheListing(t testing.TB, rootfs string) string {
	t.Helper()
	out, err := exec.Command(ldsandbox.DefaultLdconfig, "-p", "-C", filepath.Join(rootfs, "etc/ld.so.cache")).CombinedOutput()
	if err != nil {
		t.Fatalf("ldconfig -p: %v: %s", err, out)
	}
	return string(out)
}

func TestUpdateLDCacheListsTheFolders(t *testing.T) {
	needLdconfig(t)
	b, soname := glibcBundle(t)
	c := b.load(t)
	log, buf := testLog()
	opts := LDCacheOptions{Folders: []string{"/opt/rdma/lib", "/opt/rdma/lib/", "/opt/other"}}
	must(t, UpdateLDCache(context.Background(), c, opts, log))

	conf, err := os.ReadFile(filepath.Join(b.Rootfs, LDConfPath))
	must(t, err)
	if !strings.HasSuffix(string(conf), "\n/opt/rdma/lib\n/opt/other\n") {
		t.Errorf("%s: %q", LDConfPath, conf)
	}
	listing := cacheListing(t, b.Rootfs)
	if !strings.Contains(listing, soname+" (libc6,x86-64) => /opt/rdma/lib/"+soname) {
		t.Fatalf("cache does not list the injected library:\n%s\nlog: %s", listing, buf)
	}
	// Idempotent: a restarted container gets the same result.
	must(t, UpdateLDCache(context.Background(), c, opts, log))
	if again := cacheListing(t, b.Rootfs); again != listing {
		t.Fatalf("second run differs:\n%s", again)
	}
}

func TestUpdateLDCacheFolderValidation(t *testing.T) {
	b := newBundle(t)
	c := b.load(t)
	log, _ := testLog()
	for _, bad := range []string{"relative/lib", "/opt/a\n/etc", ""} {
		err := UpdateLDCache(context.Background(), c, LDCacheOptions{Folders: []string{bad}}, log)
		if err == nil || !strings.Contains(err.Error(), "--folder") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if err := UpdateLDCache(context.Background(), c, LDCacheOptions{Folders: []string{"/x"}, Ldconfig: "sbin/ldconfig"}, log); err == nil || !strings.Contains(err.Error(), "absolute host path") {
		t.Errorf("relative ldconfig: %v", err)
	}
	// No folders: nothing to do, nothing written.
	must(t, UpdateLDCache(context.Background(), c, LDCacheOptions{}, log))
	if _, err := os.Lstat(filepath.Join(b.Rootfs, LDConfPath)); !os.IsNotExist(err) {
		t.Errorf("wrote %s without folders", LDConfPath)
	}
}

// Hostile images: the linker files, library dirs and sonames point at host
// paths, directly or through the root's own procfs (mounted as runc mounts
// it before createContainer hooks, where /proc/1/root is the host's "/").
// ldconfig runs in the sandbox, so nothing resolves outside the root.
func TestUpdateLDCacheHostileImages(t *testing.T) {
	needLdconfig(t)
	// hostLib puts a real library in the canary under a name that is not its
	// soname: ldconfig, reaching the dir, would add a soname link there.
	hostLib := func(t *testing.T, c canary) {
		lib, _ := realLib(t)
		data, err := os.ReadFile(lib)
		must(t, err)
		must(t, os.WriteFile(filepath.Join(c.Dir, "libcanary-1.2.3.so"), data, 0o644))
		must(t, os.Symlink("secret", filepath.Join(c.Dir, "link")))
	}
	viaProc := func(c canary) string { return "/proc/1/root" + c.Dir }
	cases := []struct {
		name    string
		setup   func(t *testing.T, b *testBundle, c canary)
		wantErr string
	}{
		{"ld.so.cache links to a host file", func(t *testing.T, b *testBundle, c canary) {
			must(t, os.Symlink(c.File, filepath.Join(b.Rootfs, "etc/ld.so.cache")))
		}, ""},
		{"ld.so.cache links up and out", func(t *testing.T, b *testBundle, c canary) {
			must(t, os.Symlink(strings.Repeat("../", 20)+c.File[1:], filepath.Join(b.Rootfs, "etc/ld.so.cache")))
		}, ""},
		{"ld.so.conf.d links to a host dir", func(t *testing.T, b *testBundle, c canary) {
			must(t, os.MkdirAll(filepath.Join(b.Rootfs, c.Dir), 0o755))
			must(t, os.Symlink(c.Dir, filepath.Join(b.Rootfs, "etc/ld.so.conf.d")))
		}, ""},
		{"our conf file links to a host file", func(t *testing.T, b *testBundle, c canary) {
			must(t, os.MkdirAll(filepath.Join(b.Rootfs, "etc/ld.so.conf.d"), 0o755))
			must(t, os.Symlink(c.File, filepath.Join(b.Rootfs, LDConfPath)))
		}, "is a symlink"},
		{"library dir links to a host dir holding a library", func(t *testing.T, b *testBundle, c canary) {
			lib, _ := realLib(t)
			data, err := os.ReadFile(lib)
			must(t, err)
			must(t, os.WriteFile(filepath.Join(c.Dir, filepath.Base(lib)), data, 0o644))
			must(t, os.RemoveAll(filepath.Join(b.Rootfs, "opt/rdma/lib")))
			must(t, os.Symlink(c.Dir, filepath.Join(b.Rootfs, "opt/rdma/lib")))
		}, ""},
		{"/etc links to a host dir", func(t *testing.T, b *testBundle, c canary) {
			must(t, os.RemoveAll(filepath.Join(b.Rootfs, "etc")))
			must(t, os.MkdirAll(filepath.Join(b.Rootfs, c.Dir), 0o755))
			must(t, os.Symlink(c.Dir, filepath.Join(b.Rootfs, "etc")))
		}, ""},
		{"/etc links to a host dir absent in the root", func(t *testing.T, b *testBundle, c canary) {
			must(t, os.RemoveAll(filepath.Join(b.Rootfs, "etc")))
			must(t, os.Symlink(c.Dir, filepath.Join(b.Rootfs, "etc")))
		}, ""}, // resolves to nothing in the root: treated as no /etc
		{"conf file is a FIFO", func(t *testing.T, b *testBundle, c canary) {
			must(t, os.MkdirAll(filepath.Join(b.Rootfs, "etc/ld.so.conf.d"), 0o755))
			must(t, syscallMkfifo(filepath.Join(b.Rootfs, LDConfPath)))
		}, "is a FIFO"},
		{"conf lists a host dir through /proc/1/root", func(t *testing.T, b *testBundle, c canary) {
			hostLib(t, c)
			b.write(t, "etc/ld.so.conf.d/evil.conf", viaProc(c)+"\n")
		}, ""},
		{"library dir links into /proc/1/root", func(t *testing.T, b *testBundle, c canary) {
			hostLib(t, c)
			must(t, os.RemoveAll(filepath.Join(b.Rootfs, "opt/rdma/lib")))
			must(t, os.Symlink(viaProc(c), filepath.Join(b.Rootfs, "opt/rdma/lib")))
		}, ""},
		{"a library's soname climbs into /proc/1/root", func(t *testing.T, b *testBundle, c canary) {
			soname := strings.Repeat("../", 20) + "proc/1/root" + c.Dir + "/link"
			b.write(t, "opt/rdma/lib/libevil.so.1.0", string(fixture.SharedObject(t, soname)))
		}, ""},
		{"ld.so.conf includes itself", func(t *testing.T, b *testBundle, c canary) {
			b.write(t, "etc/ld.so.conf", "include /etc/ld.so.conf\ninclude ld.so.conf\n"+viaProc(c)+"\n")
			hostLib(t, c)
		}, "/etc/ld.so.conf includes itself"},
		{"ld.so.conf includes /dev/zero", func(t *testing.T, b *testBundle, c canary) {
			bindDevZero(t, b.Rootfs)
			b.write(t, "etc/ld.so.conf", "include /dev/zero\n")
		}, ""},
		{"ld.so.conf is a FIFO", func(t *testing.T, b *testBundle, c canary) {
			must(t, os.Remove(filepath.Join(b.Rootfs, "etc/ld.so.conf")))
			must(t, syscallMkfifo(filepath.Join(b.Rootfs, "etc/ld.so.conf")))
		}, "/etc/ld.so.conf is a FIFO"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, soname := glibcBundle(t)
			mountProc(t, b.Rootfs)
			c := newCanary(t)
			tc.setup(t, b, c)
			before := c.snapshot(t)
			ctr := b.load(t)
			log, buf := testLog()
			err := UpdateLDCache(context.Background(), ctr, LDCacheOptions{Folders: []string{"/opt/rdma/lib"}}, log)
			c.assertUntouched(t, before)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, buf)
			}
			// Where the image left /etc and the library dir alone, the cache
			// still lists the library: the attack costs no function.
			if isDir(b.Rootfs, "etc") && isDir(b.Rootfs, "opt/rdma/lib") {
				if listing := cacheListing(t, b.Rootfs); !strings.Contains(listing, "=> /opt/rdma/lib/"+soname) {
					t.Errorf("the container's cache does not list the injected library:\n%s", listing)
				}
			}
		})
	}
}

func isDir(root, p string) bool {
	fi, err := os.Lstat(filepath.Join(root, p))
	return err == nil && fi.IsDir()
}

// mountProc mounts at root/proc what runc has there before it runs
// createContainer hooks: the procfs of a new pid namespace whose pid 1
// (runc's init there) still has the host's "/" as its root, so that
// root/proc/1/root leads out of root.
func mountProc(t *testing.T, root string) {
	t.Helper()
	dir := filepath.Join(root, "proc")
	must(t, os.MkdirAll(dir, 0o555))
	init := exec.Command("unshare", "--pid", "--fork", "sh", "-c", `mount -t proc proc "$1" && echo mounted && exec sleep 600`, "sh", dir)
	stdout, err := init.StdoutPipe()
	must(t, err)
	must(t, init.Start())
	t.Cleanup(func() {
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		_ = init.Process.Kill()
		_ = init.Wait()
	})
	line := make([]byte, len("mounted\n"))
	if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "mounted\n" {
		t.Fatalf("procfs of a new pid namespace at %s: %q %v", dir, line, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "1/root", filepath.Dir(root))); err != nil {
		t.Fatalf("%s/1/root does not lead to the host's /: %v", dir, err)
	}
}

// bindDevZero binds the host's /dev/zero at root/dev/zero, as runc binds
// device nodes into a container's /dev.
func bindDevZero(t *testing.T, root string) {
	t.Helper()
	target := filepath.Join(root, "dev/zero")
	must(t, os.MkdirAll(filepath.Dir(target), 0o755))
	must(t, os.WriteFile(target, nil, 0o644))
	must(t, syscall.Mount("/dev/zero", target, "", syscall.MS_BIND, ""))
	t.Cleanup(func() { _ = syscall.Unmount(target, syscall.MNT_DETACH) })
}

func TestUpdateLDCacheReadOnlyOrNoEtcIsAWarning(t *testing.T) {
	needLdconfig(t)
	t.Run("root.readonly", func(t *testing.T) {
		b, _ := glibcBundle(t)
		b.Spec.Root.Readonly = true
		b.save(t)
		log, buf := testLog()
		must(t, UpdateLDCache(context.Background(), b.load(t), LDCacheOptions{Folders: []string{"/opt/rdma/lib"}}, log))
		if _, err := os.Lstat(filepath.Join(b.Rootfs, LDConfPath)); !os.IsNotExist(err) {
			t.Error("wrote into a read-only root")
		}
		if !strings.Contains(buf.String(), "read-only") {
			t.Errorf("log: %s", buf)
		}
	})
	t.Run("read-only mount", func(t *testing.T) {
		b, _ := glibcBundle(t)
		c := b.load(t)
		mountReadOnly(t, b.Rootfs)
		log, buf := testLog()
		must(t, UpdateLDCache(context.Background(), c, LDCacheOptions{Folders: []string{"/opt/rdma/lib"}}, log))
		if !strings.Contains(buf.String(), "read-only") {
			t.Errorf("log: %s", buf)
		}
	})
	// An /etc its own root may not write (0555): ldconfig, which runs with
	// no capability, cannot write the cache there; the container starts
	// without it, as on a read-only root.
	t.Run("/etc not writable by the image's root", func(t *testing.T) {
		b, _ := glibcBundle(t)
		must(t, os.Chmod(filepath.Join(b.Rootfs, "etc"), 0o555))
		log, buf := testLog()
		must(t, UpdateLDCache(context.Background(), b.load(t), LDCacheOptions{Folders: []string{"/opt/rdma/lib"}}, log))
		if !strings.Contains(buf.String(), "linker cache not updated") {
			t.Errorf("log: %s", buf)
		}
	})
	t.Run("no /etc", func(t *testing.T) {
		b := newBundle(t)
		must(t, os.RemoveAll(filepath.Join(b.Rootfs, "etc")))
		log, buf := testLog()
		must(t, UpdateLDCache(context.Background(), b.load(t), LDCacheOptions{Folders: []string{"/opt/rdma/lib"}}, log))
		if _, err := os.Lstat(filepath.Join(b.Rootfs, "etc")); !os.IsNotExist(err) {
			t.Error("created /etc")
		}
		if !strings.Contains(buf.String(), "no /etc") {
			t.Errorf("log: %s", buf)
		}
	})
	// The lend makes /etc (for /etc/libibverbs.d) in an image without one,
	// after the update started: the cache is still built.
	t.Run("/etc made by the lend", func(t *testing.T) {
		b, soname := glibcBundle(t)
		etc := filepath.Join(b.Rootfs, "etc")
		saved := filepath.Join(t.TempDir(), "etc")
		must(t, os.Rename(etc, saved))
		log, buf := testLog()
		u, err := startLDCacheUpdate(context.Background(), b.load(t), LDCacheOptions{Folders: []string{"/opt/rdma/lib"}}, log)
		must(t, err)
		must(t, os.Rename(saved, etc))
		must(t, u.finish())
		if listing := cacheListing(t, b.Rootfs); !strings.Contains(listing, soname) {
			t.Fatalf("cache does not list %s:\n%s\nlog: %s", soname, listing, buf)
		}
	})
}
