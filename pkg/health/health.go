// Package health says whether an HCA can serve a container now. It is one
// rule for the device plugin (ListAndWatch's Healthy/Unhealthy) and the DRA
// driver (a taint on the device), so both report the same thing.
package health

import (
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
)

// Gone is the problem of an HCA that was there and is no longer in sysfs:
// its PCI function vanished (hot unplug, a VF removed, a driver unbound).
var Gone = Problem{Code: CodeGone, Reason: "gone from /sys/class/infiniband (its PCI function vanished)"}

// Check returns d's problem: a container given d needs its uverbs node,
// the node's rdma_cm node when sysfs has one, and an ACTIVE port among
// ports (the ports that count: the ones a resource selects, or all of d's).
func Check(d model.Device, ports []model.Port, rdmaCM *model.CharDevice) Problem {
	switch {
	case d.Verbs == nil:
		return Problem{CodeNoVerbsDevice, "no uverbs device"}
	case d.Verbs.NodeMissing:
		return Problem{CodeVerbsNodeMissing, d.Verbs.Path + " is missing"}
	case rdmaCM != nil && rdmaCM.NodeMissing:
		return Problem{CodeRDMACMNodeMissing, rdmaCM.Path + " is missing"}
	case !slices.ContainsFunc(ports, model.Port.Active):
		return Problem{CodeNoActivePort, "no ACTIVE port"}
	}
	return Problem{}
}
