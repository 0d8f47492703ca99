// Package discover builds a model.Node from a sysfs tree, a /dev tree and a
// network namespace. Live nodes and fixtures go through this same code; only
// the roots differ.
package discover

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/Mellanox/rdmamap"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// Options select the trees discovery reads.
type Options struct {
	// Roots are the sysfs and dev trees and the network namespace
	// (Roots.Host is not read here).
	model.Roots
	// SkipNet leaves netdev state and addresses out (no netlink at all).
	SkipNet bool
	// GIDTables, when set, chooses the devices whose GID tables (and port
	// netdevs, found through them) are read; the others' ports have
	// neither. GID tables are most of discovery's cost, and a hook needs
	// only those of the container's devices. nil reads every table.
	GIDTables func(model.Device) bool
	// GIDScanStop, when set, reads each port's GID table in index order,
	// calls it after each used GID with those read so far, and stops where
	// it returns true: the port's GIDs end there. A hook computing NCCL's
	// pick needs no slot after the one that settles it (nccl.GIDScanStop).
	// nil reads every slot.
	GIDScanStop func(model.Port, []model.GID) bool
	// NCCLOnly reads only what a container's NCCL settings need: device
	// names, uverbs devices (to match a container's nodes), each port's
	// state, link layer, GIDs and netdev, the node type of a device with
	// an Ethernet port (RoCE or iWARP), and each device's driver with,
	// for an EFA (driver efa), its PCI vendor and device ids: what
	// model.Device.IsEFA and EFARDMARead read, by which the hook lends
	// libfabric. Other descriptive attributes (GUIDs, firmware, board, PCI
	// address, NUMA, rate, physical state) and the umad and issm devices
	// are left empty: a hook on every container start should not read
	// them.
	NCCLOnly bool
	// GPUDirect reads the GPUDirect RDMA facts into Node.GPUDirect (GPUs,
	// bridges, the NVIDIA module, the kernel): doctor and the DRA driver.
	GPUDirect bool
}

func (o Options) withDefaults() Options {
	o.Roots = o.Roots.WithDefaults()
	return o
}

// Result is the discovered node plus what was odd but not fatal.
type Result struct {
	Node     model.Node
	Warnings []string
}

// rdmamap keeps its paths in package variables; discovery re-roots them, so
// concurrent discoveries with different roots must take turns.
var rdmamapMu sync.Mutex

func rerootRdmamap(sysRoot, devRoot string) {
	rdmamap.RdmaClassDir = filepath.Join(sysRoot, "class/infiniband")
	rdmamap.RdmaIbUcmDir = filepath.Join(sysRoot, "class/infiniband_cm")
	rdmamap.RdmaUmadDir = filepath.Join(sysRoot, "class/infiniband_mad")
	rdmamap.RdmaUverbsDir = filepath.Join(sysRoot, "class/infiniband_verbs")
	rdmamap.PciDevDir = filepath.Join(sysRoot, "bus/pci/devices")
	rdmamap.AuxDevDir = filepath.Join(sysRoot, "bus/auxiliary/devices")
	rdmamap.RdmaDeviceDir = filepath.Join(devRoot, "infiniband")
	rdmamap.RdmaUcmDevice = filepath.Join(devRoot, "infiniband/rdma_cm")
}

// Discover reads the node. A node without RDMA devices is not an error.
func Discover(opts Options) (Result, error) {
	opts = opts.withDefaults()
	if fi, err := os.Stat(opts.Sysfs); err != nil {
		return Result{}, fmt.Errorf("sysfs root: %w", err)
	} else if !fi.IsDir() {
		return Result{}, fmt.Errorf("sysfs root %s is not a directory", opts.Sysfs)
	}

	rdmamapMu.Lock()
	rerootRdmamap(opts.Sysfs, opts.Dev)
	names := rdmamap.GetRdmaDeviceList()
	s := scan{opts: opts, sys: sysfs.Root(opts.Sysfs), rd: sysfs.NewReader()}
	devices, err := s.devices(names)
	rdmamapMu.Unlock()
	if err != nil {
		return Result{}, err
	}

	node := model.Node{Devices: devices, NetNSMode: s.netnsMode()}
	if !opts.NCCLOnly {
		node.RDMACM = s.rdmaCM()
	}
	s.reportNodeProblems()
	if len(devices) > 0 && node.RDMACM == nil && !opts.NCCLOnly {
		s.warnf("no rdma_cm device (%s): librdmacm will not work in containers", filepath.Join(opts.Dev, "infiniband/rdma_cm"))
	}
	if opts.GPUDirect {
		g := GPUDirect(opts.Roots, devices)
		node.GPUDirect = &g
	}
	if !opts.SkipNet {
		if err := s.addNetwork(&node); err != nil {
			return Result{}, err
		}
	}
	return Result{Node: node, Warnings: s.warnings}, nil
}

type scan struct {
	opts Options
	sys  sysfs.Root
	rd   *sysfs.Reader // every attribute read goes through it
	// charDevs and classDirs are read once per scan (charDevIndex).
	charDevs  map[string][]string
	classDirs map[string][]string
	warnings  []string
	// badNodes groups device nodes by what is wrong with them, so a
	// fixture without mknod or a missing udev rule gives one line, not 30.
	badNodes map[string][]string
}

func (s *scan) nodeProblem(reason, path string) {
	if s.badNodes == nil {
		s.badNodes = map[string][]string{}
	}
	s.badNodes[reason] = append(s.badNodes[reason], filepath.Base(path))
}

func (s *scan) reportNodeProblems() {
	reasons := make([]string, 0, len(s.badNodes))
	for r := range s.badNodes {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		s.warnf("device nodes under %s %s: %s (libibverbs skips a device whose uverbs node is unusable)",
			filepath.Join(s.opts.Dev, "infiniband"), r, strings.Join(s.badNodes[r], " "))
	}
}

func (s *scan) warnf(format string, args ...any) {
	s.warnings = append(s.warnings, fmt.Sprintf(format, args...))
}

// devices reads every named device. A device whose sysfs cannot be read
// (an unreadable attribute, a malformed GID, a link layer the kernel never
// prints) is left out with a warning naming it and the file, and the
// others are served: one odd device must not cost the node all of its
// HCAs. Only when devices failed and none could be read is it an error:
// then there is nothing to serve, and a caller that keeps its last good
// view (watch) should keep it.
func (s *scan) devices(names []string) ([]model.Device, error) {
	model.SortNames(names)
	devices := make([]model.Device, 0, len(names))
	var failed []error
	for _, name := range names {
		dev, err := s.stableDevice(name)
		if errors.Is(err, errVanished) {
			s.warnf("RDMA device %s vanished during the scan; skipped", name)
			continue
		}
		if err != nil {
			err = fmt.Errorf("RDMA device %s: %w", name, err)
			failed = append(failed, err)
			s.warnf("%v; left out, the other devices are served", err)
			continue
		}
		devices = append(devices, dev)
	}
	if len(devices) == 0 && len(failed) > 0 {
		return nil, errors.Join(failed...)
	}
	return devices, nil
}

var errVanished = errors.New("device vanished")

func (s *scan) device(name string) (model.Device, error) {
	dir := s.sys.Path("class/infiniband", name)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return model.Device{}, errVanished
	}
	dev := model.Device{Name: name, NUMANode: -1, Bond: strings.Contains(name, "_bond_")}
	if !s.opts.NCCLOnly {
		if err := s.describe(dir, &dev); err != nil {
			return dev, err
		}
	} else if err := s.efaIDs(dir, &dev); err != nil {
		return dev, err
	}
	ports, err := s.ports(name)
	if err != nil {
		return dev, err
	}
	if len(ports) == 0 {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return dev, errVanished
		}
	}
	dev.Ports = ports
	if s.opts.NCCLOnly && slices.ContainsFunc(ports, func(p model.Port) bool { return p.LinkLayer == model.LinkLayerEthernet }) {
		// An Ethernet port is RoCE's or iWARP's, which only the node
		// type tells apart (model.Device.IWARP).
		if dev.NodeType, err = s.rd.ReadOptional(filepath.Join(dir, "node_type")); err != nil {
			return dev, err
		}
	}
	if err := s.charDevices(&dev); err != nil {
		return dev, err
	}
	if s.opts.GIDTables != nil && !s.opts.GIDTables(dev) {
		return dev, nil
	}
	for i := range dev.Ports {
		if err := s.portGIDs(name, &dev.Ports[i]); err != nil {
			return dev, err
		}
	}
	return dev, nil
}

// describe reads what identifies the device and its hardware.
func (s *scan) describe(dir string, dev *model.Device) error {
	attrs := []struct {
		file string
		dst  *string
	}{
		{"node_guid", &dev.NodeGUID}, {"node_type", &dev.NodeType}, {"fw_ver", &dev.FWVersion},
		{"board_id", &dev.BoardID}, {"hca_type", &dev.HCAType},
	}
	for _, a := range attrs {
		v, err := s.rd.ReadOptional(filepath.Join(dir, a.file))
		if err != nil {
			return err
		}
		*a.dst = v
	}
	return s.pciInfo(dir, dev)
}

// efaIDs is NCCLOnly's part of pciInfo: the driver (a link, read for
// every device) and, for an EFA, the PCI ids that tell its generation.
func (s *scan) efaIDs(devDir string, dev *model.Device) error {
	parent := filepath.Join(devDir, "device")
	dev.Driver = sysfs.LinkBase(filepath.Join(parent, "driver"))
	if dev.Driver != model.DriverEFA {
		return nil
	}
	return s.pciIDs(parent, dev)
}

// pciInfo fills what the parent (PCI) device tells: address, NUMA node,
// driver and, for SR-IOV VFs, the PF.
func (s *scan) pciInfo(devDir string, dev *model.Device) error {
	parent := filepath.Join(devDir, "device")
	dev.PCIAddress = sysfs.LinkBase(parent)
	dev.Driver = sysfs.LinkBase(filepath.Join(parent, "driver"))
	dev.PhysFn = sysfs.LinkBase(filepath.Join(parent, "physfn"))
	dev.PCIeRoot = s.pcieRoot(parent)
	if err := s.pciIDs(parent, dev); err != nil {
		return err
	}
	numVFs, err := s.optionalInt(filepath.Join(parent, "sriov_numvfs"), "VF count")
	if err != nil {
		return err
	}
	if numVFs != nil {
		dev.NumVFs = *numVFs
	}
	numa, err := s.optionalInt(filepath.Join(parent, "numa_node"), "NUMA node")
	if err != nil || numa == nil {
		return err
	}
	dev.NUMANode = *numa
	return nil
}

// pciIDs reads the PCI function's vendor and device ids.
func (s *scan) pciIDs(parent string, dev *model.Device) error {
	for _, id := range []struct {
		file string
		dst  *string
	}{{"vendor", &dev.PCIVendor}, {"device", &dev.PCIDevice}} {
		v, err := s.rd.ReadOptional(filepath.Join(parent, id.file))
		if err != nil {
			return err
		}
		*id.dst = v
	}
	return nil
}

// optionalInt reads a decimal attribute; nil when the file is absent.
func (s *scan) optionalInt(path, what string) (*int, error) {
	v, err := s.rd.ReadOptional(path)
	if err != nil || v == "" {
		return nil, err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return nil, fmt.Errorf("%s: malformed %s %q", path, what, v)
	}
	return &n, nil
}

// pcieRoot is the pciDDDD:BB directory under devices/ that the device's
// parent resolves into; "" for a virtual device (rxe, siw) or none.
func (s *scan) pcieRoot(parent string) string {
	real, err := filepath.EvalSymlinks(parent)
	if err != nil {
		return ""
	}
	devices, err := filepath.EvalSymlinks(s.sys.Path("devices"))
	if err != nil {
		return ""
	}
	rel, err := filepath.Rel(devices, real)
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(rel, string(filepath.Separator))
	if !strings.HasPrefix(first, "pci") {
		return ""
	}
	return first
}

func (s *scan) netnsMode() string {
	v, err := s.rd.Read(s.sys.Path("module/ib_core/parameters/netns_mode"))
	switch {
	case err != nil:
		return ""
	case v == "Y" || v == "1":
		return "shared"
	case v == "N" || v == "0":
		return "exclusive"
	}
	return ""
}
