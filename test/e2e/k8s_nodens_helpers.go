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
// node's network namespace); a node started with KubeOptions.NUMANodes shows
// a generated devices/system/node alone (writeNUMATree). /dev is assembled
// the same way, which adds the fixture's /dev/infiniband. Directories that
// must not touch the host (/var/lib/kubelet, /var/log/pods, /etc/cdi, ...)
// are bind mounts of scratch dirs; a missing mount point is made in an
// overlay over its nearest existing ancestor, with the upper dir in scratch.
// Kubelet's kernel tunables (/proc/sys/vm/overcommit_memory, kernel/panic,
// ...) are global; files holding the values kubelet wants are bound over
// them, so kubelet finds nothing to change and the host's sysctls stay
// untouched.

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
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
	SysOwned   map[string]string // dir relative to /sys -> dir shown there alone (KubeOptions.NUMANodes)
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
	if err := m.assemble("/sys", cfg.FixtureSys, cfg.SysOwned); err != nil {
		return fmt.Errorf("/sys: %w", err)
	}
	if err := m.assemble("/dev", cfg.FixtureDev, nil); err != nil {
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
	// Every target exists before the first bind: making one may lay an
	// overlay on a parent (/var/lib for /var/lib/kubelet), which would hide
	// a bind already made below it (/var/lib/cni, when the host has one).
	for _, p := range targets {
		if err := m.ensureDir(p); err != nil {
			return err
		}
	}
	for _, p := range targets {
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
	writable map[string]bool   // our tmpfs and overlay mounts: dirs can be made below them
	owned    map[string]string // of the tree being assembled: rel path -> the dir shown there alone
	seq      int
}

// assemble mounts a tmpfs on target (/sys or /dev) holding the real
// target's entries merged with fixture's; owned dirs (relative to target)
// show the given dirs instead, neither the real nor the fixture's entries.
func (m *nodeMounter) assemble(target, fixture string, owned map[string]string) error {
	m.owned = owned
	defer func() { m.owned = nil }()
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
	for p := range m.owned {
		if dir, base := filepath.Split(p); strings.TrimSuffix(dir, "/") == rel {
			names[base] = true // shown even where neither tree has it
		}
	}
	for name := range names {
		r, f := joinIf(real, name), joinIf(fix, name)
		ri, rerr := lstatIf(r)
		fi, ferr := lstatIf(f)
		sub := strings.TrimPrefix(rel+"/"+name, "/")
		d := filepath.Join(dst, name)
		rdir, fdir := rerr == nil && ri.IsDir(), ferr == nil && fi.IsDir()
		switch {
		case m.owned[sub] != "":
			oi, err := os.Lstat(m.owned[sub])
			if err != nil {
				return err
			}
			if err := place(d, m.owned[sub], oi); err != nil {
				return err
			}
		case ferr == nil && fixtureOwned[sub]:
			if err := place(d, f, fi); err != nil {
				return err
			}
		case (rdir && fdir) || ((rdir || fdir) && m.ownsBelow(sub)):
			// Both trees' dir, or one tree's dir holding an owned one:
			// merged entry by entry (a dir that is not one is left out).
			perm := fs.FileMode(0o755)
			if fdir {
				perm = fi.Mode().Perm()
			} else {
				f = ""
			}
			if rdir {
				perm = ri.Mode().Perm()
			} else {
				r = ""
			}
			if err := os.Mkdir(d, perm); err != nil {
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

// ownsBelow: an owned dir lies below rel.
func (m *nodeMounter) ownsBelow(rel string) bool {
	for p := range m.owned {
		if strings.HasPrefix(p, rel+"/") {
			return true
		}
	}
	return false
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

// writeNUMATree writes dir/devices/system/node as a kernel that found n
// NUMA nodes on this host would show it, for KubeOptions.NUMANodes, and
// returns the SysOwned entry that shows it at /sys/devices/system/node.
// The kubelet's Topology Manager takes its NUMA nodes from cadvisor's
// machine info, which reads (github.com/google/cadvisor/lib v0.60.5,
// utils/sysinfo.GetNodesInfo): the dirs node*[0-9]; in each, the links
// cpu*[0-9], through which each CPU's topology/core_id and
// topology/physical_package_id (and, from cpu/cpuN/cache, its caches) are
// read, the CPU counted only where /sys/devices/system/cpu/online lists it;
// meminfo's "MemTotal: N kB" (required once the file exists); hugepages/
// hugepages-SIZEkB/nr_hugepages and distance (both optional). So the
// host's online CPUs go to the nodes in contiguous blocks, each nodeN/cpuM
// a link to ../../cpu/cpuM as the kernel makes it (the real cpu dir stays:
// its cpuM/nodeK links still name the host's nodes, which cadvisor does not
// read); memory and huge pages are split evenly; distances are 10 local
// and 20 remote; cpulist, cpumap and the has_cpu, has_memory,
// has_normal_memory, online and possible lists are the kernel's formats.
func writeNUMATree(dir string, n int) (map[string]string, error) {
	readList := func(p string) ([]int, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		return parseCPUList(strings.TrimSpace(string(b)))
	}
	online, err := readList("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, err
	}
	possible, err := readList("/sys/devices/system/cpu/possible")
	if err != nil || len(possible) == 0 {
		return nil, fmt.Errorf("/sys/devices/system/cpu/possible: %v", err)
	}
	mem, err := hostMeminfo()
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "devices", "system", "node")
	files := map[string]string{}
	nodes := make([]int, n)
	var withCPU []int
	for i := range nodes {
		nodes[i] = i
		cpus := online[i*len(online)/n : (i+1)*len(online)/n]
		if len(cpus) > 0 {
			withCPU = append(withCPU, i)
		}
		nd := fmt.Sprintf("node%d", i)
		for _, c := range cpus {
			if err := os.MkdirAll(filepath.Join(root, nd), 0o755); err != nil {
				return nil, err
			}
			if err := os.Symlink(fmt.Sprintf("../../cpu/cpu%d", c), filepath.Join(root, nd, fmt.Sprintf("cpu%d", c))); err != nil {
				return nil, err
			}
		}
		files[nd+"/cpulist"] = formatCPUList(cpus)
		files[nd+"/cpumap"] = cpuMask(cpus, possible[len(possible)-1]+1)
		var dist []string
		for j := range n {
			dist = append(dist, map[bool]string{true: "10", false: "20"}[i == j])
		}
		files[nd+"/distance"] = strings.Join(dist, " ")
		share := func(total uint64) uint64 { // node 0 takes the remainder
			if i == 0 {
				return total - total/uint64(n)*uint64(n-1)
			}
			return total / uint64(n)
		}
		total, free := share(mem["MemTotal"]), share(mem["MemFree"])
		hp := []uint64{share(mem["HugePages_Total"]), share(mem["HugePages_Free"]), share(mem["HugePages_Surp"])}
		files[nd+"/meminfo"] = fmt.Sprintf("Node %d MemTotal:       %8d kB\nNode %d MemFree:        %8d kB\nNode %d MemUsed:        %8d kB\n"+
			"Node %d HugePages_Total: %5d\nNode %d HugePages_Free:  %5d\nNode %d HugePages_Surp:  %5d\n",
			i, total, i, free, i, total-free, i, hp[0], i, hp[1], i, hp[2])
		sizes, _ := os.ReadDir("/sys/kernel/mm/hugepages")
		for _, s := range sizes {
			for _, f := range []string{"nr_hugepages", "free_hugepages", "surplus_hugepages"} {
				b, err := os.ReadFile(filepath.Join("/sys/kernel/mm/hugepages", s.Name(), f))
				if err != nil {
					continue
				}
				v, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
				files[filepath.Join(nd, "hugepages", s.Name(), f)] = strconv.FormatUint(share(v), 10)
			}
		}
	}
	all := formatCPUList(nodes)
	for _, f := range []string{"online", "possible", "has_memory", "has_normal_memory"} {
		files[f] = all
	}
	files["has_cpu"] = formatCPUList(withCPU)
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o444); err != nil {
			return nil, err
		}
	}
	return map[string]string{"devices/system/node": root}, nil
}

// hostMeminfo reads /proc/meminfo's numbers (kB, or pages for HugePages_*).
func hostMeminfo() (map[string]uint64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if f := strings.Fields(rest); ok && len(f) > 0 {
			if v, err := strconv.ParseUint(f[0], 10, 64); err == nil {
				out[key] = v
			}
		}
	}
	if out["MemTotal"] == 0 {
		return nil, fmt.Errorf("/proc/meminfo has no MemTotal")
	}
	return out, nil
}

// parseCPUList reads the kernel's list format ("0-3,8,10-11").
func parseCPUList(s string) ([]int, error) {
	var out []int
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

// formatCPUList writes sorted ids in the kernel's list format.
func formatCPUList(ids []int) string {
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(ids[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ids[i], ids[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// cpuMask writes ids as the kernel's cpumap: hex, 32-bit words separated
// by commas, nbits (nr_cpu_ids) wide.
func cpuMask(ids []int, nbits int) string {
	words := make([]uint32, (nbits+31)/32)
	for _, c := range ids {
		words[c/32] |= 1 << (c % 32)
	}
	var parts []string
	for i := len(words) - 1; i >= 0; i-- {
		digits := 8
		if i == len(words)-1 && nbits%32 != 0 {
			digits = (nbits%32 + 3) / 4
		}
		parts = append(parts, fmt.Sprintf("%0*x", digits, words[i]))
	}
	return strings.Join(parts, ",")
}
