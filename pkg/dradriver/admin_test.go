package dradriver

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/attach"
)

// adminResult is result allocated with admin access, as the scheduler
// writes it for a request with adminAccess: true.
func adminResult(request, device string) resourceapi.DeviceRequestAllocationResult {
	r := result(request, testDriver, device)
	r.AdminAccess = ptr(true)
	return r
}

// reserved reserves c for pod, as the scheduler does.
func reserved(c *resourceapi.ResourceClaim, pod types.UID) *resourceapi.ResourceClaim {
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod-" + string(pod), UID: pod}}
	return c
}

func unprepare(t *testing.T, d *Driver, uids ...types.UID) {
	t.Helper()
	var claims []kubeletplugin.NamespacedObject
	for _, uid := range uids {
		claims = append(claims, kubeletplugin.NamespacedObject{UID: uid})
	}
	out, err := d.UnprepareResourceClaims(context.Background(), claims)
	if err != nil {
		t.Fatal(err)
	}
	for uid, err := range out {
		if err != nil {
			t.Fatalf("unprepare %s: %v", uid, err)
		}
	}
}

// An admin's claim on an HCA a job's claim holds is prepared with the
// HCA's CDI device; its unprepare leaves the job's hold as it was. A
// claim without admin access is still refused, before and after.
func TestAdminClaimOnAHeldDevice(t *testing.T) {
	d := startedDriver(t, t.TempDir())
	if r := prepareOne(t, d, claim("job", result("r", testDriver, "mlx5-1"))); r.Err != nil {
		t.Fatal(r.Err)
	}
	admin := claim("admin", adminResult("r", "mlx5-1"))
	r := prepareOne(t, d, admin)
	if r.Err != nil || !slices.Equal(cdiIDs(r), []string{"rdma.example.com/hca=mlx5_1"}) {
		t.Fatalf("admin claim on a held device: %+v; want the HCA's CDI device", r)
	}
	if owner := d.holders["mlx5-1"]; owner != "job" {
		t.Errorf("mlx5-1 held by %q after the admin's prepare; want the job's claim", owner)
	}
	unprepare(t, d, "admin")
	if owner := d.holders["mlx5-1"]; owner != "job" {
		t.Errorf("mlx5-1 held by %q after the admin's unprepare; want the job's claim", owner)
	}
	if r := prepareOne(t, d, claim("other", result("r", testDriver, "mlx5-1"))); r.Err == nil || !strings.Contains(r.Err.Error(), "prepared for claim job") {
		t.Errorf("a plain claim on the job's device after the admin left: %+v; want it refused", r)
	}
	if _, ok := d.prepared["job"]; !ok {
		t.Error("the job's claim is no longer prepared")
	}
}

// An admin's claim on a free HCA takes no hold: a job's claim prepared
// after it gets the HCA.
func TestAdminClaimTakesNoHold(t *testing.T) {
	d := startedDriver(t, t.TempDir())
	if r := prepareOne(t, d, claim("admin", adminResult("r", "mlx5-1"))); r.Err != nil {
		t.Fatal(r.Err)
	}
	if owner, held := d.holders["mlx5-1"]; held {
		t.Fatalf("mlx5-1 held by %s after an admin's prepare; want no hold", owner)
	}
	if r := prepareOne(t, d, claim("job", result("r", testDriver, "mlx5-1"))); r.Err != nil {
		t.Fatalf("the job's claim beside the admin's: %v", r.Err)
	}
}

// A pod whose claim has an HCA with admin access gets no interface of it:
// the netdev stays with the pod of the claim that holds it.
func TestNoPodNetworkForAnAdminClaim(t *testing.T) {
	node := testNode()
	node.NetDevs = []model.NetDev{{Name: "eth1", Addrs: []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24")}}}
	inv := BuildInventory(node, config.Default().NCCL, nil)
	facts := podnetwork.NodeFacts{Node: node, NodeIPsKnown: true}
	device := []kubeletplugin.Device{{Requests: []string{"r"}, PoolName: "node-a", DeviceName: "mlx5-1"}}
	pool := testPool()

	job := map[types.UID]PreparedClaim{"job": {Claim: reserved(claim("job", result("r", testDriver, "mlx5-1")), "job-pod"), Devices: device}}
	if got, err := PodAttachments(job, "job-pod", testDriver, inv, facts, pool); err != nil || len(got) != 1 || got[0].HostNetDev != "eth1" {
		t.Fatalf("the job's pod: %+v %v; want eth1", got, err)
	}
	admin := map[types.UID]PreparedClaim{"admin": {Claim: reserved(claim("admin", adminResult("r", "mlx5-1")), "admin-pod"), Devices: device}}
	if got, err := PodAttachments(admin, "admin-pod", testDriver, inv, facts, pool); err != nil || len(got) != 0 {
		t.Errorf("the admin's pod: %+v %v; want nothing attached", got, err)
	}
}

// An admin's claim status says the device is prepared and how it is, and
// carries neither networkData nor NCCL settings: those are its holder's.
func TestAdminClaimStatusHasNoNetwork(t *testing.T) {
	node := testNode()
	inv := BuildInventory(node, config.Default().NCCL, nil)
	since := metav1.Now()
	inPod := map[string]attach.Observed{"mlx5_1": {Name: "net1", Addrs: []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24")}}}
	job := DeviceStatuses(claim("job", result("r", testDriver, "mlx5-1")), testDriver, inv, nil, node, config.Default().NCCL, since, inPod)
	if len(job) != 1 || job[0].NetworkData == nil || job[0].Data == nil {
		t.Fatalf("the job's status: %+v; want networkData and data", job)
	}
	admin := DeviceStatuses(claim("admin", adminResult("r", "mlx5-1")), testDriver, inv, nil, node, config.Default().NCCL, since, inPod)
	if len(admin) != 1 || admin[0].NetworkData != nil || admin[0].Data != nil {
		t.Fatalf("the admin's status: %+v; want no networkData, no data", admin)
	}
	if conds := []string{admin[0].Conditions[0].Type, admin[0].Conditions[1].Type}; !slices.Equal(conds, []string{"Ready", "Healthy"}) {
		t.Errorf("the admin's conditions %v; want Ready and Healthy", conds)
	}
}

// Admin access survives the checkpoint: a new process takes the job's
// claim for the holder and the admin's for none, and the admin's
// unprepare there leaves the job's hold.
func TestAdminClaimAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	old := startedDriver(t, dir)
	for _, c := range []*resourceapi.ResourceClaim{claim("job", result("r", testDriver, "mlx5-1")), claim("admin", adminResult("r", "mlx5-1"))} {
		if r := prepareOne(t, old, c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	d := startedDriver(t, dir)
	if len(d.prepared) != 2 {
		t.Fatalf("taken over %d claims, want 2", len(d.prepared))
	}
	if p := d.prepared["admin"]; !isAdmin(p.Claim, testDriver, p.Devices[0]) {
		t.Errorf("the admin's claim came back without admin access: %+v", p.Claim.Status.Allocation)
	}
	if owner := d.holders["mlx5-1"]; owner != "job" {
		t.Fatalf("mlx5-1 held by %q after the restart; want the job's claim", owner)
	}
	unprepare(t, d, "admin")
	if owner := d.holders["mlx5-1"]; owner != "job" {
		t.Errorf("mlx5-1 held by %q after the admin's unprepare; want the job's claim", owner)
	}
	if owner := startedDriver(t, dir).holders["mlx5-1"]; owner != "job" {
		t.Errorf("mlx5-1 held by %q in the next process; want the job's claim", owner)
	}
}
