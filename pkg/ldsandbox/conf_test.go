package ldsandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// walkConf checks the linker config name of the image rooted at root.
func walkConf(root, name string) error { return checkConfGraph(root, name) }

// imageTree writes files (content, or "->target" for a symlink) under root.
func imageTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(root, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		if target, ok := strings.CutPrefix(data, "->"); ok {
			must(t, os.Symlink(target, p))
			continue
		}
		must(t, os.WriteFile(p, []byte(data), 0o644))
	}
}

// walkWithin runs walkConf and fails the test if it has not returned in
// limit: a guard against an unbounded walk, not a measurement.
func walkWithin(t *testing.T, limit time.Duration, root, name string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- walkConf(root, name) }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("the walk of %s is still going after %s: unbounded", name, limit)
		return nil
	}
}

// An image whose ld.so.conf includes /d/*/*/*/*/*/* with /d/0../d/49 all
// leading back to /d: filepath.Glob would list 50^6 paths. Where nothing
// matches (*.conf) only the bound on the expansion stops it.
func TestCheckConfGraphRefusesAGlobBomb(t *testing.T) {
	for _, tc := range []struct{ link, pattern, bound string }{
		{"->/d", "/d/*/*/*/*/*/*", "more than 512 includes"},
		{"->.", "../d/*/*/*/*/*/*", "more than 512 includes"},
		{"->/d", "/d/*/*/*/*/*/*.conf", fmt.Sprintf("examined more than %d directory entries", maxGlobSteps)},
	} {
		t.Run(tc.pattern, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{"etc/ld.so.conf": "/usr/lib\ninclude " + tc.pattern + "\n"}
			for i := range 50 {
				files[fmt.Sprintf("d/%d", i)] = tc.link
			}
			imageTree(t, root, files)
			err := walkWithin(t, 5*time.Second, root, "/etc/ld.so.conf")
			if err == nil || !strings.Contains(err.Error(), "linker config /etc/ld.so.conf: include") ||
				!strings.Contains(err.Error(), tc.pattern) || !strings.Contains(err.Error(), tc.bound) {
				t.Fatalf("got %v, want a refusal naming the file, the pattern and %q", err, tc.bound)
			}
		})
	}
}

// The entries examined count, not the matches, and all patterns of a walk
// share one bound: a directory listed again and again, with nothing in it
// matching, is refused too.
func TestCheckConfGraphCountsTheEntriesExamined(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{"etc/ld.so.conf": strings.Repeat("include ../big/*.conf\n", maxGlobSteps/2000+1)}
	for i := range 2000 {
		files[fmt.Sprintf("big/%d", i)] = "->nowhere"
	}
	imageTree(t, root, files)
	err := walkWithin(t, 5*time.Second, root, "/etc/ld.so.conf")
	if err == nil || !strings.Contains(err.Error(), "../big/*.conf") || !strings.Contains(err.Error(), "directory entries") {
		t.Fatalf("got %v, want a refusal naming the pattern", err)
	}
}

// Links and ".." resolve in the image's root, as ldconfig's own opens do
// after pivot_root: a host path named by the image is not reached, a link
// of the image to its own FIFO is.
func TestCheckConfGraphResolvesInTheRoot(t *testing.T) {
	host := t.TempDir()
	hostFIFO := filepath.Join(host, "fifo.conf")
	must(t, unix.Mkfifo(hostFIFO, 0o644))
	root := t.TempDir()
	imageTree(t, root, map[string]string{
		"etc/ld.so.conf":              "include " + hostFIFO + "\ninclude /etc/ld.so.conf.d/*.conf\n",
		"etc/ld.so.conf.d/climb.conf": "->" + strings.Repeat("../", 20) + hostFIFO[1:],
		"etc/ld.so.conf.d/host.conf":  "->" + hostFIFO,
	})
	if err := walkConf(root, "/etc/ld.so.conf"); err != nil {
		t.Fatalf("a host path reached from the image: %v", err)
	}
	imageTree(t, root, map[string]string{
		"etc/ld.so.conf.d/gl.conf": "->/etc/alternatives/gl",
		"etc/alternatives/gl":      "->/opt/gl.conf",
	})
	must(t, os.MkdirAll(filepath.Join(root, "opt"), 0o755))
	must(t, unix.Mkfifo(filepath.Join(root, "opt/gl.conf"), 0o644))
	if err := walkConf(root, "/etc/ld.so.conf"); err == nil || !strings.Contains(err.Error(), "/etc/ld.so.conf.d/gl.conf is a FIFO") {
		t.Fatalf("got %v, want the image's FIFO reached through its absolute links", err)
	}
}

// Every match counts toward the include limit, whatever it is: a directory,
// a name that leads nowhere, a file that cannot be opened.
func TestCheckConfGraphCountsEveryMatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		entry func(i int) (string, string)
	}{
		{"files", func(i int) (string, string) { return fmt.Sprintf("m/%d.conf", i), "" }},
		{"directories", func(i int) (string, string) { return fmt.Sprintf("m/%d/x", i), "" }},
		{"missing", func(i int) (string, string) { return fmt.Sprintf("m/%d", i), "->nowhere" }},
		{"unreadable", func(i int) (string, string) { return fmt.Sprintf("m/%d", i), fmt.Sprintf("->%d", i) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{"etc/ld.so.conf": "include ../m/*\n"}
			for i := range 600 {
				name, data := tc.entry(i)
				files[name] = data
			}
			imageTree(t, root, files)
			err := walkWithin(t, 5*time.Second, root, "/etc/ld.so.conf")
			if err == nil || !strings.Contains(err.Error(), "more than 512 includes") || !strings.Contains(err.Error(), "../m/*") {
				t.Fatalf("got %v, want the include limit, naming the pattern", err)
			}
		})
	}
	t.Run("literal names", func(t *testing.T) {
		root := t.TempDir()
		imageTree(t, root, map[string]string{"etc/ld.so.conf": strings.Repeat("include /nonexistent.conf\n", 600)})
		err := walkWithin(t, 5*time.Second, root, "/etc/ld.so.conf")
		if err == nil || !strings.Contains(err.Error(), "more than 512 includes") {
			t.Fatalf("got %v, want the include limit", err)
		}
	})
}

// The include graph's files together are bounded, not only each one: a
// chain of large files would otherwise all be held while it is walked.
func TestCheckConfGraphBoundsTheBytesRead(t *testing.T) {
	root := t.TempDir()
	pad := strings.Repeat("# padding\n", (maxConfSize-100)/10)
	files := map[string]string{"etc/ld.so.conf": "include c0.conf\n"}
	for i := range 8 {
		files[fmt.Sprintf("etc/c%d.conf", i)] = pad + fmt.Sprintf("include c%d.conf\n", i+1)
	}
	imageTree(t, root, files)
	err := walkWithin(t, 5*time.Second, root, "/etc/ld.so.conf")
	if err == nil || !strings.Contains(err.Error(), "bytes in all") {
		t.Fatalf("got %v, want the total size limit", err)
	}
}

// The layouts real images ship pass, as before.
func TestCheckConfGraphAcceptsDistributionLayouts(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"debian": {
			"etc/ld.so.conf":                            "include /etc/ld.so.conf.d/*.conf\n\n",
			"etc/ld.so.conf.d/libc.conf":                "# libc default configuration\n/usr/local/lib\n",
			"etc/ld.so.conf.d/x86_64-linux-gnu.conf":    "# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n",
			"etc/ld.so.conf.d/fakeroot-x86_64.conf":     "/usr/lib/x86_64-linux-gnu/libfakeroot\n",
			"etc/ld.so.conf.d/x86_64-linux-gnu_GL.conf": "->/etc/alternatives/x86_64-linux-gnu_gl_conf",
			"etc/alternatives/x86_64-linux-gnu_gl_conf": "->/usr/lib/x86_64-linux-gnu/mesa/ld.so.conf",
			"usr/lib/x86_64-linux-gnu/mesa/ld.so.conf":  "/usr/lib/x86_64-linux-gnu/mesa\n",
		},
		"ubuntu": {
			"etc/ld.so.conf":                              "include /etc/ld.so.conf.d/*.conf\n\n",
			"etc/ld.so.conf.d/libc.conf":                  "/usr/local/lib\n",
			"etc/ld.so.conf.d/x86_64-linux-gnu.conf":      "/usr/local/lib/x86_64-linux-gnu\n",
			"etc/ld.so.conf.d/zz_i386-biarch-compat.conf": "# Legacy biarch compatibility support\n/lib32\n/usr/lib32\n",
			"etc/ld.so.conf.d/nvidia.conf":                "/usr/local/nvidia/lib\n/usr/local/nvidia/lib64\n",
			"etc/ld.so.conf.d/hpcx.conf":                  "/opt/hpcx/ucx/lib\n/opt/hpcx/ompi/lib\n",
		},
		"fedora": {
			"etc/ld.so.conf":                             "include ld.so.conf.d/*.conf\n",
			"etc/ld.so.conf.d/dyninst-x86_64.conf":       "/usr/lib64/dyninst\n",
			"etc/ld.so.conf.d/pipewire-jack-x86_64.conf": "/usr/lib64/pipewire-0.3/jack/\n",
			"etc/ld.so.conf.d/README":                    "not a .conf: not included\n",
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			imageTree(t, root, files)
			if err := walkWithin(t, 5*time.Second, root, "/etc/ld.so.conf"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The whole sandbox, as a container start runs it: the walk's bound
// refuses the bomb and says why, where before it ran until the run's
// timeout killed it ("killed after 10s"), growing all the while.
func TestSandboxRefusesAGlobBomb(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	files := map[string]string{"etc/ld.so.conf": "include /d/*/*/*/*/*/*\n"}
	for i := range 50 {
		files[fmt.Sprintf("d/%d", i)] = "->/d"
	}
	imageTree(t, root, files)
	out, err := runSandbox(t, Options{Root: root})
	if err == nil || !strings.Contains(err.Error(), `linker config /etc/ld.so.conf: include "/d/*/*/*/*/*/*": more than 512 includes`) {
		t.Fatalf("got %v: %s", err, out)
	}
}

// Within its bound, glob lists what filepath.Glob lists, in its order.
func TestGlobListsWhatFilepathGlobLists(t *testing.T) {
	root := t.TempDir()
	imageTree(t, root, map[string]string{
		"etc/ld.so.conf.d/b.conf": "", "etc/ld.so.conf.d/a.conf": "", "etc/ld.so.conf.d/.hidden.conf": "",
		"etc/ld.so.conf.d/README": "", "etc/ld.so.conf.d/sub/c.conf": "", "etc/ld.so.conf.d/link.conf": "->b.conf",
		"opt/x/lib/ld.so.conf": "", "opt/y/lib/ld.so.conf": "", "opt/z": "", "opt/[w]/lib/ld.so.conf": "",
	})
	for _, pattern := range []string{
		"/etc/ld.so.conf.d/*.conf", "/etc/ld.so.conf.d/*", "/etc/*/*.conf", "/opt/*/lib/ld.so.conf",
		"/opt/?/lib/*.conf", "/opt/[xz]/lib/ld.so.conf", `/opt/\[w]/lib/*`, "/nonexistent/*", "/*/*/sub/*",
	} {
		want, err := filepath.Glob(root + pattern)
		must(t, err)
		if len(want) == 0 && pattern != "/nonexistent/*" {
			t.Fatalf("%s matches nothing in the tree: a vacuous case", pattern)
		}
		for i := range want {
			want[i] = strings.TrimPrefix(want[i], root)
		}
		fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		must(t, err)
		w := confWalk{root: fd}
		var got []string
		must(t, w.glob("/etc/ld.so.conf", pattern, pattern, func(m string) error { got = append(got, m); return nil }))
		unix.Close(fd)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: got %q, want %q", pattern, got, want)
		}
	}
}
