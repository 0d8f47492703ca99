package dradriver

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/statefile"
)

// startedDriver is a driver as Run leaves it before the kubelet calls:
// the node seen, the checkpoint in dir taken over.
func startedDriver(t *testing.T, dir string) *Driver {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	d := newDriver(t, Options{Name: testDriver, NodeName: "node-a", Log: log})
	d.Update(testNode(), config.Default())
	d.mu.Lock()
	d.restore(dir)
	d.mu.Unlock()
	return d
}

func prepareOne(t *testing.T, d *Driver, c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	t.Helper()
	out, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatal(err)
	}
	return out[c.UID]
}

// A new process (a crash, a helm upgrade) takes over what the old one
// prepared: the device stays held, the claim's status stays tracked, and
// its unprepare clears both and the file.
func TestDriverTakesOverPreparedClaims(t *testing.T) {
	dir := t.TempDir()
	old := startedDriver(t, dir)
	held := claim("a", result("r", testDriver, "mlx5-1"))
	held.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-scheduler"}}
	if r := prepareOne(t, old, held); r.Err != nil {
		t.Fatal(r.Err)
	}
	since := old.prepared["a"].Since

	d := startedDriver(t, dir)
	p, ok := d.prepared["a"]
	if !ok || p.Since != since || len(p.Devices) != 1 || p.Devices[0].DeviceName != "mlx5-1" || p.Claim.ManagedFields != nil {
		t.Fatalf("taken over: %+v (ok %v)", p, ok)
	}
	if r := prepareOne(t, d, claim("b", result("r", testDriver, "mlx5-1"))); r.Err == nil || !strings.Contains(r.Err.Error(), "prepared for claim a") {
		t.Fatalf("a second claim on the held device: %+v", r)
	}
	if _, tracked := d.statuses.claims["a"]; !tracked {
		t.Fatal("the taken-over claim's status is not kept current")
	}
	// The kubelet retries a prepare the old process never answered: the
	// same answer, the first time kept.
	if r := prepareOne(t, d, held); r.Err != nil || d.prepared["a"].Since != since {
		t.Fatalf("prepare again: %+v, since %v (was %v)", r, d.prepared["a"].Since, since)
	}

	out, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "a"}})
	if err != nil || out["a"] != nil {
		t.Fatalf("unprepare: %v %v", out, err)
	}
	if t2, _ := d.statuses.claims["a"]; t2 == nil || !t2.gone {
		t.Error("unprepare did not clear the taken-over claim's status")
	}
	c, err := loadCheckpoint(filepath.Join(dir, CheckpointFile), testDriver)
	if err != nil || len(c) != 0 {
		t.Fatalf("checkpoint after unprepare: %+v %v", c, err)
	}
	if r := prepareOne(t, startedDriver(t, dir), claim("b", result("r", testDriver, "mlx5-1"))); r.Err != nil {
		t.Fatalf("the freed device for another claim: %v", r.Err)
	}
}

// A checkpoint that cannot be written fails the prepare, and the device
// is not held: nothing is prepared that a restart would forget.
func TestPrepareFailsWithoutACheckpoint(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(parent, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := startedDriver(t, filepath.Join(parent, "plugin"))
	r := prepareOne(t, d, claim("a", result("r", testDriver, "mlx5-1")))
	if r.Err == nil || !strings.Contains(r.Err.Error(), CheckpointFile) {
		t.Fatalf("prepare without a checkpoint: %+v", r)
	}
	if len(d.holders) != 0 || len(d.prepared) != 0 {
		t.Errorf("left held: %v, prepared %v", d.holders, d.prepared)
	}
	out, _ := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "a"}})
	if out["a"] == nil {
		t.Error("unprepare reported success without writing the checkpoint")
	}
}

func TestLoadCheckpointSetsABadFileAside(t *testing.T) {
	for name, body := range map[string]string{
		"not JSON":      "{",
		"other version": `{"version":99,"claims":{}}`,
		"wrong claim":   `{"version":1,"claims":{"a":{"claim":{"metadata":{"uid":"b"}}}}}`,
		"wrong claim 2": `{"version":2,"claims":{"a":{"uid":"b","devices":[]}}}`,
		"bad quantity":  `{"version":2,"claims":{"a":{"uid":"a","devices":[{"pool":"node-a","device":"mlx5-1","consumedCapacity":{"bandwidth":"lots"}}]}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), CheckpointFile)
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := loadCheckpoint(path, testDriver)
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "set aside") || len(c) != 0 {
				t.Fatalf("got %+v, %v", c, err)
			}
			asides, _ := filepath.Glob(statefile.SetAsidePattern(path))
			if len(asides) != 1 || !strings.Contains(err.Error(), asides[0]) {
				t.Fatalf("set-aside copies %v; the error: %v", asides, err)
			}
			if b, _ := os.ReadFile(asides[0]); string(b) != body {
				t.Errorf("the bad file was not kept as %s: %q", asides[0], b)
			}
		})
	}
	c, err := loadCheckpoint(filepath.Join(t.TempDir(), "none.json"), testDriver)
	if err != nil || c == nil {
		t.Errorf("missing file: %+v %v", c, err)
	}
}

// The e2e fault tests set these names in CrashEnv; they are an interface.
func TestFaultPointNames(t *testing.T) {
	got := []statefile.FaultPoint{PrepareBeforeCheckpoint, PrepareAfterCheckpoint, UnprepareBeforeCheckpoint, UnprepareAfterCheckpoint}
	want := []statefile.FaultPoint{"prepare-before-checkpoint", "prepare-after-checkpoint", "unprepare-before-checkpoint", "unprepare-after-checkpoint"}
	if !slices.Equal(got, want) || CrashEnv != "RDMA_CDI_DRA_CRASH_ONCE_AT" {
		t.Errorf("fault points %v under %s, want %v under RDMA_CDI_DRA_CRASH_ONCE_AT", got, CrashEnv, want)
	}
}
