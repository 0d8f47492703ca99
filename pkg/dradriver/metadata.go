package dradriver

import (
	"context"
	"maps"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/attach"
)

// Device metadata (KEP-5304): with it on, the kubeletplugin helper writes
// one file per request of each prepared claim under the plugin's data
// directory, and a CDI spec beside the driver's own that bind-mounts it
// into the claim's containers (its CDI device is added to the prepare
// answer). The file is the JSON of what ClaimMetadata returns.

// metadataVersions are the versions the file is written in, newest first;
// the helper refuses to start without the newest it knows.
var metadataVersions = []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}

// metadataOptions are the helper's options for device metadata: its CDI
// specs go to cdiDir, where the runtimes find the driver's own spec.
func metadataOptions(on bool, cdiDir string) []kubeletplugin.Option {
	if !on {
		return nil
	}
	opts := []kubeletplugin.Option{kubeletplugin.EnableDeviceMetadata(true, metadataVersions)}
	if cdiDir != "" {
		opts = append(opts, kubeletplugin.CDIDirectory(cdiDir))
	}
	return opts
}

// ClaimMetadata returns devices, a claim's prepared devices, each with the
// metadata its containers read: the attributes the slice publishes for it
// (Health.Published, so the file and the slice never disagree), and where
// the claim's pod holds an interface of its HCA in its own namespace (inPod,
// by HCA), that interface as networkData. A device allocated with admin
// access gets no networkData: the interface is its holder's. A device the
// inventory no longer has keeps the metadata it had. devices is not changed.
func ClaimMetadata(claim *resourceapi.ResourceClaim, driver string, devices []kubeletplugin.Device, inv Inventory, shown Health,
	inPod map[string]attach.Observed) []kubeletplugin.Device {
	out := slices.Clone(devices)
	for i, dev := range out {
		published, ok := shown.Published(inv, dev.DeviceName)
		if !ok {
			continue
		}
		md := &kubeletplugin.DeviceMetadata{Attributes: make(map[string]resourceapi.DeviceAttribute, len(published.Attributes))}
		for name, a := range published.Attributes {
			md.Attributes[string(name)] = a
		}
		if iface, ok := inPod[inv.IBDevs[dev.DeviceName]]; ok && !isAdmin(claim, driver, dev) {
			md.NetworkData = podNetworkData(iface)
		}
		out[i].Metadata = md
	}
	return out
}

// sameNetworkData tells whether the devices' metadata name the same
// interfaces: what makes a claim's files worth writing again once its pod
// has them (attributes alone are not: a container sees its file as it was
// when it was created).
func sameNetworkData(a, b []kubeletplugin.Device) bool {
	return slices.EqualFunc(a, b, func(x, y kubeletplugin.Device) bool {
		return equality.Semantic.DeepEqual(networkDataOf(x), networkDataOf(y))
	})
}

func networkDataOf(d kubeletplugin.Device) *resourceapi.NetworkDeviceData {
	if d.Metadata == nil {
		return nil
	}
	return d.Metadata.NetworkData
}

// byRequest groups devices by the request they were prepared for, as the
// helper names the metadata files.
func byRequest(devices []kubeletplugin.Device) map[string][]kubeletplugin.Device {
	out := map[string][]kubeletplugin.Device{}
	for _, d := range devices {
		for _, r := range d.Requests {
			out[r] = append(out[r], d)
		}
	}
	return out
}

// refreshMetadata writes the metadata files of each prepared claim whose
// pod's interfaces differ from what its files say, and remembers what
// they say now. The networker calls it (PodNetworkChanged) before it lists
// the sandbox for the container hook, and a container's file is a bind
// mount of the file as it was when the container was created (the helper
// replaces it by a rename): so every container of the pod sees its
// interfaces. A write that fails is logged and tried at the next change.
// d.mu is held.
func (d *Driver) refreshMetadata() {
	if !d.DeviceMetadata || d.helper == nil {
		return
	}
	shown := d.shown()
	for _, uid := range slices.Sorted(maps.Keys(d.prepared)) {
		p := d.prepared[uid]
		next := ClaimMetadata(p.Claim, d.Name, p.Devices, d.inv, shown, d.podInterfaces(p.Claim))
		if sameNetworkData(p.Devices, next) {
			continue
		}
		written := true
		requests := byRequest(next)
		for _, request := range slices.Sorted(maps.Keys(requests)) {
			if err := d.helper.UpdateRequestMetadata(context.Background(), p.Claim.Namespace, p.Claim.Name, uid, request, requests[request]); err != nil {
				d.Log.Warnf("device metadata of claim %s/%s, request %s: %v", p.Claim.Namespace, p.Claim.Name, request, err)
				written = false
			}
		}
		if written {
			p.Devices = next
			d.prepared[uid] = p
		}
	}
}
