package discover

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// sysfsLinkLayerUnknown is what the kernel prints in ports/N/link_layer
// for a port that is neither InfiniBand nor Ethernet (its link_layer_show
// default branch), as on every AWS EFA port.
const sysfsLinkLayerUnknown = "Unknown"

func (s *scan) ports(device string) ([]model.Port, error) {
	// Listed here, not with rdmamap.GetPorts, which takes an unreadable
	// ports directory for a device without ports.
	dir := s.sys.Path("class/infiniband", device, "ports")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ports of %s: %w", device, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	model.SortNames(names)
	ports := make([]model.Port, 0, len(names))
	for _, name := range names {
		num, err := strconv.Atoi(name)
		if err != nil || num < 1 {
			s.warnf("%s: ignoring unexpected port entry %q", device, name)
			continue
		}
		port, err := s.port(device, num)
		if err != nil {
			return nil, err
		}
		ports = append(ports, port)
	}
	return ports, nil
}

func (s *scan) port(device string, num int) (model.Port, error) {
	dir := s.sys.Path("class/infiniband", device, "ports", strconv.Itoa(num))
	p := model.Port{Number: num}
	state, err := s.readNumbered(filepath.Join(dir, "state"))
	if err != nil {
		return p, err
	}
	p.State = model.PortState(state)
	if !s.opts.NCCLOnly {
		if p.PhysState, err = s.readNumbered(filepath.Join(dir, "phys_state")); err != nil {
			return p, err
		}
		if p.Rate, err = s.rd.ReadOptional(filepath.Join(dir, "rate")); err != nil {
			return p, err
		}
		// Read once here, so that no user of the port parses the text.
		if gbps, ok := sysfs.ParseRate(p.Rate); ok {
			p.RateGbps, p.Width = gbps, sysfs.LinkWidth(p.Rate)
		}
	}
	ll, err := s.rd.Read(filepath.Join(dir, "link_layer"))
	if err != nil {
		return p, err
	}
	switch model.LinkLayer(ll) {
	case model.LinkLayerEthernet, model.LinkLayerInfiniBand:
		p.LinkLayer = model.LinkLayer(ll)
	case sysfsLinkLayerUnknown:
		p.LinkLayer = model.LinkLayerUnspecified
	default:
		return p, fmt.Errorf("%s: unknown link layer %q", filepath.Join(dir, "link_layer"), ll)
	}
	return p, nil
}

// portGIDs reads the port's GID table and, from it, the port's netdev.
func (s *scan) portGIDs(device string, p *model.Port) error {
	dir := s.sys.Path("class/infiniband", device, "ports", strconv.Itoa(p.Number))
	var err error
	var stop func([]model.GID) bool
	if s.opts.GIDScanStop != nil {
		stop = func(read []model.GID) bool { return s.opts.GIDScanStop(*p, read) }
	}
	if p.GIDs, p.GIDTableLen, err = s.readGIDTable(dir, stop); err != nil {
		return err
	}
	p.NetDev = s.portNetDev(device, *p)
	return nil
}

func (s *scan) readNumbered(path string) (string, error) {
	v, err := s.rd.Read(path)
	if err != nil {
		return "", err
	}
	return sysfs.ParseNumbered(path, v)
}

// readGIDTable reads every non-empty GID with its type and netdev, or with
// stop, those up to where stop says enough (readGIDsUntil). Empty slots
// cost one read; their types/ndevs attributes fail with EINVAL on a real
// kernel, so they are never opened.
func (s *scan) readGIDTable(portDir string, stop func([]model.GID) bool) ([]model.GID, int, error) {
	if stop != nil {
		return readGIDsUntil(s.rd, portDir, stop)
	}
	gidDir := filepath.Join(portDir, "gids")
	entries, err := os.ReadDir(gidDir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	tableLen := 0
	slots := make([]int, 0, len(entries))
	for _, e := range entries {
		idx, err := strconv.Atoi(e.Name())
		if err != nil || idx < 0 {
			continue
		}
		tableLen = max(tableLen, idx+1)
		slots = append(slots, idx)
	}
	gids, err := readGIDSlots(s.rd, portDir, slots)
	if err != nil {
		return nil, 0, err
	}
	sortGIDs(gids)
	return gids, tableLen, nil
}

// readGIDsUntil reads slots 0, 1, ... in order, up to where stop, given the
// GIDs read so far, says enough, or to the first missing slot (the table's
// end). It does not list the table: listing 255 entries costs more than the
// few slots a stop usually needs. The table length it returns is the slots
// it went through.
func readGIDsUntil(rd *sysfs.Reader, portDir string, stop func([]model.GID) bool) ([]model.GID, int, error) {
	port, err := rd.OpenDir(portDir)
	if err != nil {
		return nil, 0, err
	}
	defer port.Close()
	var gids []model.GID
	for idx := 0; ; idx++ {
		gid, slot, err := readGID(port, idx)
		switch {
		case err != nil:
			return nil, 0, err
		case slot == slotAbsent:
			return gids, idx, nil
		case slot == slotUsed:
			gids = append(gids, gid)
			if stop(gids) {
				return gids, idx + 1, nil
			}
		}
	}
}

// minSlotsPerWorker keeps small tables on one goroutine: below it, starting
// a worker costs more than the reads it takes over.
const minSlotsPerWorker = 64

// readGIDSlots reads the given slots of a port's GID table. A GID table is
// the bulk of discovery (a 255-slot table is 255 open/read/close rounds in
// the kernel), and the slots are independent, so a large table is split
// across GOMAXPROCS workers, each with its own Reader. The error of the
// lowest failing chunk is returned, so the same tree gives the same error.
func readGIDSlots(rd *sysfs.Reader, portDir string, slots []int) ([]model.GID, error) {
	workers := min(runtime.GOMAXPROCS(0), len(slots)/minSlotsPerWorker)
	if workers <= 1 {
		return readGIDChunk(rd, portDir, slots)
	}
	chunk := (len(slots) + workers - 1) / workers
	results := make([][]model.GID, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		part := slots[min(w*chunk, len(slots)):min((w+1)*chunk, len(slots))]
		reader := rd
		if w > 0 {
			reader = sysfs.NewReader()
		}
		wg.Go(func() { results[w], errs[w] = readGIDChunk(reader, portDir, part) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return slices.Concat(results...), nil
}

func readGIDChunk(rd *sysfs.Reader, portDir string, slots []int) ([]model.GID, error) {
	port, err := rd.OpenDir(portDir)
	if err != nil {
		return nil, err
	}
	defer port.Close()
	var gids []model.GID
	for _, idx := range slots {
		gid, slot, err := readGID(port, idx)
		if err != nil {
			return nil, err
		}
		if slot == slotUsed {
			gids = append(gids, gid)
		}
	}
	return gids, nil
}

// Empty slots as the kernel prints them. Most of a GID table is empty, and
// these are recognized without parsing.
var (
	zeroGIDText = []byte("0000:0000:0000:0000:0000:0000:0000:0000")
	fe80GIDText = []byte("fe80:0000:0000:0000:0000:0000:0000:0000")
)

// slotState is what a GID table slot held when read.
type slotState int

const (
	// slotAbsent: no such slot (past the table's end, or removed since
	// the table was listed).
	slotAbsent slotState = iota
	slotEmpty
	slotUsed
)

// readGID reads slot idx of the port's GID table, relative to the port
// directory: one read for an empty slot, three for a used one.
func readGID(port *sysfs.Dir, idx int) (model.GID, slotState, error) {
	i := strconv.Itoa(idx)
	raw, err := port.ReadBytes("gids/" + i)
	if errors.Is(err, fs.ErrNotExist) {
		return model.GID{}, slotAbsent, nil
	}
	if sysfs.IsAbsent(err) { // EINVAL: an entry the kernel will not show
		return model.GID{}, slotEmpty, nil
	}
	if err != nil {
		return model.GID{}, slotAbsent, err
	}
	if bytes.Equal(raw, zeroGIDText) || bytes.Equal(raw, fe80GIDText) {
		return model.GID{}, slotEmpty, nil
	}
	addr, err := sysfs.ParseGID(port.Path()+"/gids/"+i, string(raw))
	if err != nil || sysfs.GIDIsEmpty(addr) {
		return model.GID{}, slotEmpty, err
	}
	typ, err := port.ReadOptional("gid_attrs/types/" + i)
	if err != nil {
		return model.GID{}, slotEmpty, err
	}
	gidType, err := sysfs.ParseGIDType(port.Path()+"/gid_attrs/types/"+i, typ)
	if err != nil {
		return model.GID{}, slotEmpty, err
	}
	ndev, err := port.ReadOptional("gid_attrs/ndevs/" + i)
	if err != nil {
		return model.GID{}, slotEmpty, err
	}
	return model.GID{Index: idx, GID: addr, Type: gidType, NetDev: ndev}, slotUsed, nil
}

// portNetDev finds the netdev of a port as ibdev2netdev does: for RoCE the
// GID table's ndevs, for IPoIB the netdev whose hardware address ends in the
// port GUID, in both cases among the netdevs of the device's PCI function.
func (s *scan) portNetDev(device string, p model.Port) string {
	for _, g := range p.GIDs {
		if g.NetDev != "" {
			return g.NetDev
		}
	}
	netDir := s.sys.Path("class/infiniband", device, "device/net")
	entries, err := os.ReadDir(netDir)
	if err != nil {
		return ""
	}
	if p.LinkLayer == model.LinkLayerInfiniBand && len(p.GIDs) > 0 {
		guid := p.GIDs[0].GID.As16()
		for _, e := range entries {
			if s.hwAddrEndsWith(filepath.Join(netDir, e.Name(), "address"), guid[8:]) {
				return e.Name()
			}
		}
		return ""
	}
	for _, e := range entries {
		devPort, _ := s.rd.Read(filepath.Join(netDir, e.Name(), "dev_port"))
		if devPort == strconv.Itoa(p.Number-1) {
			return e.Name()
		}
	}
	return ""
}

func (s *scan) hwAddrEndsWith(path string, suffix []byte) bool {
	v, err := s.rd.Read(path)
	if err != nil {
		return false
	}
	raw, err := hex.DecodeString(strings.ReplaceAll(v, ":", ""))
	return err == nil && bytes.HasSuffix(raw, suffix)
}
