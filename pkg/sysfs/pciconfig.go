package sysfs

import (
	"encoding/binary"
	"fmt"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// PCI Express extended configuration space, as a function's sysfs config
// file holds it: 4096 bytes for root, the first 64 for anyone else.
const (
	// extCapStart is where the extended capability list begins.
	extCapStart = 0x100
	// ExtCapACS is the Access Control Services extended capability ID.
	ExtCapACS = 0x000d
	// configSpaceSize is the size of a PCIe function's config space.
	configSpaceSize = 4096
)

// FindExtCap walks the extended capability list of config (a config file's
// bytes) and returns the offset of the capability with id. found is false
// when the list does not hold it; err says why the list could not be
// walked (too short: read without root; a loop or an offset out of range).
// Each header is 32 bits, little endian: the ID in bits 15:0, the version
// in 19:16 and the next header's offset in 31:20 (0 ends the list).
func FindExtCap(config []byte, id uint16) (offset int, found bool, err error) {
	if len(config) < extCapStart+4 {
		return 0, false, fmt.Errorf("config space holds %d bytes, the extended capabilities start at 0x%x (reading them needs root)", len(config), extCapStart)
	}
	seen := map[int]bool{}
	for off := extCapStart; off != 0; {
		if off < extCapStart || off+4 > len(config) {
			return 0, false, fmt.Errorf("extended capability at 0x%x is outside the config space", off)
		}
		if seen[off] {
			return 0, false, fmt.Errorf("extended capability list loops at 0x%x", off)
		}
		seen[off] = true
		header := binary.LittleEndian.Uint32(config[off:])
		if header == 0 || header == 0xffffffff {
			// No capability at all (0) or a function that is gone (all ones).
			return 0, false, nil
		}
		if uint16(header) == id {
			return off, true, nil
		}
		off = int(header>>20) &^ 3 // the low two bits are reserved
	}
	return 0, false, nil
}

// ParseACS reads the ACS capability of a bridge's config space: its
// capability register at +4, its control register at +6.
func ParseACS(config []byte) model.ACS {
	off, found, err := FindExtCap(config, ExtCapACS)
	if err != nil {
		return model.ACS{Readable: len(config) > extCapStart, Err: err.Error()}
	}
	acs := model.ACS{Readable: true, Present: found}
	if !found {
		return acs
	}
	if off+8 > len(config) {
		acs.Present, acs.Err = false, fmt.Sprintf("ACS capability at 0x%x is cut short", off)
		return acs
	}
	acs.Capability = binary.LittleEndian.Uint16(config[off+4:])
	acs.Control = binary.LittleEndian.Uint16(config[off+6:])
	return acs
}

// ConfigSpace returns a PCI function's config space with the given IDs and
// class and, when acsControl is not nil, an ACS extended capability at
// 0x100 whose control register holds it (capability register: every
// control the spec defines for a downstream port). It is what a bridge's
// config file holds, for fixtures and tests.
func ConfigSpace(vendor, device uint16, class uint32, acsControl *uint16) []byte {
	b := make([]byte, configSpaceSize)
	binary.LittleEndian.PutUint16(b[0x00:], vendor)
	binary.LittleEndian.PutUint16(b[0x02:], device)
	binary.LittleEndian.PutUint32(b[0x08:], class<<8) // revision 0 in the low byte
	if class>>8 == 0x0604 {
		b[0x0e] = 0x01 // header type 1: a PCI-to-PCI bridge
	}
	if acsControl != nil {
		const version = 1
		binary.LittleEndian.PutUint32(b[extCapStart:], ExtCapACS|version<<16) // next 0: the last one
		binary.LittleEndian.PutUint16(b[extCapStart+4:], 0x005f)
		binary.LittleEndian.PutUint16(b[extCapStart+6:], *acsControl)
	}
	return b
}
