package dradriver

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes/fake"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
)

const claimNone = "rdma.example.com/claim=nccl-plugins-none"

// A request whose config says ncclPlugins: none gets the claim device with
// its first HCA, once; a request without it, or whose claim config says
// auto over the class's none, gets none; a bad value fails the prepare.
func TestPrepareClaimCarriesNCCLPluginsNone(t *testing.T) {
	inv := BuildInventory(testNode(), config.Default().NCCL, nil)
	c := claim("u1", result("hcas", testDriver, "mlx5-1"), result("hcas", testDriver, "mlx5-ib0"), result("other", testDriver, "mlx5-0"))
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{
		netConfig(resourceapi.AllocationConfigSourceClaim, `{`+header+`,"ncclPlugins":"none"}`, "hcas"),
	}
	r := PrepareClaim(c, testDriver, "node-a", "rdma.example.com/hca", inv)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	want := [][]string{{"rdma.example.com/hca=mlx5_1", claimNone}, {"rdma.example.com/hca=mlx5_ib0"}, {"rdma.example.com/hca=mlx5_0"}}
	for i, d := range r.Devices {
		if !slices.Equal(d.CDIDeviceIDs, want[i]) {
			t.Errorf("device %s: CDI IDs %v, want %v", d.DeviceName, d.CDIDeviceIDs, want[i])
		}
	}

	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{
		netConfig(resourceapi.AllocationConfigSourceClass, `{`+header+`,"ncclPlugins":"none"}`),
		netConfig(resourceapi.AllocationConfigSourceClaim, `{`+header+`,"ncclPlugins":"auto"}`, "hcas"),
	}
	r = PrepareClaim(c, testDriver, "node-a", "rdma.example.com/hca", inv)
	if got := cdiIDs(r); r.Err != nil || slices.Contains(got[:2], claimNone) || !slices.Contains(got[2:], claimNone) {
		t.Errorf("class none, claim auto for hcas: CDI IDs %v (%v); want the claim device on the other request alone", got, r.Err)
	}

	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{
		netConfig(resourceapi.AllocationConfigSourceClaim, `{`+header+`,"ncclPlugins":"off"}`),
	}
	if r := PrepareClaim(c, testDriver, "node-a", "rdma.example.com/hca", inv); r.Err == nil {
		t.Error("ncclPlugins off prepared")
	}
}

// The driver writes the claim class's spec into its CDI dir, and the name a
// prepare answer gives resolves there, as the runtime resolves it, to the
// variable the hook reads. A second write leaves the file as it was.
func TestWriteClaimSpec(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, Options{Name: testDriver, NodeName: "node-a", CDIDir: dir})
	if err := d.writeClaimSpec(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rdma.example.com-claim.json")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("spec %s: %v, %v; want mode 0644", path, fi, err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil || len(cache.GetErrors()) != 0 {
		t.Fatalf("CDI cache: %v %v", err, cache.GetErrors())
	}
	ctr := &oci.Spec{Process: &oci.Process{Env: []string{"RDMA_CDI_CLAIM_NCCL_PLUGINS=auto"}}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(ctr, claimNone); err != nil || len(unresolved) != 0 {
		t.Fatalf("inject %s: %v, unresolved %v", claimNone, err, unresolved)
	}
	// The CDI value replaces the container's own: the claim's word is final.
	if !slices.Equal(ctr.Process.Env, []string{"RDMA_CDI_CLAIM_NCCL_PLUGINS=none"}) {
		t.Errorf("container env %v", ctr.Process.Env)
	}
	if err := d.writeClaimSpec(); err != nil {
		t.Fatal(err)
	}
	if again, err := os.Stat(path); err != nil || !again.ModTime().Equal(fi.ModTime()) {
		t.Errorf("the second write replaced the file: %v", err)
	}
}

// With RemoveSpecOnExit (the agent's --remove-on-exit) the claim class's
// spec goes when Run ends, as the HCA spec does; without it, it stays for
// the next driver.
func TestClaimSpecRemovedOnExitWhenAsked(t *testing.T) {
	for _, remove := range []bool{false, true} {
		log := logrus.New()
		log.SetOutput(io.Discard)
		root := t.TempDir()
		d := newDriver(t, Options{
			Name: testDriver, NodeName: "node-a", Client: fake.NewClientset(), Log: log,
			PluginDir: filepath.Join(root, "plugins"), RegistrarDir: filepath.Join(root, "registry"),
			CDIDir: filepath.Join(root, "cdi"), RemoveSpecOnExit: remove,
		})
		if err := os.MkdirAll(d.RegistrarDir, 0o750); err != nil {
			t.Fatal(err)
		}
		d.Update(testNode(), config.Default())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		path := filepath.Join(root, "cdi", "rdma.example.com-claim.json")
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(path); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the running driver wrote no %s", path)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if _, err := os.Stat(path); os.IsNotExist(err) != remove {
			t.Errorf("RemoveSpecOnExit %v: after Run, %s: %v", remove, path, err)
		}
	}
}
