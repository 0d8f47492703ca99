package dradriver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/devicemetadata"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/attach"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// attrsByName is a metadata's attributes under the slice's key type.
func attrsByName(md *kubeletplugin.DeviceMetadata) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	out := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for k, v := range md.Attributes {
		out[resourceapi.QualifiedName(k)] = v
	}
	return out
}

// Every device of the SR-IOV fixture node (a PF, its VFs, a PF without
// VFs) carries in its metadata exactly the attributes the slice publishes
// for it: with sharing on and off, and for an unhealthy device on a
// server that drops taints, which the slice leaves out and a claim
// prepared before keeps (its metadata says healthy: false).
func TestMetadataAttributesAreTheSlices(t *testing.T) {
	tr := fixture.BuildBundledTrees(t, "sriov", false)
	res, err := discover.Discover(discover.Options{Roots: model.Roots{Sysfs: tr.Sys, Dev: tr.Dev}, SkipNet: true})
	if err != nil {
		t.Fatal(err)
	}
	inv := BuildInventory(res.Node, config.Default().NCCL, nil)
	if len(inv.Devices) != 18 {
		t.Fatalf("%d devices on the sriov node, want 18", len(inv.Devices))
	}
	// Placeholder device nodes (no mknod) would leave every device
	// unhealthy: one is, the others are not.
	for name := range inv.Problems {
		inv.Problems[name] = health.Problem{}
	}
	inv.Problems["mlx5-5"] = health.Problem{Code: "PortDown", Reason: "no ACTIVE port"}
	for _, shown := range []Health{{Driver: testDriver, Taints: true, Sharing: true}, {Driver: testDriver}} {
		published, _ := SliceDevices(inv, map[string]resourceapi.Device{}, shown)
		if !shown.Taints && len(published) != len(inv.Devices)-1 {
			t.Fatalf("without taints the slice has %d devices, want all but the unhealthy one", len(published))
		}
		for _, dev := range inv.Devices {
			c := claim("u1", result("hca", testDriver, dev.Name))
			got := ClaimMetadata(c, testDriver, []kubeletplugin.Device{{Requests: []string{"hca"}, PoolName: "node-a", DeviceName: dev.Name}}, inv, shown, nil)
			if len(got) != 1 || got[0].Metadata == nil {
				t.Fatalf("%s: metadata %+v", dev.Name, got)
			}
			want, inSlice := sliceDevice(published, dev.Name)
			if !inSlice {
				want, _ = shown.Published(inv, dev.Name)
				if want.Attributes["healthy"].BoolValue == nil || *want.Attributes["healthy"].BoolValue {
					t.Errorf("%s left out of the slice, described healthy", dev.Name)
				}
			}
			if attrs := attrsByName(got[0].Metadata); !reflect.DeepEqual(attrs, want.Attributes) {
				t.Errorf("%s (sharing %v): metadata attributes\n%v\nslice's\n%v", dev.Name, shown.Sharing, attrs, want.Attributes)
			}
			if got[0].Metadata.NetworkData != nil {
				t.Errorf("%s: networkData %+v before the pod holds an interface", dev.Name, got[0].Metadata.NetworkData)
			}
		}
	}
}

// sliceDevice is the device of devs named name.
func sliceDevice(devs []resourceapi.Device, name string) (resourceapi.Device, bool) {
	i := slices.IndexFunc(devs, func(d resourceapi.Device) bool { return d.Name == name })
	if i < 0 {
		return resourceapi.Device{}, false
	}
	return devs[i], true
}

// Once the claim's pod holds an interface of the HCA, its metadata names
// it; a claim with admin access on the same HCA names none.
func TestMetadataNetworkData(t *testing.T) {
	inv := BuildInventory(testNode(), config.Default().NCCL, nil)
	devices := []kubeletplugin.Device{{Requests: []string{"hca"}, PoolName: "node-a", DeviceName: "mlx5-1"}}
	inPod := map[string]attach.Observed{"mlx5_1": {Name: "net1", HWAddr: "02:00:00:00:00:09", Addrs: []netip.Prefix{netip.MustParsePrefix("10.1.0.7/24")}}}
	shown := Health{Driver: testDriver, Taints: true}
	got := ClaimMetadata(claim("job", result("hca", testDriver, "mlx5-1")), testDriver, devices, inv, shown, inPod)
	want := &resourceapi.NetworkDeviceData{InterfaceName: "net1", HardwareAddress: "02:00:00:00:00:09", IPs: []string{"10.1.0.7/24"}}
	if nd := got[0].Metadata.NetworkData; !reflect.DeepEqual(nd, want) {
		t.Errorf("networkData %+v, want %+v", nd, want)
	}
	if devices[0].Metadata != nil {
		t.Error("ClaimMetadata changed the devices it was given")
	}
	admin := ClaimMetadata(claim("admin", adminResult("hca", "mlx5-1")), testDriver, devices, inv, shown, inPod)
	if admin[0].Metadata == nil || admin[0].Metadata.NetworkData != nil || len(admin[0].Metadata.Attributes) == 0 {
		t.Errorf("admin's metadata %+v; want the attributes, no networkData", admin[0].Metadata)
	}
}

// podNetworkStub is the pod network as the driver reads it: which
// interfaces each pod holds.
type podNetworkStub struct {
	mu     sync.Mutex
	ifaces map[types.UID]map[string]attach.Observed
}

func (p *podNetworkStub) Run(ctx context.Context) error { <-ctx.Done(); return nil }

func (p *podNetworkStub) Interfaces(pod types.UID) map[string]attach.Observed {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ifaces[pod]
}

func (p *podNetworkStub) set(pod types.UID, ifaces map[string]attach.Observed) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ifaces[pod] = ifaces
}

// metadataClaims are a claim a pod names (direct, for pod-1) and one made
// from a template for pod-2's entry "rdma", each asking mlx5_1 or mlx5_0.
func metadataClaims() (direct, fromTemplate *resourceapi.ResourceClaim) {
	direct = reserved(claim("1direct", result("hca", testDriver, "mlx5-1")), "pod-1")
	fromTemplate = reserved(claim("2templ", result("hca", testDriver, "mlx5-0")), "pod-2")
	fromTemplate.Annotations = map[string]string{resourceapi.PodResourceClaimAnnotation: "rdma"}
	return direct, fromTemplate
}

// servingDriver runs a driver with device metadata on or off, over a fake API server holding claims, and returns it once its
// kubelet plugin serves, with a client of its DRA socket.
func servingDriver(t *testing.T, pods *podNetworkStub, deviceMetadata bool, claims ...*resourceapi.ResourceClaim) (*Driver, drapb.DRAPluginClient, string) {
	t.Helper()
	var objects []runtime.Object
	for _, c := range claims {
		objects = append(objects, c)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	root := t.TempDir()
	cdiDir := filepath.Join(root, "cdi")
	d := newDriver(t, Options{
		Name: testDriver, NodeName: "node-a", Client: fake.NewClientset(objects...), Log: log,
		PluginDir: filepath.Join(root, "plugins"), RegistrarDir: filepath.Join(root, "registry"),
		DeviceMetadata: deviceMetadata, CDIDir: cdiDir,
	})
	if err := os.MkdirAll(d.RegistrarDir, 0o750); err != nil {
		t.Fatal(err)
	}
	d.PodNetwork = pods
	d.Update(testNode(), config.Default())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	for serving := false; !serving; {
		select {
		case err := <-done:
			t.Fatalf("Run ended before serving: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		d.mu.Lock()
		serving = d.helper != nil
		d.mu.Unlock()
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(d.DataDir(), "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return d, drapb.NewDRAPluginClient(conn), cdiDir
}

// metadataMount is the mount the helper's CDI spec for claim uid's
// request gives a container: the file on the node, the path inside.
func metadataMount(t *testing.T, cdiDir string, uid types.UID, request string) *cdispec.Mount {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cdiDir, testDriver+"_metadata_"+string(uid)+"_"+request+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Devices) != 1 || len(spec.Devices[0].ContainerEdits.Mounts) != 1 {
		t.Fatalf("CDI spec %s", b)
	}
	return spec.Devices[0].ContainerEdits.Mounts[0]
}

func readMetadata(t *testing.T, path string) metadata.DeviceMetadata {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var md metadata.DeviceMetadata
	if err := devicemetadata.DecodeMetadataFromStream(json.NewDecoder(bytes.NewReader(b)), &md); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	return md
}

// The whole path through the kubelet plugin helper: a prepare answers
// each claim with its metadata's CDI device besides the HCA's, whose spec
// mounts the file at the path KEP-5304 gives a direct claim (its name)
// and a template's claim (the pod's entry); the file carries the slice's
// attributes. Once the pod holds its interface, the file names it (a new
// generation), and it is not written again while that holds; unprepare
// removes both.
func TestDeviceMetadataThroughTheHelper(t *testing.T) {
	pods := &podNetworkStub{ifaces: map[types.UID]map[string]attach.Observed{}}
	direct, fromTemplate := metadataClaims()
	d, plugin, cdiDir := servingDriver(t, pods, true, direct, fromTemplate)
	ctx := context.Background()
	var req []*drapb.Claim
	for _, c := range []*resourceapi.ResourceClaim{direct, fromTemplate} {
		req = append(req, &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	resp, err := plugin.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: req})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		claim     *resourceapi.ResourceClaim
		hca, path string
	}{
		{direct, "mlx5_1", "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/c-1direct/hca/rdma.example.com-metadata.json"},
		{fromTemplate, "mlx5_0", "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/rdma/hca/rdma.example.com-metadata.json"},
	} {
		r := resp.Claims[string(tc.claim.UID)]
		if r == nil || r.Error != "" || len(r.Devices) != 1 {
			t.Fatalf("prepare %s: %+v", tc.claim.Name, r)
		}
		want := []string{"rdma.example.com/hca=" + tc.hca, "rdma.example.com/metadata=" + string(tc.claim.UID) + "_hca"}
		if !slices.Equal(r.Devices[0].CdiDeviceIds, want) {
			t.Errorf("%s: CDI devices %v, want %v", tc.claim.Name, r.Devices[0].CdiDeviceIds, want)
		}
		mount := metadataMount(t, cdiDir, tc.claim.UID, "hca")
		if mount.ContainerPath != tc.path || !slices.Equal(mount.Options, []string{"ro", "bind"}) {
			t.Errorf("%s: mounted at %s %v, want %s read-only", tc.claim.Name, mount.ContainerPath, mount.Options, tc.path)
		}
		md := readMetadata(t, mount.HostPath)
		if md.Name != tc.claim.Name || md.Generation != 1 || len(md.Requests) != 1 || len(md.Requests[0].Devices) != 1 {
			t.Fatalf("%s: metadata %+v", tc.claim.Name, md)
		}
		dev := md.Requests[0].Devices[0]
		d.mu.Lock()
		published, _ := d.shown().Published(d.inv, dev.Name)
		d.mu.Unlock()
		if !reflect.DeepEqual(dev.Attributes, published.Attributes) || dev.NetworkData != nil {
			t.Errorf("%s: metadata device %+v; want the slice's attributes %v and no networkData", tc.claim.Name, dev, published.Attributes)
		}
	}

	pods.set("pod-1", map[string]attach.Observed{"mlx5_1": {Name: "net1", HWAddr: "02:00:00:00:00:09", Addrs: []netip.Prefix{netip.MustParsePrefix("10.1.0.7/24")}}})
	for range 2 { // the second time, nothing changed: nothing written
		d.PodNetworkChanged()
	}
	md := readMetadata(t, metadataMount(t, cdiDir, direct.UID, "hca").HostPath)
	want := &resourceapi.NetworkDeviceData{InterfaceName: "net1", HardwareAddress: "02:00:00:00:00:09", IPs: []string{"10.1.0.7/24"}}
	if nd := md.Requests[0].Devices[0].NetworkData; md.Generation != 2 || !reflect.DeepEqual(nd, want) {
		t.Errorf("after the attach: generation %d, networkData %+v; want generation 2, %+v", md.Generation, nd, want)
	}
	if md := readMetadata(t, metadataMount(t, cdiDir, fromTemplate.UID, "hca").HostPath); md.Generation != 1 {
		t.Errorf("the other pod's claim was written again (generation %d): its pod holds nothing", md.Generation)
	}

	out, err := plugin.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: req})
	if err != nil {
		t.Fatal(err)
	}
	for uid, r := range out.Claims {
		if r.Error != "" {
			t.Errorf("unprepare %s: %s", uid, r.Error)
		}
	}
	left := claimSpecs(t, cdiDir)
	metaLeft, _ := filepath.Glob(filepath.Join(d.DataDir(), "dra-device-metadata", "*"))
	if len(left)+len(metaLeft) != 0 {
		t.Errorf("after unprepare: %v %v left", left, metaLeft)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.prepared) != 0 {
		t.Errorf("still prepared: %v", d.prepared)
	}
}

// claimSpecs are the spec files in cdiDir but the claim class's, which the
// running driver wrote when it started and keeps whatever it prepares.
func claimSpecs(t *testing.T, cdiDir string) []string {
	t.Helper()
	all, _ := filepath.Glob(filepath.Join(cdiDir, "*"))
	static := filepath.Join(cdiDir, "rdma.example.com-claim.json")
	if !slices.Contains(all, static) {
		t.Errorf("the running driver did not write %s: %v", static, all)
	}
	return slices.DeleteFunc(all, func(p string) bool { return p == static })
}

// With dra.device_metadata off a prepare answers with the HCA's CDI device
// alone, and nothing is written for the claim.
func TestNoDeviceMetadataWhenOff(t *testing.T) {
	pods := &podNetworkStub{ifaces: map[types.UID]map[string]attach.Observed{}}
	direct, _ := metadataClaims()
	d, plugin, cdiDir := servingDriver(t, pods, false, direct)
	resp, err := plugin.NodePrepareResources(context.Background(), &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: direct.Namespace, Name: direct.Name, Uid: string(direct.UID)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Claims[string(direct.UID)]
	if r == nil || r.Error != "" || len(r.Devices) != 1 || !slices.Equal(r.Devices[0].CdiDeviceIds, []string{"rdma.example.com/hca=mlx5_1"}) {
		t.Fatalf("prepare: %+v; want mlx5_1's CDI device alone", r)
	}
	pods.set("pod-1", map[string]attach.Observed{"mlx5_1": {Name: "net1"}})
	d.PodNetworkChanged()
	written := claimSpecs(t, cdiDir)
	meta, _ := filepath.Glob(filepath.Join(d.DataDir(), "dra-device-metadata"))
	if len(written)+len(meta) != 0 {
		t.Errorf("metadata written with the feature off: %v %v", written, meta)
	}
}
