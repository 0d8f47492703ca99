package cdispec

import (
	"slices"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
)

// The claim class's spec loads in the CDI library's cache, as an engine
// reads it, and its nccl-plugins-none device gives a container the
// variable the hook reads and nothing else; the lowest CDI version that
// holds it keeps old engines reading it.
func TestRenderClaimSpec(t *testing.T) {
	spec, err := RenderClaimSpec(apis.Group)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Kind != "rdma.example.com/claim" || spec.Version != "0.3.0" {
		t.Errorf("kind %s version %s, want rdma.example.com/claim at 0.3.0", spec.Kind, spec.Version)
	}
	for _, format := range []string{"yaml", "json"} {
		cache := loadCache(t, spec, format)
		c := ociSpec(0)
		name := ClaimDevice(apis.Group, apis.ClaimNCCLPluginsNone)
		if name != "rdma.example.com/claim=nccl-plugins-none" {
			t.Fatalf("ClaimDevice = %s", name)
		}
		if unresolved, err := cache.InjectDevices(c, name); err != nil || len(unresolved) != 0 {
			t.Fatalf("%s: inject %s: %v (unresolved %v)", format, name, err, unresolved)
		}
		if !slices.Equal(c.Process.Env, []string{"RDMA_CDI_CLAIM_NCCL_PLUGINS=none"}) || len(c.Linux.Devices)+len(c.Mounts) != 0 || c.Hooks != nil {
			t.Errorf("%s: the container got env %v, devices %v, mounts %v, hooks %v; want the variable alone", format, c.Process.Env, c.Linux.Devices, c.Mounts, c.Hooks)
		}
	}
	if _, err := RenderClaimSpec("not a vendor"); err == nil {
		t.Error("a bad vendor rendered")
	}
}
