package node

// GPU-aligned RDMA: on a GPU node one container gets two CDI
// specs, NVIDIA's (device nodes, driver libraries, nvidia-cdi-hook's
// createContainer hooks: create-symlinks, update-ldcache, ...) and ours
// (uverbs nodes, our createRuntime hook that may lend the host's RDMA
// libraries and refresh the linker cache). Both must keep their effect
// whatever the other does: the driver's libcuda.so.1 resolves through the
// container's linker cache, and the RDMA stack is the image's own, byte
// for byte, or the host's lent one for an image without one. Real
// containers on podman and containerd (ctr), each with the own-stack image
// and the glibc image without a stack.

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/hooks"
	"github.com/rdma-cdi/rdma-cdi/pkg/hostlibs/ldcache"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// composeProbeDir is where the probe program is mounted in the containers.
const composeProbeDir = "/rdma-cdi-probe"

// composeProbeC is the probe: for each soname, whether the container's own
// dynamic linker finds it (dlopen, by name: ld.so.cache, then the default
// dirs), which file it loaded, and what a fake driver library says it is.
const composeProbeC = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>

int main(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
		struct link_map *map = NULL;
		if (h == NULL || dlinfo(h, RTLD_DI_LINKMAP, &map) != 0 || map == NULL) {
			printf("dlfailed %s %s\n", argv[i], dlerror());
			continue;
		}
		const char *(*who)(void) = (const char *(*)(void))dlsym(h, "` + e2e.NVIDIADriverSymbol + `");
		printf("dlopened %s %s %s\n", argv[i], map->l_name, who ? who() : "-");
	}
	return 0;
}
`

// composeProbeBinary builds the probe once per test binary (with the host's
// gcc and glibc: the images' glibc is as new or newer) and returns the host
// dir that holds it, to mount at composeProbeDir.
func composeProbeBinary(t *testing.T) string {
	t.Helper()
	gcc := e2e.RequireBinary(t, "gcc")
	return e2e.GetShared(t, "compose-probe", func(c e2e.Cleaner) (string, error) {
		dir, err := e2e.ScratchDir(c, "probe")
		if err != nil {
			return "", err
		}
		src := filepath.Join(dir, "dlprobe.c")
		if err := os.WriteFile(src, []byte(composeProbeC), 0o644); err != nil {
			return "", err
		}
		bin := filepath.Join(dir, "bin")
		if err := os.Mkdir(bin, 0o755); err != nil {
			return "", err
		}
		if b, err := exec.Command(gcc, "-O2", "-o", filepath.Join(bin, "dlprobe"), src).CombinedOutput(); err != nil {
			return "", fmt.Errorf("gcc dlprobe.c: %v\n%s", err, b)
		}
		return bin, nil
	})
}

// composeScript prints stackProbe's lines, then what the probe loads for
// libcuda.so.1 and libibverbs.so.1 with the checksum of each file loaded,
// create-symlinks' link, the character devices of both specs, the linker
// config drop-ins, where the library dirs lead (/lib may link to usr/lib),
// and the container's ld.so.cache (base64).
const composeScript = e2e.StackProbe + `dl=$(` + composeProbeDir + `/dlprobe libcuda.so.1 libibverbs.so.1 2>&1)
echo "$dl"
echo "$dl" | while read -r w name file rest; do [ "$w" = dlopened ] && echo "dlsum $name $(md5sum < "$file" | cut -c1-32)"; done
echo "cudalink $(readlink $L/libcuda.so)"
for d in ` + "%NODES%" + `; do [ -c "$d" ] && echo "chardev $d"; done
echo "confd $(ls /etc/ld.so.conf.d 2>/dev/null | tr '\n' ' ')"
for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 /lib /usr/lib; do [ -d "$d" ] && echo "realdir $d $(readlink -f "$d")"; done
echo ldcache-begin
base64 /etc/ld.so.cache
echo ldcache-end
`

// composeNodes are the char devices the script looks for: the GPU spec's
// and mlx5_1's uverbs node (both tests give mlx5_1 or all).
var composeNodes = append(e2e.NvidiaNodePaths(), "/dev/infiniband/uverbs1")

func composeCommand() []string {
	return []string{"sh", "-c", strings.Replace(composeScript, "%NODES%", strings.Join(composeNodes, " "), 1)}
}

// composeSeen is composeScript's output.
type composeSeen struct {
	loaded   map[string][2]string // soname -> file, what it says it is
	sums     map[string]string    // soname -> md5 of the file loaded
	failed   map[string]string    // soname -> dlerror
	cudaLink string
	devs     []string
	confd    []string
	realDir  map[string]string   // library dir -> the dir it leads to
	cache    map[string][]string // soname -> the paths ld.so.cache maps it to
}

func parseCompose(t *testing.T, out string) composeSeen {
	t.Helper()
	s := composeSeen{loaded: map[string][2]string{}, sums: map[string]string{}, failed: map[string]string{}, realDir: map[string]string{}, cache: map[string][]string{}}
	var b64 strings.Builder
	inCache, cacheSeen := false, false
	for _, line := range strings.Split(out, "\n") {
		if inCache {
			if line == "ldcache-end" {
				inCache, cacheSeen = false, true
			} else {
				b64.WriteString(strings.TrimSpace(line))
			}
			continue
		}
		f := strings.Fields(line)
		switch {
		case line == "ldcache-begin":
			inCache = true
		case len(f) >= 3 && f[0] == "dlopened":
			s.loaded[f[1]] = [2]string{f[2], strings.Join(f[3:], " ")}
		case len(f) >= 2 && f[0] == "dlfailed":
			s.failed[f[1]] = strings.Join(f[2:], " ")
		case len(f) == 3 && f[0] == "dlsum":
			s.sums[f[1]] = f[2]
		case len(f) >= 1 && f[0] == "cudalink":
			s.cudaLink = strings.Join(f[1:], " ")
		case len(f) == 2 && f[0] == "chardev":
			s.devs = append(s.devs, f[1])
		case len(f) == 3 && f[0] == "realdir":
			s.realDir[f[1]] = f[2]
		case len(f) >= 1 && f[0] == "confd":
			s.confd = f[1:]
		}
	}
	if !cacheSeen {
		t.Fatalf("not composeScript's output:\n%s", out)
	}
	data, err := base64.StdEncoding.DecodeString(b64.String())
	if err != nil {
		t.Fatalf("the container's ld.so.cache, base64: %v\n%s", err, out)
	}
	entries, err := ldcache.Parse(data)
	if err != nil {
		t.Fatalf("the container's ld.so.cache: %v", err)
	}
	for _, e := range entries {
		s.cache[e.Name] = append(s.cache[e.Name], e.Path)
	}
	return s
}

// inLibDir: file is in NvidiaLibDir, or in a dir of the image that leads
// there (the linker cache names a library by the first dir it scanned).
func (s composeSeen) inLibDir(file string) bool {
	dir := path.Dir(file)
	return dir == e2e.NvidiaLibDir || (s.realDir[dir] != "" && s.realDir[dir] == s.realDir[e2e.NvidiaLibDir])
}

// checkCompose checks one container's output: NVIDIA's spec did its work
// (device nodes, every driver library in the linker cache at the mounted
// file, libcuda.so.1 loading the spec's libcuda, create-symlinks' link),
// and ours did its own: the uverbs node and, for OwnStack, the image's
// libibverbs byte for byte and nothing of ours in its linker config, or for
// an image without a stack the host's libibverbs lent, cached and loaded.
func checkCompose(t *testing.T, engine string, img e2e.Image, nv *e2e.NvidiaSpec, out string) {
	t.Helper()
	s := parseCompose(t, out)
	// The raw output without the cache's base64, for the messages.
	shown, _, _ := strings.Cut(out, "ldcache-begin")

	for _, d := range composeNodes {
		if !slices.Contains(s.devs, d) {
			t.Errorf("%s: %s is not a char device in the container:\n%s", engine, d, shown)
		}
	}
	for _, lib := range e2e.NvidiaLibs {
		soname := lib + ".so.1"
		if !slices.ContainsFunc(s.cache[soname], s.inLibDir) {
			t.Errorf("%s: the container's ld.so.cache maps %s to %q, want it in %s (NVIDIA's update-ldcache lost or undone)", engine, soname, s.cache[soname], e2e.NvidiaLibDir)
		}
	}
	if got, ok := s.loaded["libcuda.so.1"]; !ok {
		t.Errorf("%s: libcuda.so.1 does not load in the container: %s\n%s", engine, s.failed["libcuda.so.1"], shown)
	} else {
		if !s.inLibDir(got[0]) || got[1] != "libcuda "+e2e.NvidiaDriver {
			t.Errorf("%s: libcuda.so.1 loaded %s, which says %q: want the spec's libcuda in %s", engine, got[0], got[1], e2e.NvidiaLibDir)
		}
		if s.sums["libcuda.so.1"] != nv.LibSum["libcuda"] {
			t.Errorf("%s: the libcuda.so.1 loaded is %q, not the spec's mounted libcuda.so.%s (%s)", engine, s.sums["libcuda.so.1"], e2e.NvidiaDriver, nv.LibSum["libcuda"])
		}
	}
	if s.cudaLink != "libcuda.so.1" {
		t.Errorf("%s: %s/libcuda.so links to %q, want libcuda.so.1 (NVIDIA's create-symlinks lost)", engine, e2e.NvidiaLibDir, s.cudaLink)
	}

	ours := path.Base(hooks.LDConfPath)
	ibv, loaded := s.loaded["libibverbs.so.1"]
	if !loaded {
		t.Errorf("%s: libibverbs.so.1 does not load in the container: %s\n%s", engine, s.failed["libibverbs.so.1"], shown)
	}
	if img == e2e.OwnStack {
		e2e.CheckOwnStack(t, engine, out)
		if want := e2e.ImageSum(t, img, "libibverbs.so.1"); loaded && s.sums["libibverbs.so.1"] != want {
			t.Errorf("%s: the libibverbs.so.1 loaded (%s) is %q, not the image's own %s", engine, ibv[0], s.sums["libibverbs.so.1"], want)
		}
		if slices.Contains(s.confd, ours) {
			t.Errorf("%s: the image carries its own stack, yet its linker config has our %s: %v", engine, hooks.LDConfPath, s.confd)
		}
		return
	}
	e2e.CheckLent(t, engine, out)
	want, err := e2e.HostSums()
	if err != nil {
		t.Fatal(err)
	}
	if loaded && s.sums["libibverbs.so.1"] != want["libibverbs.so.1"] {
		t.Errorf("%s: the libibverbs.so.1 loaded (%s) is %q, not the host's lent %s", engine, ibv[0], s.sums["libibverbs.so.1"], want["libibverbs.so.1"])
	}
	if len(s.cache["libibverbs.so.1"]) == 0 {
		t.Errorf("%s: the container's ld.so.cache lists no libibverbs.so.1: the lent stack's cache entries were lost", engine)
	}
	if !slices.Contains(s.confd, ours) {
		t.Errorf("%s: the lent stack's %s is missing from the linker config: %v", engine, hooks.LDConfPath, s.confd)
	}
}

// composeImages are the two images every engine runs: with its own RDMA
// stack, and without one.
var composeImages = []e2e.Image{e2e.OwnStack, e2e.Glibc}

// podman: NVIDIA's device first, then ours. Each container is started
// twice: a restart keeps the root both specs' hooks wrote into the first
// time (NVIDIA's cache lists the lent libibverbs, our mount points stay),
// and must come out the same.
func TestCDICompositionPodman(t *testing.T) {
	s := seed002Spec(t)
	nv := e2e.NewNvidiaSpec(t)
	probe := composeProbeBinary(t)
	p := e2e.Podman(t)
	p.Import(t, e2e.OwnStack)
	for _, img := range composeImages {
		t.Run(img.Name, func(t *testing.T) {
			id := e2e.UniqueID("compose-")
			args := append([]string{"create", "--name", id, "--device", nv.Device(), "--device", s.Device("all"),
				"-v", probe + ":" + composeProbeDir + ":ro", img.Ref}, composeCommand()...)
			if _, se, err := p.Podman(args...); err != nil {
				t.Fatalf("%v\n%s", err, se)
			}
			defer p.Podman("rm", "-f", "--time", "0", id)
			for i := 1; i <= 2; i++ {
				so, se, err := p.Podman("start", "--attach", id)
				if err != nil {
					t.Fatalf("start %d: %v\n%s\nhook log:\n%s", i, err, se, e2e.TailFile(s.Node.HookLog, 2000))
				}
				checkCompose(t, fmt.Sprintf("podman start %d", i), img, nv, so)
			}
		})
	}
}

// containerd through ctr, which applies CDI specs on the client side: ours
// first, then NVIDIA's.
func TestCDICompositionContainerd(t *testing.T) {
	s := seed002Spec(t)
	nv := e2e.NewNvidiaSpec(t)
	probe := composeProbeBinary(t)
	c := e2e.Containerd(t)
	for _, img := range composeImages {
		t.Run(img.Name, func(t *testing.T) {
			args := append([]string{"--device", s.Device("mlx5_1"), "--device", nv.Device(),
				"--mount", "type=bind,src=" + probe + ",dst=" + composeProbeDir + ",options=rbind:ro",
				img.Ref, e2e.UniqueID("compose-")}, composeCommand()...)
			so, se, err := c.Run(args...)
			if err != nil {
				t.Fatalf("%v\n%s\nhook log:\n%s", err, se, e2e.TailFile(s.Node.HookLog, 2000))
			}
			checkCompose(t, "ctr", img, nv, so)
		})
	}
}
