package watch

import (
	"bytes"
	"slices"
	"strings"
)

// Uevent is one kernel uevent (NETLINK_KOBJECT_UEVENT, group 1).
type Uevent struct {
	Action    string // add, remove, change, move, online, offline, bind, unbind
	DevPath   string // /devices/pci0000:00/.../infiniband/mlx5_0
	Subsystem string
	Vars      map[string]string
}

// DefaultUeventSubsystems are the subsystems whose uevents trigger a rescan:
// RDMA devices, their uverbs and umad/issm char devices.
var DefaultUeventSubsystems = []string{"infiniband", "infiniband_verbs", "infiniband_mad"}

// ParseUevent decodes a kernel uevent datagram: "ACTION@DEVPATH\0KEY=VALUE\0...".
// ok is false for anything else (udev's "libudev" messages included).
func ParseUevent(msg []byte) (Uevent, bool) {
	parts := bytes.Split(msg, []byte{0})
	if len(parts) < 2 {
		return Uevent{}, false
	}
	action, devpath, found := strings.Cut(string(parts[0]), "@")
	if !found || action == "" || !strings.HasPrefix(devpath, "/") {
		return Uevent{}, false
	}
	ev := Uevent{Action: action, DevPath: devpath, Vars: map[string]string{}}
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(string(p), "=")
		if !ok || k == "" {
			continue
		}
		ev.Vars[k] = v
	}
	if a := ev.Vars["ACTION"]; a != "" {
		ev.Action = a
	}
	if d := ev.Vars["DEVPATH"]; d != "" {
		ev.DevPath = d
	}
	ev.Subsystem = ev.Vars["SUBSYSTEM"]
	return ev, true
}

// Relevant reports whether the uevent belongs to one of subsystems.
func (u Uevent) Relevant(subsystems []string) bool {
	return slices.Contains(subsystems, u.Subsystem)
}

// Name is the last element of the device path (mlx5_0, uverbs0, umad1).
func (u Uevent) Name() string {
	if n := u.Vars["DEVNAME"]; n != "" {
		return n
	}
	return u.DevPath[strings.LastIndexByte(u.DevPath, '/')+1:]
}
