package hooks

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
	if _, err := os.Stat(DefaultLdconfig); err != nil {
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
	out, err := exec.Command(DefaultLdconfig, "-p", "-C", filepath.Join(rootfs, "etc/ld.so.cache")).CombinedOutput()
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

// Hostile images: the linker files and library dirs are links to host
// paths. ldconfig runs chrooted, so every link resolves inside the root.
func TestUpdateLDCacheHostileImages(t *testing.T) {
	needLdconfig(t)
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
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := glibcBundle(t)
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
		})
	}
}

// The hook's children get PATH and nothing else: neither the hook's own
// environment (LD_PRELOAD set by whoever ran it) nor the container's
// process.env reaches the host ldconfig, and the container's env changes
// nothing in what the hook does.
func TestUpdateLDCacheEnvironmentIsolation(t *testing.T) {
	needRoot(t)
	b, _ := glibcBundle(t)
	envOut := filepath.Join(t.TempDir(), "env")
	fake := filepath.Join(t.TempDir(), "ldconfig")
	must(t, os.WriteFile(fake, []byte("#!/bin/sh\nenv > "+envOut+"\necho \"$@\" >> "+envOut+"\n"), 0o755))
	t.Setenv("LD_PRELOAD", "/nonexistent/evil.so")
	t.Setenv("LD_LIBRARY_PATH", "/nonexistent")

	run := func() string {
		c := b.load(t)
		log, _ := testLog()
		must(t, UpdateLDCache(context.Background(), c, LDCacheOptions{Folders: []string{"/opt/rdma/lib"}, Ldconfig: fake}, log))
		data, err := os.ReadFile(envOut)
		must(t, err)
		return string(data)
	}
	plain := run()
	b.Spec.Process.Env = append(b.Spec.Process.Env, "LD_PRELOAD=/evil.so", "LD_LIBRARY_PATH=/evil")
	b.save(t)
	withPreload := run()
	if plain != withPreload {
		t.Fatalf("container env changed the hook:\n%s\nvs\n%s", plain, withPreload)
	}
	lines := strings.Split(strings.TrimSpace(plain), "\n")
	var env []string
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, "PWD=") && !strings.HasPrefix(l, "SHLVL=") && !strings.HasPrefix(l, "_=") && !strings.HasPrefix(l, "OLDPWD=") {
			env = append(env, l)
		}
	}
	if strings.Join(env, ",") != "PATH=/usr/sbin:/usr/bin:/sbin:/bin" {
		t.Fatalf("ldconfig env: %q", env)
	}
	if args := lines[len(lines)-1]; args != "-r "+b.Rootfs+" /opt/rdma/lib" {
		t.Fatalf("ldconfig args: %q", args)
	}
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
}
