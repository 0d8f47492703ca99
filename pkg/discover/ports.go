package discover

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/Mellanox/rdmamap"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

func (s *scan) ports(device string) ([]model.Port, error) {
	names := rdmamap.GetPorts(device)
	SortNatural(names)
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
	var err error
	if p.State, err = readNumbered(filepath.Join(dir, "state")); err != nil {
		return p, err
	}
	if p.PhysState, err = readNumbered(filepath.Join(dir, "phys_state")); err != nil {
		return p, err
	}
	ll, err := sysfs.ReadAttr(filepath.Join(dir, "link_layer"))
	if err != nil {
		return p, err
	}
	switch model.LinkLayer(ll) {
	case model.LinkLayerEthernet, model.LinkLayerInfiniBand:
		p.LinkLayer = model.LinkLayer(ll)
	default:
		return p, fmt.Errorf("%s: unknown link layer %q", filepath.Join(dir, "link_layer"), ll)
	}
	if p.Rate, err = sysfs.ReadOptional(filepath.Join(dir, "rate")); err != nil {
		return p, err
	}
	if p.GIDs, p.GIDTableLen, err = readGIDTable(dir); err != nil {
		return p, err
	}
	p.NetDev = s.portNetDev(device, p)
	return p, nil
}

func readNumbered(path string) (string, error) {
	v, err := sysfs.ReadAttr(path)
	if err != nil {
		return "", err
	}
	return sysfs.ParseNumbered(path, v)
}

// readGIDTable reads every non-empty GID with its type and netdev. Empty
// slots cost one read; their types/ndevs attributes fail with EINVAL on a
// real kernel, so they are never opened.
func readGIDTable(portDir string) ([]model.GID, int, error) {
	gidDir := filepath.Join(portDir, "gids")
	entries, err := os.ReadDir(gidDir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	tableLen := 0
	var gids []model.GID
	for _, e := range entries {
		idx, err := strconv.Atoi(e.Name())
		if err != nil || idx < 0 {
			continue
		}
		tableLen = max(tableLen, idx+1)
		gid, ok, err := readGID(portDir, idx)
		if err != nil {
			return nil, 0, err
		}
		if ok {
			gids = append(gids, gid)
		}
	}
	sortGIDs(gids)
	return gids, tableLen, nil
}

func readGID(portDir string, idx int) (model.GID, bool, error) {
	i := strconv.Itoa(idx)
	path := filepath.Join(portDir, "gids", i)
	raw, err := sysfs.ReadAttr(path)
	if sysfs.IsAbsent(err) {
		return model.GID{}, false, nil // slot removed between listing and reading
	}
	if err != nil {
		return model.GID{}, false, err
	}
	addr, err := sysfs.ParseGID(path, raw)
	if err != nil || sysfs.GIDIsEmpty(addr) {
		return model.GID{}, false, err
	}
	typePath := filepath.Join(portDir, "gid_attrs/types", i)
	typ, err := sysfs.ReadOptional(typePath)
	if err != nil {
		return model.GID{}, false, err
	}
	gidType, err := sysfs.ParseGIDType(typePath, typ)
	if err != nil {
		return model.GID{}, false, err
	}
	ndev, err := sysfs.ReadOptional(filepath.Join(portDir, "gid_attrs/ndevs", i))
	if err != nil {
		return model.GID{}, false, err
	}
	return model.GID{Index: idx, GID: addr, Type: gidType, NetDev: ndev}, true, nil
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
			if hwAddrEndsWith(filepath.Join(netDir, e.Name(), "address"), guid[8:]) {
				return e.Name()
			}
		}
		return ""
	}
	for _, e := range entries {
		devPort, _ := sysfs.ReadAttr(filepath.Join(netDir, e.Name(), "dev_port"))
		if devPort == strconv.Itoa(p.Number-1) {
			return e.Name()
		}
	}
	return ""
}

func hwAddrEndsWith(path string, suffix []byte) bool {
	v, err := sysfs.ReadAttr(path)
	if err != nil {
		return false
	}
	raw, err := hex.DecodeString(strings.ReplaceAll(v, ":", ""))
	return err == nil && bytes.HasSuffix(raw, suffix)
}
