package ldsandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
)

// BenchmarkLdconfig compares, in one run, what update-ldcache cost before
// the sandbox (the host's ldconfig chrooted with -r, which does not stop
// /proc magic links) with the sandboxed run, on the same small glibc-like
// root: an ld.so.conf including ld.so.conf.d and one real library.
//
//	go test ./pkg/ldsandbox -run '^$' -bench Ldconfig -count 5
func BenchmarkLdconfig(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	root := filepath.Join(b.TempDir(), "rootfs")
	for _, d := range []string{"etc/ld.so.conf.d", "opt/rdma/lib"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("include /etc/ld.so.conf.d/*.conf\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	lib, err := filepath.EvalSymlinks("/usr/lib/x86_64-linux-gnu/libibverbs.so.1")
	if err != nil {
		b.Skip("no host libibverbs to copy")
	}
	data, err := os.ReadFile(lib)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "opt/rdma/lib", filepath.Base(lib)), data, 0o644); err != nil {
		b.Fatal(err)
	}
	ldconfig := firstExisting(defaultLdconfigs)
	b.Run("chroot-baseline", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			cmd := exec.Command(ldconfig, "-r", root, "/opt/rdma/lib")
			cmd.Env = apis.HookEnv
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	})
	b.Run("sandbox", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			s, err := New(Options{Root: root, Folders: []string{"/opt/rdma/lib"}})
			if err != nil {
				b.Fatal(err)
			}
			if out, err := s.Run(context.Background()); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			s.Close()
		}
	})
}
