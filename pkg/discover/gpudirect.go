package discover

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// kernelOptions are the CONFIG_ options GPUDirect RDMA depends on: dma-buf
// itself, the move notifications of dynamic importers, and what mlx5 needs
// to register a dma-buf (user memory, on-demand paging).
var kernelOptions = []string{"DMA_SHARED_BUFFER", "DMABUF_MOVE_NOTIFY", "INFINIBAND_USER_MEM", "INFINIBAND_ON_DEMAND_PAGING", "IOMMU_SUPPORT"}

// nvidiaVendor is NVIDIA's PCI vendor ID as sysfs prints it.
const nvidiaVendor = "0x10de"

// GPUDirect reads the GPUDirect RDMA facts of a node whose RDMA devices
// are devices: sysfs under roots.Sysfs, the driver's version and the
// kernel's under roots.Proc, /boot's kernel config under roots.Host. What
// cannot be read is left empty; the policy says what that means.
func GPUDirect(roots model.Roots, devices []model.Device) model.GPUDirect {
	roots = roots.WithDefaults()
	g := gdrScan{sys: sysfs.Root(roots.Sysfs), rd: sysfs.NewReader(), bridges: map[string]model.ACS{}}
	out := model.GPUDirect{NVIDIA: nvidiaDriver(filepath.Join(roots.Proc, "driver/nvidia/version"))}
	_, err := os.Stat(g.sys.Path("module/nvidia_peermem"))
	out.PeerMem = err == nil
	out.MemoryPeers = dirNames(g.sys.Path("kernel/mm/memory_peers"))
	out.IOMMUUnits = dirNames(g.sys.Path("class/iommu"))
	if b, err := os.ReadFile(filepath.Join(roots.Proc, "sys/kernel/osrelease")); err == nil {
		out.Kernel = strings.TrimSpace(string(b))
	}
	out.KernelConfig, out.KernelConfigSource = kernelConfig(roots, out.Kernel)
	out.NUMA = g.numaNodes()
	out.MIDR = g.midr()
	for _, addr := range g.gpuAddresses() {
		out.GPUs = append(out.GPUs, g.place(addr))
	}
	for _, d := range devices {
		if d.PCIAddress == "" {
			continue
		}
		if _, dup := model.PlaceOf(out.HCAs, d.PCIAddress); !dup {
			out.HCAs = append(out.HCAs, g.place(d.PCIAddress))
		}
	}
	return out
}

type gdrScan struct {
	sys sysfs.Root
	rd  *sysfs.Reader
	// bridges caches each bridge's ACS: HCAs and GPUs share their switches.
	bridges map[string]model.ACS
}

var driverVersionRE = regexp.MustCompile(`\b\d+\.\d+(\.\d+)?\b`)

// nvidiaDriver reads the NVRM line of /proc/driver/nvidia/version:
// "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
// or, for the proprietary module, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  ...".
func nvidiaDriver(path string) model.NVIDIADriver {
	b, err := os.ReadFile(path)
	if err != nil {
		return model.NVIDIADriver{}
	}
	return ParseNVIDIAVersion(b)
}

// ParseNVIDIAVersion reads /proc/driver/nvidia/version's content.
func ParseNVIDIAVersion(b []byte) model.NVIDIADriver {
	d := model.NVIDIADriver{Loaded: true}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "NVRM version:")
		if !ok {
			continue
		}
		d.Open = strings.Contains(rest, "Open Kernel Module")
		d.Version = driverVersionRE.FindString(strings.ReplaceAll(rest, "x86_64", ""))
		break
	}
	return d
}

// kernelConfig reads the options that matter from /proc/config.gz, else
// /boot/config-RELEASE under the host root.
func kernelConfig(roots model.Roots, release string) (map[string]string, string) {
	gz := filepath.Join(roots.Proc, "config.gz")
	if f, err := os.Open(gz); err == nil {
		defer f.Close()
		if zr, err := gzip.NewReader(f); err == nil {
			if data, err := io.ReadAll(io.LimitReader(zr, 16<<20)); err == nil {
				return ParseKernelConfig(data), gz
			}
		}
	}
	if release == "" {
		return nil, ""
	}
	boot := filepath.Join(roots.Host, "boot", "config-"+release)
	data, err := os.ReadFile(boot)
	if err != nil {
		return nil, ""
	}
	return ParseKernelConfig(data), boot
}

// ParseKernelConfig keeps kernelOptions' values ("y", "m") from a kernel
// .config; an option that "is not set" is absent.
func ParseKernelConfig(data []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		name, isConfig := strings.CutPrefix(k, "CONFIG_")
		if ok && isConfig && slices.Contains(kernelOptions, name) && v != "n" {
			out[name] = v
		}
	}
	return out
}

func dirNames(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// gpuAddresses lists NVIDIA display and 3D controllers (class 0x03xxxx).
func (g gdrScan) gpuAddresses() []string {
	var out []string
	for _, addr := range dirNames(g.sys.Path("bus/pci/devices")) {
		dir := g.sys.Path("bus/pci/devices", addr)
		vendor, _ := g.rd.ReadOptional(filepath.Join(dir, "vendor"))
		class, _ := g.rd.ReadOptional(filepath.Join(dir, "class"))
		if vendor == nvidiaVendor && strings.HasPrefix(class, "0x03") {
			out = append(out, addr)
		}
	}
	return out
}

// place resolves the function's sysfs directory to its host bridge and
// the bridges above it, and reads its IOMMU group.
func (g gdrScan) place(addr string) model.PCIPlace {
	p := model.PCIPlace{Address: addr, NUMANode: -1}
	link := g.sys.Path("bus/pci/devices", addr)
	if v, _ := g.rd.ReadOptional(filepath.Join(link, "numa_node")); v != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
			p.NUMANode = n
		}
	}
	real, err := filepath.EvalSymlinks(link)
	if err != nil {
		return p
	}
	devices, err := filepath.EvalSymlinks(g.sys.Path("devices"))
	if err != nil {
		return p
	}
	rel, err := filepath.Rel(devices, real)
	if err != nil {
		return p
	}
	parts := strings.Split(rel, string(filepath.Separator))
	if len(parts) < 2 || !strings.HasPrefix(parts[0], "pci") {
		return p
	}
	p.Root = parts[0]
	for i := 1; i < len(parts)-1; i++ {
		p.Bridges = append(p.Bridges, model.PCIBridge{Address: parts[i], ACS: g.acs(filepath.Join(devices, filepath.Join(parts[:i+1]...)))})
	}
	if group, err := filepath.EvalSymlinks(filepath.Join(real, "iommu_group")); err == nil {
		p.IOMMUGroup = filepath.Base(group)
		p.IOMMUType, _ = g.rd.ReadOptional(filepath.Join(group, "type"))
	}
	return p
}

// acs reads a bridge's config space (all 4096 bytes only as root).
func (g gdrScan) acs(dir string) model.ACS {
	if acs, ok := g.bridges[dir]; ok {
		return acs
	}
	var acs model.ACS
	if config, err := os.ReadFile(filepath.Join(dir, "config")); err != nil {
		acs.Err = err.Error()
	} else {
		acs = sysfs.ParseACS(config)
	}
	g.bridges[dir] = acs
	return acs
}
