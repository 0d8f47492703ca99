package sysfs

import (
	"net/netip"
	"os"
	"path/filepath"
)

// HasGID reports whether a port of ibdev under root lists addr (an IPv4
// address in its IPv4-mapped form, as RoCE GIDs hold it) in its GID table.
// Unreadable slots count as not listing it.
func HasGID(root Root, ibdev string, addr netip.Addr) bool {
	want := netip.AddrFrom16(addr.As16())
	rd := NewReader()
	ports, _ := os.ReadDir(root.Path("class/infiniband", ibdev, "ports"))
	for _, port := range ports {
		dir := root.Path("class/infiniband", ibdev, "ports", port.Name(), "gids")
		slots, _ := os.ReadDir(dir)
		for _, slot := range slots {
			s, err := rd.Read(filepath.Join(dir, slot.Name()))
			if err != nil {
				continue
			}
			if g, err := ParseGID(dir, s); err == nil && g == want {
				return true
			}
		}
	}
	return false
}
