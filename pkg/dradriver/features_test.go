package dradriver

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFeaturesKept(t *testing.T) {
	sent := featureProbeSlice("rdma.example.com", "node-a")
	if *sent.Spec.NodeName != "node-a" || sent.Spec.Driver != "rdma.example.com" {
		t.Fatalf("probe slice names %v / %s", sent.Spec.NodeName, sent.Spec.Driver)
	}
	if got := featuresKept(sent); !got.DeviceTaints || !got.ConsumableCapacity {
		t.Fatalf("every field kept: %+v", got)
	}
	// A 1.35 server with its defaults: taints kept (beta), consumable
	// capacity dropped (alpha).
	dropped := sent.DeepCopy()
	dropped.Spec.Devices[0].AllowMultipleAllocations = nil
	if got := featuresKept(dropped); !got.DeviceTaints || got.ConsumableCapacity {
		t.Fatalf("allowMultipleAllocations dropped: %+v", got)
	}
	if got := featuresKept(nil); got != (Features{}) {
		t.Fatalf("nothing kept: %+v", got)
	}
	if s := (Features{DeviceTaints: true}).String(); s != "device taints on, consumable capacity off" {
		t.Fatalf("String: %q", s)
	}
}

func deviceClass(name, cel string, extended string) resourceapi.DeviceClass {
	c := resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: cel}}}}}
	if extended != "" {
		c.Spec.ExtendedResourceName = &extended
	}
	return c
}

func TestExtendedResourceVerdict(t *testing.T) {
	ours := `device.driver == "rdma.example.com" && device.attributes["rdma.example.com"].portState == "ACTIVE"`
	other := deviceClass("gpu.example.com", `device.driver == "gpu.example.com"`, "rdma/hca")
	for _, c := range []struct {
		name          string
		classes       []resourceapi.DeviceClass
		served, found bool
		says          string
	}{
		{"kept", []resourceapi.DeviceClass{other, deviceClass("hca.rdma.example.com", ours, "rdma/hca")}, true, true, "served from DeviceClass hca.rdma.example.com"},
		{"dropped by the server", []resourceapi.DeviceClass{deviceClass("hca.rdma.example.com", ours, ""), deviceClass("roce.rdma.example.com", ours, "")}, false, true, "hca.rdma.example.com, roce.rdma.example.com) kept extendedResourceName rdma/hca"},
		{"another driver's class", []resourceapi.DeviceClass{other}, false, false, "no DeviceClass selects driver rdma.example.com"},
		{"none", nil, false, false, "no DeviceClass"},
	} {
		served, found, msg := ExtendedResourceVerdict(c.classes, "rdma.example.com", "rdma/hca")
		if served != c.served || found != c.found || !strings.Contains(msg, c.says) {
			t.Errorf("%s: served %v found %v %q, want %v %v ...%s...", c.name, served, found, msg, c.served, c.found, c.says)
		}
	}
}
