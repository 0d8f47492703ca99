package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/devicemetadata"

	"os"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"

	"github.com/rdma-cdi/rdma-cdi/pkg/dradriver"
)

// ResourceSlices and claims of the DRA driver, as the tests read and write
// them.

// SliceDevices returns the devices of the driver's ResourceSlices of
// node k.
func SliceDevices(t testing.TB, k *KubeEnv) []resourceapi.Device {
	t.Helper()
	out, err := k.GetJSON("/apis/resource.k8s.io/v1/resourceslices")
	if err != nil {
		t.Fatal(err)
	}
	var list resourceapi.ResourceSliceList
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("resourceslices: %v\n%s", err, out)
	}
	var devs []resourceapi.Device
	for _, s := range list.Items {
		// Node k's own slices: in a cluster of several nodes every
		// node's agent publishes its own.
		if s.Spec.Driver == apis.Group && (s.Spec.NodeName == nil || *s.Spec.NodeName == k.NodeName) {
			devs = append(devs, s.Spec.Devices...)
		}
	}
	return devs
}

// WaitSlice waits up to 90 s for the node's ResourceSlice devices to
// satisfy ok (what says what), failing with diagnose's text; it returns them.
func WaitSlice(t testing.TB, k *KubeEnv, ok func([]resourceapi.Device) bool, what string, diagnose func() string) []resourceapi.Device {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		devs := SliceDevices(t, k)
		if ok(devs) {
			return devs
		}
		if time.Now().After(deadline) {
			t.Fatalf("ResourceSlice never had %s: %s\n%s", what, DescribeDevices(devs), diagnose())
		}
		time.Sleep(time.Second)
	}
}

// Attr is a device attribute as a plain value (string, int64 or bool, or
// []int64 for a list of numbers).
func Attr(d resourceapi.Device, name string) any {
	a, ok := d.Attributes[resourceapi.QualifiedName(name)]
	switch {
	case !ok:
		return nil
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return *a.IntValue
	case a.BoolValue != nil:
		return *a.BoolValue
	case a.IntValues != nil:
		return a.IntValues
	}
	return nil
}

// DescribeDevices is one line per device: its name and attributes.
func DescribeDevices(devs []resourceapi.Device) string {
	var b bytes.Buffer
	for _, d := range devs {
		fmt.Fprintf(&b, "\n  %s:", d.Name)
		for _, n := range slices.Sorted(func(yield func(string) bool) {
			for k := range d.Attributes {
				if !yield(string(k)) {
					return
				}
			}
		}) {
			fmt.Fprintf(&b, " %s=%v", n, Attr(d, n))
		}
	}
	return b.String()
}

// ClaimTemplate is a ResourceClaimTemplate ns/name asking one device of
// the DeviceClass class.rdma.example.com, selected by the CEL expression
// cel ("" for none), with more lines of the request (each starting with a
// newline and indented under exactly: capacity, tolerations).
func ClaimTemplate(ns, name, class, cel, more string) string {
	if cel != "" {
		cel = "\n            selectors:\n              - cel:\n                  expression: " + cel
	}
	return fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: %s
  namespace: %s
spec:
  spec:
    devices:
      requests:
        - name: hca
          exactly:
            deviceClassName: %s.rdma.example.com%s%s
`, name, ns, class, cel, more)
}

// HCA1Claim is a claim template for mlx5_1 alone from class, asking for
// bandwidth Gb/s of it ("" asks for none: the default, all of it).
func HCA1Claim(ns, name, class, bandwidth string) string {
	capacity := ""
	if bandwidth != "" {
		capacity = fmt.Sprintf("\n            capacity:\n              requests:\n                bandwidth: %q", bandwidth)
	}
	return ClaimTemplate(ns, name, class, `device.attributes["rdma.example.com"].ibdev == "mlx5_1"`, capacity)
}

// HCA8Claims are claim templates for mlx5_8 alone: plain, and tolerating
// the driver's unhealthy taint.
func HCA8Claims(ns string) string {
	mlx58 := `device.attributes["rdma.example.com"].ibdev == "mlx5_8"`
	return ClaimTemplate(ns, "hca8", "hca", mlx58, "") + "---\n" + ClaimTemplate(ns, "hca8-tolerant", "hca", mlx58, `
            tolerations:
              - key: rdma.example.com/unhealthy
                operator: Exists
                effect: NoSchedule`)
}

// Claims are the ResourceClaims of namespace ns.
func (k *KubeEnv) Claims(ns string) ([]resourceapi.ResourceClaim, error) {
	out, err := k.GetJSON("/apis/resource.k8s.io/v1/namespaces/" + ns + "/resourceclaims")
	if err != nil {
		return nil, err
	}
	var claims resourceapi.ResourceClaimList
	if err := json.Unmarshal(out, &claims); err != nil {
		return nil, fmt.Errorf("the claims of %s: %w", ns, err)
	}
	return claims.Items, nil
}

// OurDeviceStatus is the driver's entry in the claim's status.devices.
func OurDeviceStatus(t *testing.T, k *KubeEnv, ns, name string) (*resourceapi.AllocatedDeviceStatus, *resourceapi.ResourceClaim) {
	t.Helper()
	out, err := k.GetJSON("/apis/resource.k8s.io/v1/namespaces/" + ns + "/resourceclaims/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var c resourceapi.ResourceClaim
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatal(err)
	}
	for i, d := range c.Status.Devices {
		if d.Driver == apis.Group {
			return &c.Status.Devices[i], &c
		}
	}
	return nil, &c
}

// WaitDeviceStatus polls the claim until ok holds for its entry.
func WaitDeviceStatus(t *testing.T, k *KubeEnv, ns, name, what string, ok func(*resourceapi.AllocatedDeviceStatus) bool) *resourceapi.AllocatedDeviceStatus {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		d, c := OurDeviceStatus(t, k, ns, name)
		if ok(d) {
			return d
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(c.Status, "", "  ")
			var logs string
			for _, p := range k.PodNames(t, AgentNamespace, AgentSelector) {
				logs += k.Logs(AgentNamespace, p, "dra")
			}
			t.Fatalf("claim %s/%s never had %s:\n%s\nthe driver's log:\n%s", ns, name, what, b, logs)
		}
	}
}

// DRANode starts (or reuses) a node on the fixture with the chart in mode
// dra, and waits until its slice lists want devices.
func DRANode(t testing.TB, node *FixtureNode, want int) *KubeEnv {
	t.Helper()
	k := KubeNode(t, node, KubeOptions{
		FeatureGates: map[string]bool{"DRAExtendedResource": true},
		Images:       []string{Glibc.DockerArchive(t)},
	})
	pod := k.InstallAgent(t, "dra", nil)
	WaitSlice(t, k, func(s []resourceapi.Device) bool { return len(s) == want }, fmt.Sprintf("%d devices", want),
		func() string { return k.Logs(AgentNamespace, pod, "dra") })
	return k
}

// DeviceByName is the device of devs named name.
func DeviceByName(devs []resourceapi.Device, name string) (resourceapi.Device, bool) {
	i := slices.IndexFunc(devs, func(d resourceapi.Device) bool { return d.Name == name })
	if i < 0 {
		return resourceapi.Device{}, false
	}
	return devs[i], true
}

// ClaimPod is a glibc pod whose container uses a claim from template.
func ClaimPod(ns, name, template string) string {
	return GlibcPodManifest(ns, name,
		"\n  resourceClaims:\n    - name: rdma\n      resourceClaimTemplateName: "+template,
		"\n      resources:\n        claims:\n          - name: rdma")
}

// TaintsOn says whether this release keeps device taints with its default
// gates (the driver probes it; TestKubeDRAFeaturesDetected checks the probe).
func TaintsOn(t testing.TB) bool { return KubeMinor(t) >= 36 }

// UnhealthyTaint is device's unhealthy taint's "VALUE:EFFECT", or "".
func UnhealthyTaint(d resourceapi.Device) string {
	return TaintOf(d, apis.UnhealthyTaintKey(apis.Group))
}

// TaintOf is device's taint of key as "VALUE:EFFECT", or "".
func TaintOf(d resourceapi.Device, key string) string {
	for _, taint := range d.Taints {
		if taint.Key == key {
			return taint.Value + ":" + string(taint.Effect)
		}
	}
	return ""
}

// WaitUnhealthy waits until the slice shows device unhealthy with code:
// tainted where the release keeps taints, left out where it does not.
func WaitUnhealthy(t testing.TB, k *KubeEnv, device, code string) {
	t.Helper()
	WaitSlice(t, k, func(d []resourceapi.Device) bool {
		dev, ok := DeviceByName(d, device)
		if !TaintsOn(t) {
			return !ok
		}
		return ok && UnhealthyTaint(dev) == code+":NoSchedule"
	}, device+" unhealthy ("+code+")", func() string { return AgentLogTail(t, k) })
}

// WaitHealthy waits until the slice lists device without a taint.
func WaitHealthy(t testing.TB, k *KubeEnv, device string) {
	t.Helper()
	WaitSlice(t, k, func(d []resourceapi.Device) bool {
		dev, ok := DeviceByName(d, device)
		return ok && UnhealthyTaint(dev) == ""
	}, device+" healthy", func() string { return "" })
}

// SetFixturePort brings an HCA's port and its netdev down or up on the
// node, as the kernel would report a link loss.
func SetFixturePort(t *testing.T, k *KubeEnv, node *FixtureNode, ibdev, netdev string, up bool) {
	t.Helper()
	state, link := "1: DOWN", "down"
	if up {
		state, link = "4: ACTIVE", "up"
	}
	if err := os.WriteFile(node.Sys+"/class/infiniband/"+ibdev+"/ports/1/state", []byte(state+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, se, err := Run(k.InNode("ip", "link", "set", netdev, link)); err != nil {
		t.Fatalf("ip link set %s %s: %v\n%s", netdev, link, err, se)
	}
}

// CheckpointClaims lists the claims (namespace/name) the driver's
// checkpoint on the node holds.
func CheckpointClaims(t *testing.T, k *KubeEnv) []string {
	t.Helper()
	b, err := os.ReadFile(k.NodePath("/var/lib/kubelet/plugins/" + apis.Group + "/" + dradriver.CheckpointFile))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := dradriver.DecodeCheckpoint(dradriver.CheckpointFile, b)
	if err != nil {
		t.Fatalf("the driver's checkpoint: %v\n%s", err, b)
	}
	var out []string
	for _, p := range c.Claims {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	slices.Sort(out)
	return out
}

// WaitCheckpoint waits until the checkpoint holds exactly want.
func WaitCheckpoint(t *testing.T, k *KubeEnv, want ...string) {
	t.Helper()
	slices.Sort(want)
	var got []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		if got = CheckpointClaims(t, k); slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the driver's checkpoint holds %v, want %v\n%s", got, want, AgentLogTail(t, k))
		}
	}
}

// StandaloneClaimPod is a ResourceClaim ns/claim for one HCA of class,
// and a glibc pod using it; the claim outlives the pod.
func StandaloneClaimPod(ns, claim, class, pod string) string {
	return fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: %s
  namespace: %s
spec:
  devices:
    requests:
      - name: hca
        exactly:
          deviceClassName: %s
`, claim, ns, class) + "---\n" + GlibcPodManifest(ns, pod,
		"\n  resourceClaims:\n    - name: rdma\n      resourceClaimName: "+claim,
		"\n      resources:\n        claims:\n          - name: rdma")
}

// CheckTakenOver checks that, after the driver's process was replaced, the claim ns/name
// prepared by the old one is still the driver's: an address added to its
// HCA's netdev reaches the claim's status, and when pod goes the status
// entry is cleared and the checkpoint empties.
func CheckTakenOver(t *testing.T, k *KubeEnv, ns, name, pod, address string) {
	t.Helper()
	d := WaitDeviceStatus(t, k, ns, name, "an entry with networkData", func(d *resourceapi.AllocatedDeviceStatus) bool {
		return d != nil && d.NetworkData != nil
	})
	netdev := d.NetworkData.InterfaceName
	if _, se, err := Run(k.InNode("ip", "addr", "add", address, "dev", netdev)); err != nil {
		t.Fatalf("ip addr add %s dev %s: %v\n%s", address, netdev, err, se)
	}
	t.Cleanup(func() { _, _, _ = Run(k.InNode("ip", "addr", "del", address, "dev", netdev)) })
	WaitDeviceStatus(t, k, ns, name, "the address "+address+" added after the restart", func(d *resourceapi.AllocatedDeviceStatus) bool {
		return d != nil && d.NetworkData != nil && slices.Contains(d.NetworkData.IPs, address)
	})
	k.MustKubectl(t, "delete", "pod", "-n", ns, pod, "--wait=true", "--timeout=3m")
	WaitDeviceStatus(t, k, ns, name, "no entry of ours after the pod went", func(d *resourceapi.AllocatedDeviceStatus) bool { return d == nil })
	WaitCheckpoint(t, k)
}

// Device metadata (KEP-5304) as a container reads it.

// MetadataOfClaim is the file a container finds for request of a claim its
// pod names (resourceClaimName); MetadataOfTemplate for one made from a
// template, by the pod's entry (resourceClaims[].name). Written out, not
// taken from the library: they are what docs/kubernetes.md tells users.
func MetadataOfClaim(claim, request string) string {
	return "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/" + claim + "/" + request + "/" + apis.Group + "-metadata.json"
}

// MetadataOfTemplate is the file for request of a claim made from a
// template, by the pod's entry: see MetadataOfClaim.
func MetadataOfTemplate(entry, request string) string {
	return "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/" + entry + "/" + request + "/" + apis.Group + "-metadata.json"
}

// PodDeviceMetadata reads the metadata file at path in pod ns/name's
// container main and decodes it as a consumer would (the first version of
// the stream it knows, validated).
func PodDeviceMetadata(t *testing.T, k *KubeEnv, ns, pod, path string) metadata.DeviceMetadata {
	t.Helper()
	out := k.MustExecInPod(t, ns, pod, "main", "cat", path)
	var md metadata.DeviceMetadata
	if err := devicemetadata.DecodeMetadataFromStream(json.NewDecoder(strings.NewReader(out)), &md); err != nil {
		t.Fatalf("pod %s/%s: %s: %v\n%s", ns, pod, path, err, out)
	}
	return md
}

// MetadataDevice is the one device of a metadata file's one request,
// failing the test unless the file has exactly that.
func MetadataDevice(t *testing.T, md metadata.DeviceMetadata, request string) metadata.Device {
	t.Helper()
	if len(md.Requests) != 1 || md.Requests[0].Name != request || len(md.Requests[0].Devices) != 1 {
		t.Fatalf("metadata of claim %s/%s: requests %+v, want %s with one device", md.Namespace, md.Name, md.Requests, request)
	}
	return md.Requests[0].Devices[0]
}

// WithClaimConfig adds the driver's claim config (PodNetworkConfig), its fields given
// as YAML flow mappings' entries (e.g. "mode: none"), to a claim template
// from claimTemplate; requests (none: all) are those it applies to.
func WithClaimConfig(template, fields string, requests ...string) string {
	only := ""
	if len(requests) > 0 {
		only = "\n          requests: [" + strings.Join(requests, ", ") + "]"
	}
	return strings.Replace(template, "      requests:", `      config:
        - opaque:
            driver: rdma.example.com
            parameters: {apiVersion: rdma.example.com/v1alpha1, kind: PodNetworkConfig, `+fields+`}`+only+`
      requests:`, 1)
}
