package node

// End-to-end tests of `rdma-cdi watch` on a fixture node: the real binary,
// a fixture sysfs/dev tree, and a named network namespace holding the
// fixture's netdevs (--netns /run/netns/NAME). The rescan interval is an
// hour, so every rewrite below is caused by an event.

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// watcher is a running `rdma-cdi-agent watch`.
type watcher struct {
	cmd    *exec.Cmd
	log    *e2e.SyncBuffer
	ready  string
	spec   string
	config string
	done   chan error
}

// startWatch builds seed002 with its netdevs in a fresh named netns and
// starts watch on it with NCCL settings delivered as CDI env (so the GID
// index is in the spec bytes).
func startWatch(t *testing.T, extraConfig string) (*watcher, *e2e.FixtureNode, *netlink.Handle) {
	t.Helper()
	e2e.RequireRoot(t)
	node := e2e.NewFixtureNode(t, "seed002")
	h, nsPath := fixture.NewNetNS(t)
	if err := fixture.SetupNetNS(node.Topo, h); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	w := &watcher{log: &e2e.SyncBuffer{}, ready: filepath.Join(dir, "run", "ready"), spec: filepath.Join(dir, "cdi", "rdma.example.com-hca.yaml"),
		config: filepath.Join(dir, "config.toml"), done: make(chan error, 1)}
	cfg := fmt.Sprintf("[hooks]\nlog_file = %q\n[nccl]\ndelivery = \"cdi-env\"\n%s[watch]\nrescan_interval = \"1h\"\ndebounce = \"200ms\"\n",
		node.HookLog, extraConfig)
	if err := os.WriteFile(w.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	w.cmd = exec.Command(e2e.Binary(t, "rdma-cdi-agent"), "--sysfs-root", node.Sys, "--dev-root", node.Dev, "--config", w.config,
		"--netns", nsPath, "--spec-dir", filepath.Dir(w.spec), "--log-level", "debug",
		"watch", "--ready-file", w.ready)
	w.cmd.Stdout, w.cmd.Stderr = w.log, w.log
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.done <- w.cmd.Wait() }()
	t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			_ = w.cmd.Process.Kill()
			<-w.done
		}
		if t.Failed() {
			t.Logf("watch log:\n%s", w.log.String())
		}
	})
	watchWait(t, 15*time.Second, "the ready file", func() bool { _, err := os.Stat(w.ready); return err == nil })
	return w, node, h
}

func watchWait(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *watcher) specData(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(w.spec)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var generationRE = regexp.MustCompile(`msg="generation (\d+)"`)

// generations counts the watcher's Generate calls so far.
func (w *watcher) generations() int {
	return len(generationRE.FindAllString(w.log.String(), -1))
}

// stop sends sig and waits for a clean exit.
func (w *watcher) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := w.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.done:
		if err != nil {
			t.Fatalf("watch exited with %v after %v", err, sig)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("watch did not stop within 10s of %v", sig)
	}
}

// moveGIDs moves every port's GID table entry from index `from` to `to`
// (gids, types, ndevs), leaving an empty slot behind, as the kernel shows
// a table after an address was removed and re-added.
func moveGIDs(t *testing.T, sys string, from, to int) {
	t.Helper()
	ports, err := filepath.Glob(filepath.Join(sys, "class/infiniband/*/ports/*"))
	if err != nil || len(ports) == 0 {
		t.Fatalf("no ports under %s: %v", sys, err)
	}
	moved := 0
	for _, p := range ports {
		gid, err := os.ReadFile(filepath.Join(p, "gids", fmt.Sprint(from)))
		if err != nil || bytes.Equal(bytes.TrimSpace(gid), []byte(fixture.ZeroGID)) {
			continue
		}
		for _, sub := range []string{"gids", "gid_attrs/types", "gid_attrs/ndevs"} {
			src, dst := filepath.Join(p, sub, fmt.Sprint(from)), filepath.Join(p, sub, fmt.Sprint(to))
			data, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, data, 0o444); err != nil {
				t.Fatal(err)
			}
			if sub == "gids" {
				err = os.WriteFile(src, []byte(fixture.ZeroGID+"\n"), 0o444)
			} else {
				err = os.Remove(src)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		moved++
	}
	if moved == 0 {
		t.Fatalf("no GID at index %d to move", from)
	}
}

func addAddr(t *testing.T, h *netlink.Handle, ifname, cidr string) {
	t.Helper()
	link, err := h.LinkByName(ifname)
	if err != nil {
		t.Fatal(err)
	}
	ip, ipnet, err := net.ParseCIDR(cidr)
	if err != nil {
		t.Fatal(err)
	}
	ipnet.IP = ip
	if err := h.AddrAdd(link, &netlink.Addr{IPNet: ipnet}); err != nil {
		t.Fatalf("add %s to %s: %v", cidr, ifname, err)
	}
}

func TestWatchRewritesOnGIDChangeAfterNetlinkEvent(t *testing.T) {
	w, node, h := startWatch(t, "")
	if spec := w.specData(t); !strings.Contains(spec, "NCCL_IB_GID_INDEX=3") {
		t.Fatalf("initial spec has no NCCL_IB_GID_INDEX=3:\n%s", spec)
	}
	moveGIDs(t, node.Sys, 3, 5)
	start := time.Now()
	addAddr(t, h, "eth1", "10.99.0.7/24") // the event; the GID table lives in sysfs
	watchWait(t, 5*time.Second, "NCCL_IB_GID_INDEX=5 in the spec", func() bool {
		b, _ := os.ReadFile(w.spec)
		return strings.Contains(string(b), "NCCL_IB_GID_INDEX=5")
	})
	t.Logf("spec rewritten %s after the address event", time.Since(start).Round(time.Millisecond))
	// Each change is its own log line, written after the spec.
	watchWait(t, 2*time.Second, "the change in the log", func() bool {
		return strings.Contains(w.log.String(), "NCCL_IB_GID_INDEX changed from 3 to 5")
	})
	watchWait(t, 2*time.Second, "the rewrite attributed to the address event", func() bool {
		return strings.Contains(w.log.String(), "address 10.99.0.7/24 added")
	})
	w.stop(t, syscall.SIGTERM)
	if _, err := os.Stat(w.ready); !os.IsNotExist(err) {
		t.Fatalf("ready file still there after SIGTERM: %v", err)
	}
	if _, err := os.Stat(w.spec); err != nil {
		t.Fatalf("spec removed at exit: %v", err)
	}
}

// TestWatchUeventDeviceRemoved removes a device from the fixture and sends
// the kernel-format uevent for it: the spec loses the device.
func TestWatchUeventDeviceRemoved(t *testing.T) {
	w, node, _ := startWatch(t, "")
	if !strings.Contains(w.specData(t), "name: mlx5_8") {
		t.Fatal("initial spec lacks mlx5_8")
	}
	for _, p := range []string{"class/infiniband/mlx5_8", "class/infiniband_verbs/uverbs8"} {
		if err := os.Remove(filepath.Join(node.Sys, p)); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	msg := "remove@/devices/pci0000:00/fixture/infiniband/mlx5_8\x00ACTION=remove\x00DEVPATH=/devices/pci0000:00/fixture/infiniband/mlx5_8\x00SUBSYSTEM=infiniband\x00NAME=mlx5_8\x00"
	if err := unix.Sendto(fd, []byte(msg), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		e2e.Missing(t, "cannot send a uevent here: %v", err)
	}
	watchWait(t, 5*time.Second, "mlx5_8 gone from the spec", func() bool {
		b, _ := os.ReadFile(w.spec)
		return len(b) > 0 && !strings.Contains(string(b), "name: mlx5_8")
	})
	watchWait(t, 2*time.Second, "the log line", func() bool {
		return strings.Contains(w.log.String(), "RDMA device mlx5_8 removed") && strings.Contains(w.log.String(), "infiniband mlx5_8 remove")
	})
}

// TestWatchBurstAndConcurrentReaders: 100 address changes in a burst cause
// a bounded number of generations, and CDI readers refreshing in a loop
// while the spec flips between two contents never see a partial or invalid
// spec.
func TestWatchBurstAndConcurrentReaders(t *testing.T) {
	w, node, h := startWatch(t, "")
	wantDevices := len(node.Topo.Devices) + 1 // + all

	var stop atomic.Bool
	var reads atomic.Int64
	var bad atomic.Value
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				cache, err := cdi.NewCache(cdi.WithSpecDirs(filepath.Dir(w.spec)), cdi.WithAutoRefresh(false))
				if err == nil {
					err = cache.Refresh()
				}
				if err != nil {
					bad.Store(fmt.Sprintf("refresh: %v", err))
					return
				}
				if n := len(cache.ListDevices()); n != wantDevices {
					bad.Store(fmt.Sprintf("%d devices resolved, want %d", n, wantDevices))
					return
				}
				reads.Add(1)
			}
		}()
	}

	// The fixture's veths get their IPv6 link-local addresses a moment
	// after they come up (duplicate address detection), each an event of
	// its own: let those pass before the burst, so that its count is the
	// burst's alone.
	before := w.generations()
	for settled, deadline := time.Now(), time.Now().Add(20*time.Second); time.Since(settled) < 2*time.Second && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if n := w.generations(); n != before {
			before, settled = n, time.Now()
		}
	}
	for i := 0; i < 100; i++ {
		addAddr(t, h, "eth2", fmt.Sprintf("10.98.%d.%d/32", i/200, i%200+1))
	}
	time.Sleep(3 * time.Second) // > MaxDelay (10 × 200ms) + debounce
	burst := w.generations() - before
	if burst < 1 || burst > 3 {
		t.Fatalf("a burst of 100 address changes caused %d generations; want 1..3", burst)
	}

	// Flip the GID tables back and forth: each flip rewrites the spec.
	for i := 0; i < 6; i++ {
		from, to, want := 3, 5, "NCCL_IB_GID_INDEX=5"
		if i%2 == 1 {
			from, to, want = 5, 3, "NCCL_IB_GID_INDEX=3"
		}
		moveGIDs(t, node.Sys, from, to)
		addAddr(t, h, "eth1", fmt.Sprintf("10.97.0.%d/32", i+1))
		watchWait(t, 5*time.Second, want, func() bool {
			b, _ := os.ReadFile(w.spec)
			return strings.Contains(string(b), want)
		})
	}
	stop.Store(true)
	wg.Wait()
	if msg := bad.Load(); msg != nil {
		t.Fatalf("a concurrent CDI reader saw a bad spec: %v", msg)
	}
	if reads.Load() < 20 {
		t.Fatalf("only %d concurrent reads: the reader check proves little", reads.Load())
	}
	// The spec is renamed into place before watch logs the change.
	watchWait(t, 5*time.Second, "6 logged GID index changes", func() bool {
		return strings.Count(w.log.String(), "NCCL_IB_GID_INDEX changed") == 6
	})
	t.Logf("%d concurrent reads, %d generations for the burst", reads.Load(), burst)
}

func TestWatchSIGHUPReloadsConfig(t *testing.T) {
	w, _, _ := startWatch(t, "")
	if strings.Contains(w.specData(t), "NCCL_IB_TC") {
		t.Fatal("NCCL_IB_TC in the spec before reload")
	}
	cfg, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	updated := strings.Replace(string(cfg), "delivery = \"cdi-env\"\n", "delivery = \"cdi-env\"\n[nccl.tunables]\nNCCL_IB_TC = \"160\"\n", 1)
	if err := os.WriteFile(w.config, []byte(updated), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	watchWait(t, 5*time.Second, "NCCL_IB_TC=160 in the spec", func() bool {
		b, _ := os.ReadFile(w.spec)
		return strings.Contains(string(b), "NCCL_IB_TC=160")
	})
	// The spec is renamed into place before watch logs the change.
	watchWait(t, 5*time.Second, "the reload's change in the log", func() bool {
		return strings.Contains(w.log.String(), "NCCL_IB_TC set to 160")
	})
	// A broken config keeps the running one.
	if err := os.WriteFile(w.config, []byte("[nccl]\nbogus = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.cmd.Process.Signal(syscall.SIGHUP)
	watchWait(t, 5*time.Second, "the failed reload", func() bool {
		return strings.Contains(w.log.String(), "keeping the previous configuration")
	})
	if !strings.Contains(w.specData(t), "NCCL_IB_TC=160") {
		t.Fatal("a failed reload changed the spec")
	}

	// A new vendor moves the spec: the new file is written, then the old
	// one removed, so no CDI lookup sees two specs or none.
	moved := strings.Replace(updated, "[nccl]\n", "[cdi]\nvendor = \"example.org\"\n[nccl]\n", 1)
	if err := os.WriteFile(w.config, []byte(moved), 0o644); err != nil {
		t.Fatal(err)
	}
	w.cmd.Process.Signal(syscall.SIGHUP)
	newSpec := filepath.Join(filepath.Dir(w.spec), "example.org-hca.yaml")
	watchWait(t, 5*time.Second, "the spec moved to "+newSpec, func() bool {
		_, errOld := os.Stat(w.spec)
		b, _ := os.ReadFile(newSpec)
		return os.IsNotExist(errOld) && strings.Contains(string(b), "kind: example.org/hca")
	})
	watchWait(t, 2*time.Second, "the move in the log", func() bool {
		return strings.Contains(w.log.String(), "the previous spec "+w.spec+" removed")
	})
	w.stop(t, syscall.SIGINT)
}
