// Package sysfs reads kernel sysfs attributes under a configurable root and
// parses the formats the RDMA subsystem uses. Every error names the file.
package sysfs

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Root is a sysfs tree: "/sys" on a live node, a fixture directory in tests.
type Root string

// Path joins rel (e.g. "class/infiniband") under the root.
func (r Root) Path(rel ...string) string {
	return filepath.Join(append([]string{string(r)}, rel...)...)
}

// maxAttrSize bounds one attribute read: sysfs attributes are at most a page.
const maxAttrSize = 4096

// IsAbsent reports errors that mean "this attribute does not exist or is
// empty for this entry": ENOENT, and EINVAL which the kernel returns for
// the types/ndevs attributes of an empty GID slot.
func IsAbsent(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.EINVAL)
}

// LinkBase returns the last element of a symlink's target ("" if path is no link).
func LinkBase(path string) string {
	target, err := os.Readlink(path)
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

// ParseDevNumbers parses a "major:minor" dev attribute.
func ParseDevNumbers(path, s string) (major, minor uint32, err error) {
	maj, min, ok := strings.Cut(s, ":")
	if ok {
		var a, b uint64
		if a, err = strconv.ParseUint(maj, 10, 32); err == nil {
			if b, err = strconv.ParseUint(min, 10, 32); err == nil {
				return uint32(a), uint32(b), nil
			}
		}
	}
	return 0, 0, fmt.Errorf("%s: malformed device number %q, want MAJOR:MINOR", path, s)
}

// ParseGID parses a GID as sysfs prints it: eight groups of four hex digits.
// Anything else (a "::" compression, an embedded IPv4 or a "%zone") is
// refused: the kernel never prints it.
func ParseGID(path, s string) (netip.Addr, error) {
	if !fullGIDForm(s) {
		return netip.Addr{}, fmt.Errorf("%s: malformed GID %q", path, s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%s: malformed GID %q", path, s)
	}
	return a, nil
}

// fullGIDForm reports whether s is "xxxx:xxxx:...:xxxx", 8 groups of 4 hex digits.
func fullGIDForm(s string) bool {
	if len(s) != 39 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i%5 == 4 {
			if c != ':' {
				return false
			}
			continue
		}
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// GIDIsEmpty reports the GID slots that show_gids and the kernel treat as
// unset: all zeros, or the bare fe80:: prefix with no interface id.
func GIDIsEmpty(g netip.Addr) bool {
	b := g.As16()
	for _, x := range b[2:] {
		if x != 0 {
			return false
		}
	}
	return (b[0] == 0 && b[1] == 0) || (b[0] == 0xfe && b[1] == 0x80)
}

// ParseGIDType maps a gid_attrs/types value to a model.GIDType.
func ParseGIDType(path, s string) (model.GIDType, error) {
	switch s {
	case "IB/RoCE v1", "RoCE v1":
		return model.GIDTypeRoCEv1, nil
	case "RoCE v2":
		return model.GIDTypeRoCEv2, nil
	case "IB":
		return model.GIDTypeIB, nil
	case "":
		return model.GIDTypeUnknown, nil
	}
	return model.GIDTypeUnknown, fmt.Errorf("%s: unknown GID type %q", path, s)
}

// ParseNumbered strips the "N: " prefix of state and phys_state attributes
// ("4: ACTIVE" -> "ACTIVE").
func ParseNumbered(path, s string) (string, error) {
	_, name, err := ParseNumberedID(path, s)
	return name, err
}

// ParseNumberedID splits a state or phys_state attribute into its number
// and name ("4: ACTIVE" -> 4, "ACTIVE").
func ParseNumberedID(path, s string) (int, string, error) {
	num, name, ok := strings.Cut(s, ": ")
	id, err := strconv.Atoi(num)
	if !ok || name == "" || err != nil {
		return 0, "", fmt.Errorf("%s: malformed state %q, want \"N: NAME\"", path, s)
	}
	return id, name, nil
}

// ParseRate reads a port's rate attribute ("200 Gb/sec (4X HDR)",
// "2.5 Gb/sec (1X SDR)") in Gb/s.
func ParseRate(rate string) (gbps float64, ok bool) {
	f := strings.Fields(rate)
	if len(f) < 2 || f[1] != "Gb/sec" {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, false
	}
	return v, true
}

// LinkWidth is the lane count in a port's rate attribute ("100 Gb/sec
// (4X EDR)" is 4); 0 when it names none.
func LinkWidth(rate string) int {
	_, rest, ok := strings.Cut(rate, "(")
	if !ok {
		return 0
	}
	lanes, _, ok := strings.Cut(rest, "X")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(lanes))
	if err != nil || n <= 0 {
		return 0
	}
	return n
}
