package dradriver

import (
	"fmt"
	"maps"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
)

// Health is how the slice shows unhealthy devices.
type Health struct {
	Driver string
	// Taints: the API server keeps device taints (Features.DeviceTaints).
	Taints bool
	Effect config.TaintEffect
	// Sharing: the API server keeps consumable capacity
	// (Features.ConsumableCapacity); each HCA is then shareable (Shareable).
	Sharing bool
	// Lists: the API server keeps list attributes (Features.ListAttributes);
	// the standard numaNode is then Inventory.NUMALists' list.
	Lists bool
}

// SliceDevices returns the devices to publish: inv's, each unhealthy one
// with a taint whose value is its problem's code, and the devices in known
// that inv no longer has (their PCI function vanished), tainted as gone.
// Where the server drops taints an unhealthy device is left out instead: a
// taint is the one thing that keeps new claims off a device a class would
// still select. known holds what was published before, by name, and is
// updated; problems returns every device's problem, for the log.
func SliceDevices(inv Inventory, known map[string]resourceapi.Device, h Health) (devices []resourceapi.Device, problems map[string]health.Problem) {
	problems = map[string]health.Problem{}
	current := map[string]bool{}
	for _, d := range inv.Devices {
		current[d.Name] = true
		known[d.Name] = d
		p := inv.Problems[d.Name]
		problems[d.Name] = p
		if tainted, ok := h.withProblem(d, p, inv.Degraded[d.Name], inv.NUMALists[d.Name]); ok {
			devices = append(devices, tainted)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(known)) {
		switch {
		case current[name]:
		case !h.Taints: // nothing would show it is gone: forget it
			delete(known, name)
		default:
			problems[name] = health.Gone
			tainted, _ := h.withProblem(known[name], health.Gone, health.Problem{}, nil)
			devices = append(devices, tainted)
		}
	}
	return devices, problems
}

// withProblem is d as published with problem p and degradation degraded,
// and numa its standard numaNode as a list; ok is false when it is left
// out. A degraded device stays in the slice where taints are dropped: it
// works, and its attribute degraded says it.
func (h Health) withProblem(d resourceapi.Device, p, degraded health.Problem, numa []int64) (resourceapi.Device, bool) {
	if !p.Healthy() && !h.Taints {
		return d, false
	}
	return h.described(d, p, degraded, numa), true
}

// Published is inv's device name as the slice describes it, its health
// and sharing included, also where it is left out of the slice (an
// unhealthy device on a server without taints). A prepared device's
// metadata carries its attributes (ClaimMetadata).
func (h Health) Published(inv Inventory, name string) (resourceapi.Device, bool) {
	i := slices.IndexFunc(inv.Devices, func(d resourceapi.Device) bool { return d.Name == name })
	if i < 0 {
		return resourceapi.Device{}, false
	}
	return h.described(inv.Devices[i], inv.Problems[name], inv.Degraded[name], inv.NUMALists[name]), true
}

// described is a copy of d with problem p and degradation degraded as
// attributes and taints, shareable where sharing is on, and its standard
// numaNode the list numa where lists are kept (an int, as BuildInventory
// made it, elsewhere or where numa is empty).
func (h Health) described(d resourceapi.Device, p, degraded health.Problem, numa []int64) resourceapi.Device {
	d = *d.DeepCopy()
	if d.Attributes == nil {
		d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	}
	if _, ok := d.Attributes[apis.StdAttrNUMANode]; ok && h.Lists && len(numa) > 0 {
		d.Attributes[apis.StdAttrNUMANode] = resourceapi.DeviceAttribute{IntValues: slices.Clone(numa)}
	}
	d.Attributes[apis.AttrHealthy] = resourceapi.DeviceAttribute{BoolValue: ptr(p.Healthy())}
	d.Attributes[apis.AttrDegraded] = resourceapi.DeviceAttribute{BoolValue: ptr(!degraded.Healthy())}
	if h.Sharing {
		Shareable(&d)
	}
	if !p.Healthy() {
		d.Taints = append(d.Taints, resourceapi.DeviceTaint{
			Key: apis.UnhealthyTaintKey(h.Driver), Value: p.Code, Effect: resourceapi.DeviceTaintEffect(h.Effect),
		})
	}
	if !degraded.Healthy() && h.Taints {
		d.Taints = append(d.Taints, resourceapi.DeviceTaint{
			Key: apis.DegradedTaintKey(h.Driver), Value: degraded.Code, Effect: resourceapi.DeviceTaintEffectNoSchedule,
		})
	}
	return d
}

// HealthChanges describes, one line per device and sorted, how each
// device's problem changed from before to now, and what the slice does
// about it.
func HealthChanges(before, now map[string]health.Problem, h Health) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(now)) {
		p := now[name]
		if p == before[name] {
			continue
		}
		switch {
		case p.Healthy():
			out = append(out, name+" is healthy again")
		case h.Taints:
			out = append(out, fmt.Sprintf("%s is unhealthy (%s): tainted %s=%s:%s", name, p.Reason, apis.UnhealthyTaintKey(h.Driver), p.Code, h.Effect))
		default:
			out = append(out, fmt.Sprintf("%s is unhealthy (%s): left out of the ResourceSlice until it recovers (this API server drops device taints)", name, p.Reason))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(before)) {
		if _, still := now[name]; !still {
			out = append(out, name+" is gone: left out of the ResourceSlice (this API server drops device taints)")
		}
	}
	return out
}

// Shareable makes d allocatable to several claims at once, up to its
// bandwidth in whole Gb/s, and marks it with the attribute shareable (the
// shared DeviceClasses select it). A device without a known rate stays
// exclusive. Bandwidth is what an operator sizes a job's share of an HCA
// by, and the value is the node's own (100 on a 100G port, 400 on NDR),
// where a share count would mean a different slice of each HCA. It is a
// scheduling reservation: the HCA does not enforce it.
func Shareable(d *resourceapi.Device) {
	rate := d.Attributes[apis.AttrRate].IntValue
	if rate == nil || *rate <= 0 {
		return
	}
	full := resource.NewQuantity(*rate, resource.DecimalSI)
	d.AllowMultipleAllocations = ptr(true)
	if d.Capacity == nil {
		d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
	}
	d.Capacity[apis.CapacityBandwidth] = resourceapi.DeviceCapacity{
		Value: *full,
		RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    full,
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(1, resource.DecimalSI), Step: resource.NewQuantity(1, resource.DecimalSI)},
		},
	}
	d.Attributes[apis.AttrShareable] = resourceapi.DeviceAttribute{BoolValue: ptr(true)}
}

// The kubelet takes a device's health as Unknown when no report has come
// for healthTimeout; the stream repeats itself every healthResend, well
// within it.
const (
	healthResend  = 20 * time.Second
	healthTimeout = 60 * time.Second
)

// HealthReport is the kubelet's view of problems (by device name, as
// SliceDevices returns them) for the devices of pool: Healthy, or
// Unhealthy with the problem's reason as the message a pod's status shows;
// a degraded device is Healthy (it works) with its degradation as the
// message.
func HealthReport(pool string, problems, degraded map[string]health.Problem, at time.Time) kubeletplugin.DeviceHealthReport {
	var r kubeletplugin.DeviceHealthReport
	for _, name := range slices.Sorted(maps.Keys(problems)) {
		dh := kubeletplugin.DeviceHealth{
			PoolName: pool, DeviceName: name, Health: kubeletplugin.HealthStatusHealthy,
			LastUpdated: at, HealthCheckTimeout: healthTimeout,
		}
		if p := problems[name]; !p.Healthy() {
			dh.Health, dh.Message = kubeletplugin.HealthStatusUnhealthy, p.Reason
		} else if g := degraded[name]; !g.Healthy() {
			dh.Message = DegradedMessage(g)
		}
		r.Devices = append(r.Devices, dh)
	}
	return r
}

// DegradedMessage is how a degraded device's health reads in a pod's
// status and its claim's Healthy condition.
func DegradedMessage(p health.Problem) string { return "degraded (" + p.Code + "): " + p.Reason }
