// Package health says whether an HCA can serve a container now. It is one
// rule for the device plugin (ListAndWatch's Healthy/Unhealthy) and the DRA
// driver (a taint on the device), so both report the same thing.
package health

import (
	"fmt"
	"slices"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Problem is why an HCA cannot serve a container; the zero Problem means
// it can.
type Problem struct {
	// Code names the problem as a label value (a taint's value).
	Code string
	// Reason says it to a person.
	Reason string
}

// Healthy reports whether there is no problem.
func (p Problem) Healthy() bool { return p == Problem{} }

// Codes of the problems.
const (
	CodeNoVerbsDevice     = "NoVerbsDevice"
	CodeVerbsNodeMissing  = "VerbsNodeMissing"
	CodeRDMACMNodeMissing = "RDMACMNodeMissing"
	CodeNoActivePort      = "NoActivePort"
	CodeGone              = "DeviceGone"
	CodePFNotActive       = "PFNotActive"
)

// Gone is the problem of an HCA that was there and is no longer in sysfs:
// its PCI function vanished (hot unplug, a VF removed, a driver unbound).
var Gone = Problem{Code: CodeGone, Reason: "gone from /sys/class/infiniband (its PCI function vanished)"}

// Check returns d's problem on node: a container given d needs its uverbs
// node, the node's rdma_cm node when sysfs has one, and an ACTIVE port among
// ports (the ports that count: the ones a resource selects, or all of d's).
// A VF also needs its PF up: when the PF has no ACTIVE port the VF's traffic
// has nowhere to go, whatever its own port says, and the reason names the PF
// so that an operator looks at the right cable. A VF whose PF is not an RDMA
// device here (a VM's VF has no physfn) is judged by its own ports alone.
func Check(node model.Node, d model.Device, ports []model.Port) Problem {
	switch {
	case d.Verbs == nil:
		return Problem{CodeNoVerbsDevice, "no uverbs device"}
	case d.Verbs.NodeMissing:
		return Problem{CodeVerbsNodeMissing, d.Verbs.Path + " is missing"}
	case node.RDMACM != nil && node.RDMACM.NodeMissing:
		return Problem{CodeRDMACMNodeMissing, node.RDMACM.Path + " is missing"}
	}
	if pf, ok := node.PFOf(d); ok && !slices.ContainsFunc(pf.Ports, model.Port.Active) {
		return Problem{CodePFNotActive, fmt.Sprintf("its PF %s (%s) has no ACTIVE port", pf.Name, pf.PCIAddress)}
	}
	if !slices.ContainsFunc(ports, model.Port.Active) {
		return Problem{CodeNoActivePort, "no ACTIVE port"}
	}
	return Problem{}
}
