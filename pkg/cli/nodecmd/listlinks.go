package nodecmd

import (
	"fmt"
	"strconv"

	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// linkView is what list shows of the links beside discovery: each HCA's
// PCIe link, each port's rate and width, and what the grey health policy
// finds degraded in one reading (no history: a PCIe link below its
// maximum, a port below its expected rate or its peers of the same type).
type linkView struct {
	pci   map[string]health.PCILink
	ports map[string]map[int]health.PortSample
	// conds are the degraded conditions by device and port (0: the PCIe
	// link).
	conds map[string]map[int]health.Condition
}

func newLinkView(s health.Sample, p health.Policy) linkView {
	v := linkView{pci: map[string]health.PCILink{}, ports: map[string]map[int]health.PortSample{}, conds: map[string]map[int]health.Condition{}}
	for _, l := range s.PCI {
		v.pci[l.Device] = l
	}
	for _, ps := range s.Ports {
		if v.ports[ps.Device] == nil {
			v.ports[ps.Device] = map[int]health.PortSample{}
		}
		v.ports[ps.Device][ps.Port] = ps
	}
	conds, _ := health.NewTracker(p).Observe(s)
	for _, c := range conds {
		if c.Level != health.LevelDegraded {
			continue
		}
		if v.conds[c.Device] == nil {
			v.conds[c.Device] = map[int]health.Condition{}
		}
		v.conds[c.Device][c.Port] = c
	}
	return v
}

// degraded is the condition of a device's port, or of its PCIe link
// (port 0), if it is degraded.
func (v linkView) degraded(device string, port int) *health.Condition {
	if c, ok := v.conds[device][port]; ok {
		return &c
	}
	return nil
}

// degradedMark is the listing's " (degraded: ...)" after a degraded port
// or PCIe link.
func degradedMark(c *health.Condition) string {
	if c == nil {
		return ""
	}
	return " (degraded: " + c.Note + ")"
}

// pcieLink prints a speed and width, "16 GT/s x16"; "-" when the kernel
// shows neither (a VF).
func pcieLink(speed float64, width int) string {
	switch {
	case speed <= 0 && width <= 0:
		return "-"
	case speed <= 0:
		return fmt.Sprintf("? x%d", width)
	case width <= 0:
		return health.FormatGTs(speed) + " x?"
	}
	return health.FormatGTs(speed) + " x" + strconv.Itoa(width)
}

// listNode is list's --json document: the node model, each device with
// its PCIe link and each port with its rate in Gb/s and its width, and
// what is degraded.
type listNode struct {
	model.Node
	Devices []listDevice `json:"devices"`
}

type listDevice struct {
	model.Device
	PCIeLink *listPCIeLink `json:"pcieLink,omitempty"`
	Ports    []listPort    `json:"ports"`
}

// listPCIeLink is a function's link: speeds in GT/s, widths in lanes, 0
// where the kernel shows none.
type listPCIeLink struct {
	SpeedGTs    float64 `json:"speedGTs"`
	Width       int     `json:"width"`
	MaxSpeedGTs float64 `json:"maxSpeedGTs"`
	MaxWidth    int     `json:"maxWidth"`
	// Degraded is the reason it is degraded ("" when it is not).
	Degraded string `json:"degraded,omitempty"`
}

type listPort struct {
	model.Port
	RateGbps float64 `json:"rateGbps,omitempty"`
	// Width is the lane count of the rate ("4X" is 4); 0 when unknown.
	Width    int    `json:"width,omitempty"`
	Degraded string `json:"degraded,omitempty"`
}

func reasonOf(c *health.Condition) string {
	if c == nil {
		return ""
	}
	return c.Reason
}

func (v linkView) node(n model.Node) listNode {
	out := listNode{Node: n}
	if n.Devices == nil {
		return out
	}
	out.Devices = make([]listDevice, 0, len(n.Devices))
	for _, d := range n.Devices {
		ld := listDevice{Device: d, Ports: make([]listPort, 0, len(d.Ports))}
		if l, ok := v.pci[d.Name]; ok {
			ld.PCIeLink = &listPCIeLink{SpeedGTs: l.Speed, Width: l.Width, MaxSpeedGTs: l.MaxSpeed, MaxWidth: l.MaxWidth, Degraded: reasonOf(v.degraded(d.Name, 0))}
		}
		for _, p := range d.Ports {
			lp := listPort{Port: p, Degraded: reasonOf(v.degraded(d.Name, p.Number))}
			if s, ok := v.ports[d.Name][p.Number]; ok {
				lp.RateGbps, lp.Width = s.RateGbps, s.Width
			}
			ld.Ports = append(ld.Ports, lp)
		}
		out.Devices = append(out.Devices, ld)
	}
	return out
}
