// Package portstats reads what an RDMA port is doing right now: its state,
// physical state, rate, and the counters the kernel keeps in
// ports/N/counters (the PMA counters of ib_core) and ports/N/hw_counters
// (the driver's, such as mlx5's congestion counters). The metrics endpoint
// reads them at every scrape, as node_exporter does, so a value is never
// staler than the kernel's.
package portstats

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// Sample is one port's live values. A counter the kernel does not have
// (hw_counters on InfiniBand, a newer counter on an older kernel) is
// absent from its map.
type Sample struct {
	Device string
	Port   int
	// StateID and PhysStateID are the numbers of state and phys_state
	// ("4: ACTIVE" is 4, "5: LinkUp" is 5).
	StateID, PhysStateID int
	State                model.PortState
	PhysState            string
	// Rate is the rate as sysfs prints it ("100 Gb/sec (4X EDR)"), whose
	// parenthesis names the link width; RateGbps and Width (lanes) are
	// what it says, read here once, 0 where it is absent or unparsable.
	Rate       string
	RateGbps   float64
	Width      int
	Counters   map[string]uint64
	HWCounters map[string]uint64
}

// Reader reads ports under one sysfs root. It reuses one sysfs.Reader and
// is not safe for concurrent use.
type Reader struct {
	Root sysfs.Root
	// Counters and HWCounters name the files to read in counters/ and
	// hw_counters/.
	Counters, HWCounters []string

	r *sysfs.Reader
}

// NewReader reads the counters files of ports/N/counters (and hw of
// hw_counters) under the sysfs root.
func NewReader(root string, counters, hw []string) *Reader {
	return &Reader{Root: sysfs.Root(root), Counters: counters, HWCounters: hw}
}

// Read reads port of device. State and phys_state must parse; a counter
// file that is absent is left out, one that does not parse is an error
// naming it.
func (pr *Reader) Read(device string, port int) (Sample, error) {
	if pr.r == nil {
		pr.r = sysfs.NewReader()
	}
	s := Sample{Device: device, Port: port}
	dir, err := pr.r.OpenDir(pr.Root.Path("class/infiniband", device, "ports", strconv.Itoa(port)))
	if err != nil {
		return s, err
	}
	defer dir.Close()
	var state string
	if s.StateID, state, err = numbered(dir, "state"); err != nil {
		return s, err
	}
	s.State = model.PortState(state)
	if s.PhysStateID, s.PhysState, err = numbered(dir, "phys_state"); err != nil {
		return s, err
	}
	if rate, err := dir.ReadOptional("rate"); err != nil {
		return s, err
	} else if gbps, ok := sysfs.ParseRate(rate); ok {
		s.Rate, s.RateGbps, s.Width = strings.TrimSpace(rate), gbps, sysfs.LinkWidth(rate)
	}
	if s.Counters, err = counters(dir, "counters", pr.Counters); err != nil {
		return s, err
	}
	s.HWCounters, err = counters(dir, "hw_counters", pr.HWCounters)
	return s, err
}

func numbered(dir *sysfs.Dir, name string) (int, string, error) {
	b, err := dir.ReadBytes(name)
	if err != nil {
		return 0, "", err
	}
	return sysfs.ParseNumberedID(filepath.Join(dir.Path(), name), string(b))
}

func counters(dir *sysfs.Dir, sub string, names []string) (map[string]uint64, error) {
	values := make(map[string]uint64, len(names))
	for _, name := range names {
		b, err := dir.ReadBytes(sub + "/" + name)
		if sysfs.IsAbsent(err) {
			continue
		}
		if err != nil {
			return values, err
		}
		v, err := strconv.ParseUint(string(b), 10, 64)
		if err != nil {
			return values, fmt.Errorf("%s/%s/%s: %q is not a counter", dir.Path(), sub, name, b)
		}
		values[name] = v
	}
	return values, nil
}

// PCILink is a PCI function's link: speeds in GT/s and widths in lanes, 0
// where the kernel shows none (an attribute absent, "Unknown", a VF's).
type PCILink struct {
	Speed, MaxSpeed float64
	Width, MaxWidth int
}

// ReadPCILink reads the link of the PCI function at addr
// (bus/pci/devices/ADDR/{current,max}_link_{speed,width}). A value absent
// or unreadable as a number is 0; only a function that is gone is an
// error.
func (pr *Reader) ReadPCILink(addr string) (PCILink, error) {
	if pr.r == nil {
		pr.r = sysfs.NewReader()
	}
	var l PCILink
	dir, err := pr.r.OpenDir(pr.Root.Path("bus/pci/devices", addr))
	if err != nil {
		return l, err
	}
	defer dir.Close()
	// "16.0 GT/s PCIe", "8 GT/s", "Unknown"; widths are plain numbers.
	number := func(name string) float64 {
		s, err := dir.ReadOptional(name)
		if f := strings.Fields(s); err == nil && len(f) > 0 {
			if v, err := strconv.ParseFloat(f[0], 64); err == nil && v > 0 && v < 1e6 {
				return v
			}
		}
		return 0
	}
	l.Speed, l.MaxSpeed = number("current_link_speed"), number("max_link_speed")
	l.Width, l.MaxWidth = int(number("current_link_width")), int(number("max_link_width"))
	return l, nil
}
