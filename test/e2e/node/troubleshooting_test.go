package node

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// troubleshootingDoc is the page whose doctor lines TestTroubleshooting
// checks: each "<!-- doctor: CASE -->" line is followed by a fenced block
// of lines doctor prints for that case ("…" stands for what differs from
// node to node: pids, paths, lists).
const troubleshootingDoc = "docs/troubleshooting.md"

var doctorBlockRE = regexp.MustCompile("(?m)^<!-- doctor: ([a-z0-9-]+) -->\n```[a-z]*\n((?s:.*?))\n```")

// doctorBlocks returns the documented doctor lines by case.
func doctorBlocks(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e2e.RepoRoot(), troubleshootingDoc))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, m := range doctorBlockRE.FindAllStringSubmatch(string(b), -1) {
		if _, dup := out[m[1]]; dup {
			t.Errorf("%s: two blocks for doctor case %s", troubleshootingDoc, m[1])
		}
		out[m[1]] = strings.Split(m[2], "\n")
	}
	return out
}

// lineMatcher turns a documented line into a pattern for one output line:
// "…" matches anything.
func lineMatcher(doc string) *regexp.Regexp {
	parts := strings.Split(doc, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}

// TestTroubleshooting: every failure docs/troubleshooting.md documents
// with a doctor line is set up on a fixture node (or a real image root, or
// a real process), and the real `rdma-cdi doctor` prints that line.
func TestTroubleshooting(t *testing.T) {
	e2e.RequireHostRDMALibs(t)
	seed := e2e.SharedFixtureNode(t, "seed002")
	specFor := func(t *testing.T, node *e2e.FixtureNode) string {
		dir := t.TempDir()
		if _, se, err := node.RDMACDI(t, "--spec-dir", dir, "generate"); err != nil {
			t.Fatalf("generate: %v\n%s", err, se)
		}
		return dir
	}
	doctorOn := func(t *testing.T, node *e2e.FixtureNode, specDir string, args ...string) string {
		out, _ := doctorRun(t, node, specDir, args...) // exits 1 on a FAIL, which these cases are
		return out
	}
	glibc := func(t *testing.T) string { return extractRootfs(t, e2e.Glibc) }
	cases := map[string]func(t *testing.T) string{
		"memlock": func(t *testing.T) string {
			pid := lowMemlockProcess(t, glibc(t))
			return doctorOn(t, seed, specFor(t, seed), "--pid", strconv.Itoa(pid))
		},
		"nccl-sockets": func(t *testing.T) string {
			return doctorOn(t, seed, specFor(t, seed), "--rootfs", glibc(t), "--env", "NCCL_IB_DISABLE=1")
		},
		"gid-index": func(t *testing.T) string {
			return doctorOn(t, seed, specFor(t, seed), "--rootfs", glibc(t), "--env", "NCCL_IB_GID_INDEX=1")
		},
		"nccl-hca": func(t *testing.T) string {
			return doctorOn(t, seed, specFor(t, seed), "--rootfs", glibc(t), "--env", "NCCL_IB_HCA=mlx5_12:1")
		},
		"netns-exclusive": func(t *testing.T) string {
			node := e2e.SharedFixtureNode(t, "ib-ipoib")
			return doctorOn(t, node, specFor(t, node))
		},
		"no-providers": func(t *testing.T) string {
			return doctorOn(t, seed, specFor(t, seed), "--rootfs", extractRootfs(t, e2e.NoProv))
		},
		"host-over-image": func(t *testing.T) string {
			return doctorOn(t, seed, specFor(t, seed), "--rootfs", extractRootfs(t, e2e.OwnStack), "--env", "RDMA_CDI_USER_SPACE=host")
		},
		"no-spec": func(t *testing.T) string {
			return doctorOn(t, seed, t.TempDir())
		},
		"other-node-spec": func(t *testing.T) string {
			return doctorOn(t, seed, specFor(t, e2e.SharedFixtureNode(t, "ib-sriov")))
		},
		// GPUDirect RDMA: gpu-pair, healthy, with one fact broken.
		"gdr-none": func(t *testing.T) string {
			return gpuPairDoctor(t, func(topo *fixture.Topology) { topo.GPUDirect.NVIDIA = "proprietary 535.104.05" })
		},
		"gdr-acs": func(t *testing.T) string {
			return gpuPairDoctor(t, func(topo *fixture.Topology) { topo.Bridges[3].ACSControl = "0x001d" })
		},
		"gdr-iommu": func(t *testing.T) string {
			return gpuPairDoctor(t, func(topo *fixture.Topology) { topo.GPUDirect.IOMMU = "DMA-FQ" })
		},
		// Grey health: seed002 with mlx5_3 in a slot that trained at Gen3
		// x8 and mlx5_6's port at 2X, its peers at 4X.
		"grey-degraded": func(t *testing.T) string {
			node := seedWith(t, func(d *fixture.Device) {
				switch d.Name {
				case "mlx5_3":
					d.PCIe = fixture.PCIeLink{Speed: "8.0 GT/s PCIe", Width: 8}
				case "mlx5_6":
					d.Ports[0].Rate = "50 Gb/sec (2X EDR)"
				}
			})
			return doctorOn(t, node, specFor(t, node))
		},
		// mlx5_7 counts 5000 symbol errors and mlx5_8's link goes down once
		// between doctor's two readings, 1s apart.
		"grey-counters": func(t *testing.T) string {
			node := seedWith(t, func(*fixture.Device) {})
			spec := specFor(t, node)
			counter := func(dev, name string) string {
				return filepath.Join(node.Sys, "class/infiniband", dev, "ports/1/counters", name)
			}
			symbol, downed := counter("mlx5_7", "symbol_error"), counter("mlx5_8", "link_downed")
			firstRead := afterFirstRead(t, symbol, downed)
			go func() {
				<-firstRead
				_ = os.WriteFile(symbol, []byte("5000\n"), 0o644)
				_ = os.WriteFile(downed, []byte("1\n"), 0o644)
			}()
			return doctorOn(t, node, spec, "--sample-interval", "1s")
		},
	}
	blocks := doctorBlocks(t)
	for _, name := range slices.Sorted(maps.Keys(blocks)) {
		if cases[name] == nil {
			t.Errorf("%s documents doctor case %q, which this test does not set up", troubleshootingDoc, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		t.Run(name, func(t *testing.T) {
			want, ok := blocks[name]
			if !ok {
				t.Fatalf("%s has no <!-- doctor: %s --> block", troubleshootingDoc, name)
			}
			out := cases[name](t)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			for _, w := range want {
				if re := lineMatcher(w); !slices.ContainsFunc(lines, re.MatchString) {
					t.Errorf("doctor did not print the documented line\n  %s\nit printed:\n%s", w, out)
				}
			}
		})
	}
}

// gpuPairDoctor runs doctor, with its proc root, on the bundled gpu-pair
// node as break leaves it.
func gpuPairDoctor(t *testing.T, breakIt func(*fixture.Topology)) string {
	t.Helper()
	topo, err := fixture.LoadBundled("gpu-pair")
	if err != nil {
		t.Fatal(err)
	}
	breakIt(&topo)
	node, err := e2e.BuildFixtureNode(t, topo)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := doctorRun(t, node, t.TempDir(), "--proc-root", node.Proc)
	return out
}

// seedWith builds a fixture node of seed002 with each device as edit
// leaves it.
func seedWith(t *testing.T, edit func(*fixture.Device)) *e2e.FixtureNode {
	t.Helper()
	topo, err := fixture.LoadBundled("seed002")
	if err != nil {
		t.Fatal(err)
	}
	for i := range topo.Devices {
		edit(&topo.Devices[i])
	}
	node, err := e2e.BuildFixtureNode(t, topo)
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// afterFirstRead returns a channel closed once each of paths has been
// opened for reading and closed (inotify's IN_CLOSE_NOWRITE): a reader's
// first reading of them is done.
func afterFirstRead(t *testing.T, paths ...string) <-chan struct{} {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	pending := map[int]bool{}
	for _, p := range paths {
		wd, err := unix.InotifyAddWatch(fd, p, unix.IN_CLOSE_NOWRITE)
		if err != nil {
			unix.Close(fd)
			t.Fatal(err)
		}
		pending[wd] = true
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer unix.Close(fd)
		buf := make([]byte, 4096)
		for len(pending) > 0 {
			n, err := unix.Read(fd, buf)
			if err != nil {
				return
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				delete(pending, int(ev.Wd))
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}()
	return done
}

// extractRootfs unpacks img's rootfs into a scratch dir, as an image
// mount shows it.
func extractRootfs(t *testing.T, img e2e.Image) string {
	t.Helper()
	dir := t.TempDir()
	if b, err := exec.Command("tar", "-C", dir, "-xf", img.RootfsTar(t)).CombinedOutput(); err != nil {
		t.Fatalf("extracting %s: %v\n%s", img.Name, err, b)
	}
	return dir
}

// lowMemlockProcess starts a process in root (an image's rootfs) as an
// unprivileged user, so without capabilities, and with memlock 64 KiB: a
// container started without the memlock hook. It returns its pid.
func lowMemlockProcess(t *testing.T, root string) int {
	t.Helper()
	prlimit, chroot := e2e.RequireBinary(t, "prlimit"), e2e.RequireBinary(t, "chroot")
	cmd := exec.Command(prlimit, "--memlock=65536:65536", chroot, "--userspec=65534:65534", root, "/bin/sleep", "300")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// prlimit and chroot exec in turn: wait until the process is sleep.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm"); strings.TrimSpace(string(comm)) == "sleep" {
			return cmd.Process.Pid
		}
		if time.Now().After(deadline) {
			t.Fatal("the low-memlock process did not start")
		}
	}
}
