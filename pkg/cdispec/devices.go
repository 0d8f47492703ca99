package cdispec

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// selectDevices returns the selected devices in natural name order
// (mlx5_2 before mlx5_10), so output is stable whatever order discovery
// found them in. Devices without any char device are dropped with a
// warning: CDI rejects a device with empty edits, and libibverbs cannot use
// a device without its uverbs node anyway.
func selectDevices(node model.Node, wanted []string) ([]model.Device, []string, error) {
	if len(node.Devices) == 0 {
		return nil, nil, ErrNoDevices
	}
	byName, err := indexDevices(node.Devices)
	if err != nil {
		return nil, nil, err
	}
	names, err := selectedNames(byName, wanted)
	if err != nil {
		return nil, nil, err
	}
	out := make([]model.Device, 0, len(names))
	var warnings []string
	for _, name := range names {
		d := node.Devices[byName[name]]
		if !hasCharDevices(d) {
			warnings = append(warnings, fmt.Sprintf("RDMA device %s has no char devices (no uverbs node); left out of the spec", name))
			continue
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, warnings, ErrNoDevices
	}
	return out, warnings, nil
}

func hasCharDevices(d model.Device) bool {
	if d.Verbs != nil {
		return true
	}
	for _, p := range d.Ports {
		if p.Umad != nil || p.Issm != nil {
			return true
		}
	}
	return false
}

// indexDevices maps names to positions in devices, refusing names CDI
// cannot carry.
func indexDevices(devices []model.Device) (map[string]int, error) {
	byName := make(map[string]int, len(devices))
	for i, d := range devices {
		if d.Name == apis.AllDevices {
			return nil, fmt.Errorf("RDMA device named %q clashes with the CDI device %q", d.Name, apis.AllDevices)
		}
		if err := parser.ValidateDeviceName(d.Name); err != nil {
			return nil, fmt.Errorf("RDMA device name %q cannot be a CDI device name: %w", d.Name, err)
		}
		if _, dup := byName[d.Name]; dup {
			return nil, fmt.Errorf("RDMA device %q listed twice", d.Name)
		}
		byName[d.Name] = i
	}
	return byName, nil
}

// selectedNames resolves the requested names (empty or "all" = every
// device) and sorts them.
func selectedNames(byName map[string]int, wanted []string) ([]string, error) {
	names := make([]string, 0, len(byName))
	if len(wanted) == 0 || slices.Contains(wanted, apis.AllDevices) {
		for name := range byName {
			names = append(names, name)
		}
	} else {
		var unknown []string
		for _, name := range wanted {
			if _, ok := byName[name]; !ok {
				unknown = append(unknown, name)
				continue
			}
			names = append(names, name)
		}
		if len(unknown) > 0 {
			known := make([]string, 0, len(byName))
			for name := range byName {
				known = append(known, name)
			}
			model.SortNames(known)
			return nil, fmt.Errorf("unknown RDMA device(s) %s (this node has: %s)",
				strings.Join(unknown, ", "), strings.Join(known, ", "))
		}
	}
	model.SortNames(names)
	return slices.Compact(names), nil
}

// File modes of the device nodes created in the container.
//
// CDI readers differ when fileMode is absent: CDI libraries before 1.0
// (podman 4.3) leave it to runc, which makes 0666; newer ones copy the mode
// of the host node when they can stat it, and a fixture or an odd udev rule
// then decides what the container gets. Writing the mode makes every engine
// agree. The values are the kernel's own (devnode callbacks): uverbs and
// rdma_cm are 0666, because any user may do verbs; umad and issm are 0600,
// because opening issm sets the port's IsSM bit and umad sends raw MADs,
// which are administrator actions. (CDI engines also chown nodes without a
// uid to the container's user, so a non-root user keeps umad access.)
const (
	modeUserAccess  os.FileMode = 0o666
	modeAdminAccess os.FileMode = 0o600
)

func fileModeFor(path string) os.FileMode {
	base := filepath.Base(path)
	if strings.HasPrefix(base, "umad") || strings.HasPrefix(base, "issm") {
		return modeAdminAccess
	}
	return modeUserAccess
}

// nodeBuilder turns model char devices into CDI device nodes.
type nodeBuilder struct {
	devRoot string
}

func (b nodeBuilder) build(chars []model.CharDevice) ([]*specs.DeviceNode, error) {
	out := make([]*specs.DeviceNode, 0, len(chars))
	for _, c := range chars {
		n, err := b.node(c)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// node fully specifies a char device (type, major, minor), so an engine
// does not need to stat the host node to apply it. hostPath is written only
// when it differs from path: hostPath needs CDI 0.5.0, and leaving it out
// keeps the spec at 0.3.0 for the common --dev-root /dev.
func (b nodeBuilder) node(c model.CharDevice) (*specs.DeviceNode, error) {
	if c.Major == 0 {
		return nil, fmt.Errorf("char device %s has no major number", c.Path)
	}
	host, err := hostPathUnder(b.devRoot, c.Path)
	if err != nil {
		return nil, err
	}
	mode := fileModeFor(c.Path)
	n := &specs.DeviceNode{
		Path:     filepath.Clean(c.Path),
		Type:     "c",
		Major:    int64(c.Major),
		Minor:    int64(c.Minor),
		FileMode: &mode,
	}
	if host != n.Path {
		n.HostPath = host
	}
	return n, nil
}
