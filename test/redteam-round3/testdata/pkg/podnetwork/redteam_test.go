package podnetwork_test

// Round 3's red-team reproductions (../shared/redteam/round3/pkg/podnet),
// ported to today's code: a claim's config goes through what the DRA
// driver does with it at prepare (dradriver.ClaimNetworkConfig: Decode,
// then the class's config and the claim's merged by MergeClassAndClaim),
// then podnetwork.Plan. They log what each attack gets now; they assert
// nothing.

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/dradriver"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
)

const rtDriver = "rdma.example.com"

// rtClaim is an allocated claim of request "hcas" whose allocation carries
// the DeviceClass's config (class, "" for none) and the claim's own.
func rtClaim(class, own string) *resourceapi.ResourceClaim {
	cfg := func(src resourceapi.AllocationConfigSource, raw string) resourceapi.DeviceAllocationConfiguration {
		return resourceapi.DeviceAllocationConfiguration{Source: src, DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: rtDriver, Parameters: runtime.RawExtension{Raw: []byte(raw)}},
		}}
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "c"}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	if class != "" {
		c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, cfg(resourceapi.AllocationConfigSourceClass, class))
	}
	c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, cfg(resourceapi.AllocationConfigSourceClaim, own))
	return c
}

// H1. Node eth3 holds 10.0.61.5/24; the fabric gateway is 10.0.61.1;
// another pod on this node already holds 10.0.61.200 from the range.
func TestRedTeamStaticAddressesAreNotChecked(t *testing.T) {
	raw := `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","mode":"sub-interface",
	  "addresses":["10.0.61.5/24","10.0.61.1/24","10.0.61.200/24","10.0.62.7/24"],
	  "routes":[{"destination":"0.0.0.0/0","gateway":"10.0.61.1"}]}`
	cfg, err := v1alpha1.Decode([]byte(raw))
	t.Logf("Decode of the claim's config: err=%v", err)
	merged, err := dradriver.ClaimNetworkConfig(rtClaim("", raw), rtDriver, "hcas")
	t.Logf("prepare (ClaimNetworkConfig), no class config: err=%v", err)
	if err == nil {
		dev := podnetwork.Device{IBDev: "mlx5_3", NetDev: "eth3", RoCE: true, Shared: true,
			Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.61.5/24")}}
		r, _ := podnetwork.ParseRange("10.0.61.200-10.0.61.220")
		pool := &podnetwork.Pool{Ranges: map[string][]podnetwork.Range{"eth3": {r}}, InUse: map[netip.Addr]bool{netip.MustParseAddr("10.0.61.200"): true}}
		a, ok, err := podnetwork.Plan(dev, merged, pool)
		t.Logf("ACCEPTED: ok=%v err=%v pod addrs=%v routes=%v", ok, err, a.Addrs, a.Routes)
	}

	// The DeviceClass (admin) says mode none; the claim (tenant) overrides it.
	classNone := `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","mode":"none"}`
	merged, err = dradriver.ClaimNetworkConfig(rtClaim(classNone, raw), rtDriver, "hcas")
	t.Logf("class {mode: none} + claim config -> mode %q, addresses %v, err=%v", merged.Mode, merged.Addresses, err)
	// The claim with its mode alone, under the class's mode none.
	modeOnly := `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","mode":"sub-interface"}`
	merged, err = dradriver.ClaimNetworkConfig(rtClaim(classNone, modeOnly), rtDriver, "hcas")
	t.Logf("class {mode: none} + claim {mode: sub-interface} -> mode %q, addresses %v, err=%v", merged.Mode, merged.Addresses, err)
	// A claim that grants itself the prefixes.
	self := strings.Replace(raw, `"mode"`, `"allowedPrefixes":["0.0.0.0/0"],"mode"`, 1)
	_, err = dradriver.ClaimNetworkConfig(rtClaim("", self), rtDriver, "hcas")
	t.Logf("claim that sets allowedPrefixes itself: err=%v", err)
	_ = cfg
}

// H5. Two nodes of one release: the same range, each its own Pool.
func TestRedTeamRangeCoveringTheSubnetAndSharedByNodes(t *testing.T) {
	for _, spec := range []string{"10.0.61.0/24", "10.0.61.200-10.0.61.220"} {
		ranges, err := podnetwork.ParseRanges(map[string]string{"eth3": spec})
		if err != nil {
			t.Fatal(err)
		}
		nodeA, nodeB := &podnetwork.Pool{Ranges: ranges}, &podnetwork.Pool{Ranges: ranges}
		a, errA := nodeA.Allocate(model.NetDev{Name: "eth3", Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.61.5/24")}, Gateways: []netip.Addr{netip.MustParseAddr("10.0.61.1")}})
		b, errB := nodeB.Allocate(model.NetDev{Name: "eth3", Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.61.7/24")}, Gateways: []netip.Addr{netip.MustParseAddr("10.0.61.1")}})
		t.Logf("range %q: node A's first pod gets %v (%v), node B's first pod gets %v (%v)", spec, a, errA, b, errB)
		// Without the gateway among the node's routes (a subnet-only rail):
		c, errC := (&podnetwork.Pool{Ranges: ranges}).Allocate(model.NetDev{Name: "eth3", Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.61.5/24")}})
		t.Logf("range %q, no route through a gateway: first pod gets %v (%v)", spec, c, errC)
	}
}

// M2. 600 addresses in one claim.
func TestRedTeamUnboundedAddressList(t *testing.T) {
	var addrs []string
	for i := range 600 {
		addrs = append(addrs, fmt.Sprintf("%q", fmt.Sprintf("10.0.%d.%d/16", 61+i/250, 1+i%250)))
	}
	raw := `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","mode":"sub-interface","addresses":[` + strings.Join(addrs, ",") + `]}`
	cfg, err := v1alpha1.Decode([]byte(raw))
	msg := fmt.Sprint(err)
	if i := strings.Index(msg, "addresses: "); i >= 0 {
		msg = msg[i:]
	}
	t.Logf("%d bytes of parameters (resource.k8s.io allows 10240): decoded %d addresses, err=...%s", len(raw), len(cfg.Addresses), msg)
}

// L1. Interface names the kernel or the pod network refuses.
func TestRedTeamInterfaceNames(t *testing.T) {
	for _, n := range []string{"net%d", "eth0", "a\rb", "a\vb", "a\fb", "rdmamv00006303"} {
		err := v1alpha1.PodNetworkConfig{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.Kind, InterfaceName: n}.Validate()
		t.Logf("interfaceName %q: Validate -> %v", n, err)
	}
}
