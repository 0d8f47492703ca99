package e2e

// The node namespace of a KubeEnv: a private mount namespace and a private
// network namespace in which a fixture node looks like the real host.
//
// How: KubeNode starts this test binary again (/proc/self/exe) with
// CLONE_NEWNS|CLONE_NEWNET and nodeInitEnv set. The package's init() sees
// the variable before any test runs and calls nodeInitMain instead: it makes
// every mount private (nothing propagates back to the host), assembles /sys
// and /dev, mounts the private dirs, makes / rshared again (inside the new
// namespace only: kubelet wants HostToContainer volumes on a shared or slave
// mount), prints "ready" and then holds the namespaces until its stdin
// closes. The daemons are started by the test process with
// `nsenter --target HOLDER --mount --net`, so their logs, restarts and
// cleanup stay in the test process. A process in the namespace keeps it
// alive; when the last one exits the kernel drops every mount with it.
//
// Why not bind the fixture's class dirs over the real /sys: /sys/class/infiniband
// does not exist on these kernels, and sysfs refuses new mount points
// ("mount point does not exist"). So /sys becomes a tmpfs whose entries are
// bind mounts of the real /sys entries (cgroups under /sys/fs/cgroup, cpu and
// node topology for cadvisor keep working) merged with the fixture's entries:
// where both have a directory (class, bus/pci/drivers, devices/pci0000:00...)
// the merge recurses, and where both have a file the fixture wins. The
// fixture alone provides class/net (its netdevs are the ones that exist in the
// node's network namespace). /dev is assembled the same way, which adds the
// fixture's /dev/infiniband. Directories that must not touch the host
// (/var/lib/kubelet, /var/log/pods, /etc/cdi, ...) are bind mounts of scratch
// dirs; a missing mount point is made in an overlay over its nearest existing
// ancestor, with the upper dir in scratch. Kubelet's kernel tunables
// (/proc/sys/vm/overcommit_memory, kernel/panic, ...) are global; files
// holding the values kubelet wants are bound over them, so kubelet finds
// nothing to change and the host's sysctls stay untouched.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// nodeInitEnv carries the JSON nodeInitConfig to the re-executed binary.
const nodeInitEnv = "RDMA_CDI_E2E_NODE_INIT"

// nodeInitConfig says what the node namespace holds.
type nodeInitConfig struct {
	Scratch    string            // scratch dir of the node (staging, overlay uppers, shadows)
	FixtureSys string            // fixture's sysfs tree, merged into /sys
	FixtureDev string            // fixture's /dev tree, merged into /dev
	Tmpfs      []string          // fresh tmpfs mounts, e.g. /run
	Dirs       []string          // dirs made after the tmpfs mounts, e.g. /run/cdi
	Binds      map[string]string // node path -> scratch dir bound over it
	Shadows    map[string]string // file (e.g. /proc/sys/kernel/panic) -> content bound over it
}

// fixtureOwned are the dirs (relative to /sys) taken from the fixture alone,
// without the host's entries: the network namespace has the fixture's
// netdevs only.
var fixtureOwned = map[string]bool{"class/net": true, "devices/virtual/net": true}

func init() {
	if cfg := os.Getenv(nodeInitEnv); cfg != "" {
		if err := nodeInitMain(cfg); err != nil {
			fmt.Fprintf(os.Stdout, "node init: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// nodeInitMain runs in the re-executed binary, already in the new mount and
// network namespaces.
func nodeInitMain(cfgJSON string) error {
	var cfg nodeInitConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		return err
	}
	if err := setupNodeMounts(cfg); err != nil {
		return err
	}
	fmt.Fprintln(os.Stdout, "ready")
	// Hold the namespaces until the test process closes our stdin (or dies).
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

func setupNodeMounts(cfg nodeInitConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / rprivate: %w", err)
	}
	m := &nodeMounter{scratch: cfg.Scratch, writable: map[string]bool{}}
	if err := m.assemble("/sys", cfg.FixtureSys); err != nil {
		return fmt.Errorf("/sys: %w", err)
	}
	if err := m.assemble("/dev", cfg.FixtureDev); err != nil {
		return fmt.Errorf("/dev: %w", err)
	}
	for _, p := range cfg.Tmpfs {
		if err := m.ensureDir(p); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
			return fmt.Errorf("tmpfs on %s: %w", p, err)
		}
		m.writable[p] = true
	}
	for _, p := range cfg.Dirs {
		if err := m.ensureDir(p); err != nil {
			return err
		}
	}
	targets := make([]string, 0, len(cfg.Binds))
	for p := range cfg.Binds {
		targets = append(targets, p)
	}
	sort.Strings(targets) // parents first
	for _, p := range targets {
		if err := m.ensureDir(p); err != nil {
			return err
		}
		if err := unix.Mount(cfg.Binds[p], p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", cfg.Binds[p], p, err)
		}
	}
	i := 0
	for p, content := range cfg.Shadows {
		if _, err := os.Stat(p); err != nil {
			continue // a kernel without this tunable
		}
		i++
		f := filepath.Join(cfg.Scratch, fmt.Sprintf("shadow-%d", i))
		if err := os.WriteFile(f, []byte(content+"\n"), 0o644); err != nil {
			return err
		}
		if err := unix.Mount(f, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", f, p, err)
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make / rshared: %w", err)
	}
	return nil
}

type nodeMounter struct {
	scratch  string
	writable map[string]bool // our tmpfs and overlay mounts: dirs can be made below them
	seq      int
}

// assemble mounts a tmpfs on target (/sys or /dev) holding the real
// target's entries merged with fixture's.
func (m *nodeMounter) assemble(target, fixture string) error {
	m.seq++
	stage := filepath.Join(m.scratch, fmt.Sprintf("stage-%d", m.seq))
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(target, stage, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("rbind %s on %s: %w", target, stage, err)
	}
	if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID, "mode=0755"); err != nil {
		return fmt.Errorf("tmpfs on %s: %w", target, err)
	}
	if err := m.merge(target, stage, fixture, ""); err != nil {
		return err
	}
	// The staging copy goes: its cgroup mounts must not show up twice in
	// mountinfo (runc and cadvisor look cgroup hierarchies up there).
	return unix.Unmount(stage, unix.MNT_DETACH)
}

// merge fills dst (an empty dir on our tmpfs) from real and fix (either may
// be "" or missing); rel is dst's path below the assembled root.
func (m *nodeMounter) merge(dst, real, fix, rel string) error {
	names := map[string]bool{}
	for _, dir := range []string{real, fix} {
		if dir == "" {
			continue
		}
		ents, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		for _, e := range ents {
			names[e.Name()] = true
		}
	}
	for name := range names {
		r, f := joinIf(real, name), joinIf(fix, name)
		ri, rerr := lstatIf(r)
		fi, ferr := lstatIf(f)
		sub := strings.TrimPrefix(rel+"/"+name, "/")
		d := filepath.Join(dst, name)
		switch {
		case ferr == nil && fixtureOwned[sub]:
			if err := place(d, f, fi); err != nil {
				return err
			}
		case rerr == nil && ferr == nil && ri.IsDir() && fi.IsDir():
			if err := os.Mkdir(d, ri.Mode().Perm()); err != nil {
				return err
			}
			if err := m.merge(d, r, f, sub); err != nil {
				return err
			}
		case ferr == nil:
			if err := place(d, f, fi); err != nil {
				return err
			}
		case rerr == nil:
			if err := place(d, r, ri); err != nil {
				return err
			}
		}
	}
	return nil
}

func joinIf(dir, name string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, name)
}

func lstatIf(p string) (os.FileInfo, error) {
	if p == "" {
		return nil, os.ErrNotExist
	}
	return os.Lstat(p)
}

// place makes dst show src: a copy of a symlink, a recursive bind mount of
// a dir, a bind mount of anything else (sysfs attributes, device nodes).
func place(dst, src string, info os.FileInfo) error {
	switch {
	case info.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case info.IsDir():
		if err := os.Mkdir(dst, info.Mode().Perm()); err != nil {
			return err
		}
		if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("rbind %s on %s: %w", src, dst, err)
		}
	default:
		if err := os.WriteFile(dst, nil, 0o644); err != nil {
			return err
		}
		if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", src, dst, err)
		}
	}
	return nil
}

// ensureDir makes dir exist as a mount point without touching the host:
// below one of our own mounts it is simply made; otherwise its nearest
// existing ancestor first gets an overlay (upper dir in scratch).
func (m *nodeMounter) ensureDir(dir string) error {
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return nil
	}
	anc := filepath.Dir(dir)
	for {
		if _, err := os.Stat(anc); err == nil {
			break
		}
		anc = filepath.Dir(anc)
	}
	// /var/run is /run: the check and the overlay are about the real dir.
	anc, err := filepath.EvalSymlinks(anc)
	if err != nil {
		return err
	}
	if !m.underWritable(anc) {
		m.seq++
		base := filepath.Join(m.scratch, fmt.Sprintf("overlay-%d", m.seq))
		upper, work := filepath.Join(base, "upper"), filepath.Join(base, "work")
		for _, d := range []string{upper, work} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", anc, upper, work)
		if err := unix.Mount("overlay", anc, "overlay", 0, opts); err != nil {
			return fmt.Errorf("overlay on %s: %w", anc, err)
		}
		m.writable[anc] = true
	}
	return os.MkdirAll(dir, 0o755)
}

func (m *nodeMounter) underWritable(p string) bool {
	for w := range m.writable {
		if p == w || strings.HasPrefix(p, w+"/") {
			return true
		}
	}
	return false
}
