package e2e

import (
	"archive/tar"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// Whose RDMA user space a container runs: the image's own stack byte for
// byte, or the host's lent set.

const stackLibDir = "/usr/lib/x86_64-linux-gnu"

// StackProbe prints, in any of the test images: the checksums of the
// libibverbs and libmlx5 the linker's names lead to, mlx5probe's line,
// ibv_devices' exit status (0 or 1: libibverbs loaded and asked the
// kernel, which has no InfiniBand here; 127: not loadable), and whether
// the mlx5 provider is registered and all its libraries resolve.
const StackProbe = `L=` + stackLibDir + `
for f in libibverbs.so.1 libmlx5.so.1; do echo "sum $f $(md5sum < $L/$f 2>/dev/null | cut -c1-32)"; done
echo "probe: $(mlx5probe 2>&1 | head -n1)"
ibv_devices >/dev/null 2>&1; echo "ibv_devices_rc=$?"
p=$L/libibverbs/libmlx5-rdmav34.so
if [ -e /etc/libibverbs.d/mlx5.driver ] && [ -e $p ] && ! /lib64/ld-linux-x86-64.so.2 --list $p 2>&1 | grep -q 'not found'; then echo provider=ok; else echo provider=missing; fi
`

// StackSeen is stackProbe's output.
type StackSeen struct {
	Sums           map[string]string // library name -> md5 ("" when absent)
	Probe, IBVRC   string
	ProviderLoaded bool
	raw            string
}

var ibvRCLine = regexp.MustCompile(`(?m)^ibv_devices_rc=(\d+)$`)

// ParseStack reads StackProbe's output.
func ParseStack(t *testing.T, out string) StackSeen {
	t.Helper()
	s := StackSeen{Sums: map[string]string{}, raw: out, ProviderLoaded: strings.Contains(out, "\nprovider=ok")}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "sum" {
			s.Sums[f[1]] = strings.Join(f[2:], "")
		}
		if v, ok := strings.CutPrefix(line, "probe: "); ok {
			s.Probe = v
		}
	}
	m := ibvRCLine.FindStringSubmatch(out)
	if m == nil || len(s.Sums) != 2 {
		t.Fatalf("not stackProbe's output:\n%s", out)
	}
	s.IBVRC = m[1]
	return s
}

func (s StackSeen) libibverbsLoads() bool { return s.IBVRC == "0" || s.IBVRC == "1" }

// HostSums are the checksums of the host's libibverbs and libmlx5.
var HostSums = sync.OnceValues(func() (map[string]string, error) {
	out := map[string]string{}
	for _, lib := range []string{"libibverbs.so.1", "libmlx5.so.1"} {
		data, err := os.ReadFile(path.Join(stackLibDir, lib))
		if err != nil {
			return nil, err
		}
		sum := md5.Sum(data)
		out[lib] = hex.EncodeToString(sum[:])
	}
	return out, nil
})

// ImageSum is the md5 of the file name leads to in an image's rootfs tar,
// following the image's own relative links.
func ImageSum(t *testing.T, img Image, name string) string {
	t.Helper()
	f, err := os.Open(img.RootfsTar(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	links, files := map[string]string{}, map[string]string{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := path.Clean("/" + h.Name)
		switch h.Typeflag {
		case tar.TypeSymlink:
			links[p] = h.Linkname
		case tar.TypeReg:
			if path.Dir(p) == stackLibDir {
				sum := md5.New()
				if _, err := io.Copy(sum, tr); err != nil {
					t.Fatal(err)
				}
				files[p] = hex.EncodeToString(sum.Sum(nil))
			}
		}
	}
	p := path.Join(stackLibDir, name)
	for range 8 {
		target, ok := links[p]
		if !ok {
			break
		}
		p = path.Join(path.Dir(p), target)
	}
	if files[p] == "" {
		t.Fatalf("%s: %s leads to %s, which is not a file of the image", img.Name, name, p)
	}
	return files[p]
}

// CheckOwnStack checks the image's own files ran, byte for byte, and that a
// program needing their newer ABI started.
func CheckOwnStack(t *testing.T, engine string, out string) {
	t.Helper()
	s := ParseStack(t, out)
	for _, lib := range []string{"libibverbs.so.1", "libmlx5.so.1"} {
		if want := ImageSum(t, OwnStack, lib); s.Sums[lib] != want {
			t.Errorf("%s: %s in the container is %q, not the image's own %s:\n%s", engine, lib, s.Sums[lib], want, out)
		}
	}
	if !strings.HasPrefix(s.Probe, "mlx5probe: MLX5_1.25 resolved") {
		t.Errorf("%s: mlx5probe does not start on the image's own libmlx5: %s", engine, s.Probe)
	}
	if !s.libibverbsLoads() || !s.ProviderLoaded {
		t.Errorf("%s: the image's own stack does not load (ibv_devices %s, provider %v):\n%s", engine, s.IBVRC, s.ProviderLoaded, out)
	}
}

// CheckLent checks that an image without a stack loaded the host's
// libibverbs and saw the host's mlx5 provider.
func CheckLent(t *testing.T, engine string, out string) {
	t.Helper()
	s := ParseStack(t, out)
	want, err := HostSums()
	if err != nil {
		t.Fatal(err)
	}
	for lib, sum := range want {
		if s.Sums[lib] != sum {
			t.Errorf("%s: %s in the container is %q, not the host's %s:\n%s", engine, lib, s.Sums[lib], sum, out)
		}
	}
	if !s.libibverbsLoads() || !s.ProviderLoaded {
		t.Errorf("%s: the lent stack does not load (ibv_devices %s, provider %v):\n%s", engine, s.IBVRC, s.ProviderLoaded, out)
	}
}
