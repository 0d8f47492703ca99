package dradriver

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/pkg/statefile"
)

// releasedCheckpoint is the prepared-claims.json the previous release's
// saveCheckpoint wrote (version 1, captured from that code): claim
// ml/trainer-hcas holds mlx5-1 whole (moved into its pod by its config)
// and a 50G share of mlx5-0, reserved for pod trainer-0.
const releasedCheckpoint = "testdata/prepared-claims-v1.json"

const releasedClaim = types.UID("claim-uid-1")

// releasedClaimAsWritten is the claim the released file holds, decoded as
// that release did: the reference the rebuilt claim must answer like.
func releasedClaimAsWritten(t *testing.T) PreparedClaim {
	t.Helper()
	b, err := os.ReadFile(releasedCheckpoint)
	if err != nil {
		t.Fatal(err)
	}
	var v1 struct {
		Claims map[types.UID]struct {
			Claim   *resourceapi.ResourceClaim `json:"claim"`
			Devices []kubeletplugin.Device     `json:"devices"`
			Since   metav1.Time                `json:"since"`
		} `json:"claims"`
	}
	if err := json.Unmarshal(b, &v1); err != nil {
		t.Fatal(err)
	}
	p := v1.Claims[releasedClaim]
	return PreparedClaim{Claim: p.Claim, Devices: p.Devices, Since: p.Since}
}

// A driver of this release takes over the claims the last release
// prepared: the claim is known with its devices, its HCA stays held, its
// status tracked, and everything read back of it (statuses, holders, pod
// networking) comes out as from the claim itself. Its next save is
// version 2, which reads back the same.
func TestDriverTakesOverTheLastReleasesCheckpoint(t *testing.T) {
	b, err := os.ReadFile(releasedCheckpoint)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CheckpointFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	d := startedDriver(t, dir)
	p, ok := d.prepared[releasedClaim]
	if !ok || p.Claim.Namespace != "ml" || p.Claim.Name != "trainer-hcas" || p.Claim.UID != releasedClaim {
		t.Fatalf("the released claim is not known: %+v (found %v)", p, ok)
	}
	if want := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC); !p.Since.Equal(&metav1.Time{Time: want}) {
		t.Errorf("prepared since %v, want %v", p.Since, want)
	}
	share := types.UID("share-1")
	wantDevices := []kubeletplugin.Device{
		{Requests: []string{"hcas"}, PoolName: "node-a", DeviceName: "mlx5-1", CDIDeviceIDs: []string{"rdma.example.com/hca=mlx5_1"}},
		{Requests: []string{"shared"}, PoolName: "node-a", DeviceName: "mlx5-0", CDIDeviceIDs: []string{"rdma.example.com/hca=mlx5_0"}, ShareID: &share},
	}
	if !reflect.DeepEqual(p.Devices, wantDevices) {
		t.Errorf("devices %+v, want %+v", p.Devices, wantDevices)
	}
	if r := prepareOne(t, d, claim("other", result("r", testDriver, "mlx5-1"))); r.Err == nil || !strings.Contains(r.Err.Error(), "prepared for claim "+string(releasedClaim)) {
		t.Errorf("another claim on the released claim's HCA: %+v", r)
	}
	if _, tracked := d.statuses.claims[releasedClaim]; !tracked {
		t.Error("the released claim's status is not kept current")
	}
	assertReadsLike(t, releasedClaimAsWritten(t), p)

	// Saved again (any prepare or unprepare does), it is version 2 and
	// reads back the same.
	if _, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "none"}}); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(filepath.Join(dir, CheckpointFile))
	if !strings.HasPrefix(string(b), `{"version":2,`) || strings.Contains(string(b), "PoolName") {
		t.Errorf("saved again: %s", b)
	}
	again := startedDriver(t, dir)
	if !reflect.DeepEqual(again.prepared, d.prepared) {
		t.Errorf("version 2 read back as %+v, want %+v", again.prepared, d.prepared)
	}
	if asides, _ := filepath.Glob(statefile.SetAsidePattern(filepath.Join(dir, CheckpointFile))); len(asides) != 0 {
		t.Errorf("a good file was set aside: %v", asides)
	}
	c, err := DecodeCheckpoint(releasedCheckpoint, b)
	if cc := c.Claims[releasedClaim]; err != nil || cc.Namespace != "ml" || cc.Name != "trainer-hcas" || len(cc.Devices) != 2 || len(cc.Configs) != 1 {
		t.Errorf("DecodeCheckpoint: %+v %v", c, err)
	}
}

// assertReadsLike checks that what the driver reads of a prepared claim
// (claim statuses, holder metrics, pod attachments) is the same for the
// rebuilt claim as for the one the kubelet gave.
func assertReadsLike(t *testing.T, want, got PreparedClaim) {
	t.Helper()
	node := testNode()
	node.NetDevs = []model.NetDev{
		{Name: "eth0", Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24")}},
		{Name: "eth1", Addrs: []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24")}},
	}
	cfg := config.Default()
	inv := BuildInventory(node, cfg.NCCL, nil)
	since := metav1.NewTime(time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC))
	statuses := func(p PreparedClaim) []resourceapi.AllocatedDeviceStatus {
		return DeviceStatuses(p.Claim, testDriver, inv, nil, node, cfg.NCCL, since, nil)
	}
	if w, g := statuses(want), statuses(got); len(w) != 2 || !reflect.DeepEqual(w, g) {
		t.Errorf("claim statuses %+v, want %+v", g, w)
	}
	if w, g := ClaimHolders(want.Claim, want.Devices, inv), ClaimHolders(got.Claim, got.Devices, inv); len(w) != 2 || !reflect.DeepEqual(w, g) {
		t.Errorf("holders %+v, want %+v", g, w)
	}
	attachments := func(p PreparedClaim) []podnetwork.Attachment {
		out, err := PodAttachments(map[types.UID]PreparedClaim{releasedClaim: p}, "pod-uid-1", testDriver, inv, podnetwork.NodeFacts{Node: node, NodeIPsKnown: true}, testPool())
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	w, g := attachments(want), attachments(got)
	if !reflect.DeepEqual(w, g) || len(w) != 2 || !slices.ContainsFunc(w, func(a podnetwork.Attachment) bool { return a.Device == "mlx5_1" && a.Mode == "move" }) {
		t.Errorf("pod attachments %+v, want %+v (mlx5_1 moved)", g, w)
	}
}
