package dradriver

import (
	"encoding/json"
	"net/netip"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/attach"
)

// NCCLStatusKeys are the NCCL settings a claim's device status carries: the
// ones that depend on the device.
var NCCLStatusKeys = []string{"NCCL_IB_HCA", "NCCL_IB_GID_INDEX"}

// DeviceHealth is a device's problem (none when healthy), its
// degradation (none when it trains as it should) and when they started:
// the Healthy condition's transition time.
type DeviceHealth struct {
	Problem  health.Problem
	Degraded health.Problem
	Since    metav1.Time
}

// TrackHealth returns the health of inv's devices, and of before's devices
// that inv no longer has (gone), keeping each unchanged one's Since.
func TrackHealth(before map[string]DeviceHealth, inv Inventory, now metav1.Time) map[string]DeviceHealth {
	out := make(map[string]DeviceHealth, len(before)+len(inv.Devices))
	set := func(name string, p, degraded health.Problem) {
		if b, ok := before[name]; ok && b.Problem == p && b.Degraded == degraded {
			out[name] = b
			return
		}
		out[name] = DeviceHealth{Problem: p, Degraded: degraded, Since: now}
	}
	for _, d := range inv.Devices {
		set(d.Name, inv.Problems[d.Name], inv.Degraded[d.Name])
	}
	for name := range before {
		if _, ok := out[name]; !ok {
			set(name, health.Gone, health.Problem{})
		}
	}
	return out
}

// DeviceStatuses returns the status of each of the driver's devices in
// claim's allocation, as the pod sees it: a Ready condition (prepared at
// since), a Healthy condition (false with the problem's code and reason
// while the device has one, gone included), and while the node has the
// device, the netdev of the HCA's primary port with its addresses and MAC
// as networkData and in data the NCCL settings for that HCA alone. Where
// the claim's pod holds an interface of the HCA in its own namespace
// (inPod, by HCA), networkData is that interface as the pod holds it, and
// the NCCL settings are those of the pod's addresses. A device allocated
// with admin access has neither: its netdev and NCCL settings are its
// holder's.
func DeviceStatuses(claim *resourceapi.ResourceClaim, driver string, inv Inventory, healthOf map[string]DeviceHealth,
	node model.Node, cfg config.NCCL, since metav1.Time, inPod map[string]attach.Observed) []resourceapi.AllocatedDeviceStatus {
	claimed, err := claimedDevices(claim, driver)
	if err != nil {
		return nil
	}
	var out []resourceapi.AllocatedDeviceStatus
	for _, c := range claimed {
		var shareID *string
		if c.ShareID != nil {
			shareID = ptr(string(*c.ShareID))
		}
		ibdev := inv.IBDevs[c.Device]
		i := slices.IndexFunc(node.Devices, func(d model.Device) bool { return d.Name == ibdev })
		cdiDevice := ibdev
		if i < 0 {
			cdiDevice = c.Device
		}
		status := resourceapi.AllocatedDeviceStatus{
			Driver: driver, Pool: c.Pool, Device: c.Device, ShareID: shareID,
			Conditions: []metav1.Condition{{
				Type: "Ready", Status: metav1.ConditionTrue, Reason: "Prepared", LastTransitionTime: since,
				Message: "the CDI device " + cdiDevice + " is prepared for the pod's containers",
			}},
		}
		h, tracked := healthOf[c.Device]
		switch {
		case !tracked && i >= 0:
			h = DeviceHealth{Problem: inv.Problems[c.Device], Degraded: inv.Degraded[c.Device], Since: since}
		case !tracked: // gone before this process saw it
			h = DeviceHealth{Problem: health.Gone, Since: since}
		}
		status.Conditions = append(status.Conditions, healthyCondition(h, since))
		if iface, ok := inPod[ibdev]; ok && i >= 0 && !c.AdminAccess {
			status.Data = ncclData(node, cfg, ibdev, iface.Addrs)
			status.NetworkData = podNetworkData(iface)
		} else if i >= 0 && !c.AdminAccess {
			status.Data = ncclData(node, cfg, ibdev, nil)
			status.NetworkData = networkData(node, node.Devices[i])
		}
		out = append(out, status)
	}
	return out
}

// healthyCondition is the Healthy condition of a device prepared at since:
// False with the problem's code while it has one; True, with the
// degradation's code and message, while it works slower than it should.
func healthyCondition(h DeviceHealth, since metav1.Time) metav1.Condition {
	c := metav1.Condition{Type: "Healthy", Status: metav1.ConditionTrue, Reason: "Healthy",
		Message: "the device's ports and nodes are usable", LastTransitionTime: h.Since}
	if since.After(h.Since.Time) { // it held before the claim was prepared
		c.LastTransitionTime = since
	}
	switch {
	case !h.Problem.Healthy():
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, h.Problem.Code, h.Problem.Reason
	case !h.Degraded.Healthy():
		c.Reason, c.Message = h.Degraded.Code, DegradedMessage(h.Degraded)
	}
	return c
}

// ncclData is the JSON object of NCCLStatusKeys computed for ibdev alone,
// in a namespace holding held (nil: the node's).
func ncclData(node model.Node, cfg config.NCCL, ibdev string, held []netip.Prefix) *runtime.RawExtension {
	scope := nccl.Scope{Devices: []string{ibdev}}
	if held != nil {
		scope.HeldAddrs = []netip.Addr{}
		for _, p := range held {
			scope.HeldAddrs = append(scope.HeldAddrs, p.Addr())
		}
	}
	settings := nccl.Compute(node, cfg, scope)
	data := map[string]string{}
	for _, k := range NCCLStatusKeys {
		if v, ok := settings.Get(k); ok {
			data[k] = v
		}
	}
	if len(data) == 0 {
		return nil
	}
	raw, _ := json.Marshal(data) // a map of strings always marshals
	return &runtime.RawExtension{Raw: raw}
}

// podNetworkData is an interface the pod holds.
func podNetworkData(iface attach.Observed) *resourceapi.NetworkDeviceData {
	nd := &resourceapi.NetworkDeviceData{InterfaceName: iface.Name, HardwareAddress: iface.HWAddr}
	for _, a := range iface.Addrs {
		nd.IPs = append(nd.IPs, a.String())
	}
	return nd
}

// networkData is the netdev of d's primary port, nil when it has none.
func networkData(node model.Node, d model.Device) *resourceapi.NetworkDeviceData {
	port, ok := primaryPort(d)
	if !ok || port.NetDev == "" {
		return nil
	}
	nd := &resourceapi.NetworkDeviceData{InterfaceName: port.NetDev}
	if netdev, ok := node.NetDevByName(port.NetDev); ok {
		for _, a := range netdev.Addrs {
			nd.IPs = append(nd.IPs, a.String())
		}
		nd.HardwareAddress = netdev.HWAddr
	}
	return nd
}

// statusApply is the server-side apply of statuses as the claim's device
// statuses owned by the driver's field manager: entries it applied before
// and leaves out are removed, other drivers' entries are untouched.
func statusApply(namespace, name string, statuses []resourceapi.AllocatedDeviceStatus) *resourceapply.ResourceClaimApplyConfiguration {
	devices := make([]*resourceapply.AllocatedDeviceStatusApplyConfiguration, 0, len(statuses))
	for _, s := range statuses {
		ds := resourceapply.AllocatedDeviceStatus().WithDriver(s.Driver).WithPool(s.Pool).WithDevice(s.Device)
		if s.ShareID != nil {
			ds.WithShareID(*s.ShareID)
		}
		for _, c := range s.Conditions {
			ds.WithConditions(metav1apply.Condition().WithType(c.Type).WithStatus(c.Status).WithReason(c.Reason).
				WithMessage(c.Message).WithLastTransitionTime(c.LastTransitionTime))
		}
		if s.Data != nil {
			ds.WithData(*s.Data)
		}
		if nd := s.NetworkData; nd != nil {
			ds.WithNetworkData(resourceapply.NetworkDeviceData().WithInterfaceName(nd.InterfaceName).
				WithIPs(nd.IPs...).WithHardwareAddress(nd.HardwareAddress))
		}
		devices = append(devices, ds)
	}
	return resourceapply.ResourceClaim(name, namespace).WithStatus(resourceapply.ResourceClaimStatus().WithDevices(devices...))
}
