package ldsandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

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
	root := benchRoot(b)
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

// benchRoot is a small glibc-like root: an ld.so.conf including
// ld.so.conf.d and one real library in /opt/rdma/lib.
func benchRoot(b *testing.B) string {
	b.Helper()
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
	return root
}

// BenchmarkSandboxExecutable compares, interleaved within each iteration
// (order alternating), the sandbox's two possible binaries: a re-execution
// of the hook (rdma-cdi-hook, what every start ran before issue 53) and
// the small rdma-cdi-ldsandbox, both built here as make builds them.
// "start" is the process alone (started, then aborted before any work:
// fork, exec, Go runtime and package init, exit); "run" is the whole
// sandboxed ldconfig on the root of BenchmarkLdconfig. Each reports both
// binaries' median and the median of their paired ratios:
//
//	go test ./pkg/ldsandbox -run '^$' -bench SandboxExecutable -count 5 -benchtime 40x
func BenchmarkSandboxExecutable(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	root := benchRoot(b)
	dir := b.TempDir()
	binaries := []string{"rdma-cdi-hook", ExecutableName}
	for _, name := range binaries {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(dir, name), "github.com/rdma-cdi/rdma-cdi/cmd/"+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("building %s: %v\n%s", name, err, out)
		}
	}
	// once runs the sandbox one way and returns its process's CPU time.
	once := map[string]func(s *Sandbox) (time.Duration, error){
		"start": func(s *Sandbox) (time.Duration, error) {
			r, err := s.Start(context.Background())
			if err == nil {
				r.Abort()
				err = r.awaitStart()
			}
			if err != nil {
				return 0, err
			}
			return cpuTime(r), nil
		},
		"run": func(s *Sandbox) (time.Duration, error) {
			r, err := s.Start(context.Background())
			if err != nil {
				return 0, err
			}
			if out, err := r.Proceed(); err != nil {
				return 0, fmt.Errorf("%w: %s", err, out)
			}
			return cpuTime(r), nil
		},
	}
	for _, what := range []string{"start", "run"} {
		b.Run(what, func(b *testing.B) {
			// Medians, and the medians of the paired ratios: on a busy
			// machine a mean is its few worst runs. The sandbox's CPU time
			// (its own and ldconfig's, one process) moves less with the
			// load than the wall time, which waits for a CPU.
			wall := make([][]time.Duration, len(binaries))
			cpu := make([][]time.Duration, len(binaries))
			for i := 0; i < b.N; i++ {
				for k := range binaries {
					j := (k + i) % len(binaries)
					s, err := New(Options{Root: root, Folders: []string{"/opt/rdma/lib"}, Executable: filepath.Join(dir, binaries[j])})
					if err != nil {
						b.Fatal(err)
					}
					t := time.Now()
					used, err := once[what](s)
					wall[j] = append(wall[j], time.Since(t))
					cpu[j] = append(cpu[j], used)
					s.Close()
					if err != nil {
						b.Fatalf("%s: %v", binaries[j], err)
					}
				}
			}
			ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 }
			b.ReportMetric(ms(median(wall[0])), "hook-ms")
			b.ReportMetric(ms(median(wall[1])), "ldsandbox-ms")
			b.ReportMetric(medianRatio(wall[1], wall[0]), "ldsandbox/hook")
			b.ReportMetric(ms(median(cpu[0])), "hook-cpu-ms")
			b.ReportMetric(ms(median(cpu[1])), "ldsandbox-cpu-ms")
			b.ReportMetric(medianRatio(cpu[1], cpu[0]), "ldsandbox/hook-cpu")
		})
	}
}

func median[T time.Duration | float64](v []T) T {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// medianRatio is the median of a[i]/b[i].
func medianRatio(a, b []time.Duration) float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = float64(a[i]) / float64(b[i])
	}
	return median(r)
}

// cpuTime is the user and system time of a sandbox that has exited.
func cpuTime(r *Running) time.Duration {
	st := r.cmd.ProcessState
	return st.UserTime() + st.SystemTime()
}
