package dradriver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
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
	if s := (Features{DeviceTaints: true}).String(); s != "device taints on, consumable capacity off, list attributes off" {
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

// sliceServer answers a ResourceSlice create as the API server of v1.37.2
// does with its gates: with DRAListTypeAttributes off it drops every list
// value, and an attribute left without a value fails validation, which
// refuses the whole slice; taints and multiple allocations are dropped
// where off. Creates without dryRun are refused: the probe stores nothing.
func sliceServer(lists, taints, sharing bool) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		create := a.(k8stesting.CreateActionImpl)
		if len(create.GetCreateOptions().DryRun) == 0 {
			return true, nil, errors.New("the probe stored a slice")
		}
		s := create.GetObject().(*resourceapi.ResourceSlice).DeepCopy()
		var errs field.ErrorList
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			if !taints {
				d.Taints = nil
			}
			if !sharing {
				d.AllowMultipleAllocations = nil
			}
			for name, attr := range d.Attributes {
				if !lists {
					attr.IntValues, attr.BoolValues, attr.StringValues, attr.VersionValues = nil, nil, nil, nil
					d.Attributes[name] = attr
				}
				if attr.IntValue == nil && attr.BoolValue == nil && attr.StringValue == nil && attr.VersionValue == nil &&
					attr.IntValues == nil && attr.BoolValues == nil && attr.StringValues == nil && attr.VersionValues == nil {
					errs = append(errs, field.Invalid(field.NewPath("spec", "devices").Index(i).Child("attributes").Key(string(name)), "", "exactly one value must be specified"))
				}
			}
		}
		if len(errs) > 0 {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceSlice"}, s.GenerateName, errs)
		}
		return true, s, nil
	}
}

// TestProbeFeatures: the probe finds list attributes kept where the gate
// is on, and off where the server refuses the list probe for the value it
// dropped, without losing what the other probe found.
func TestProbeFeatures(t *testing.T) {
	for _, c := range []struct {
		name                  string
		lists, taints, shared bool
	}{
		{"1.37 defaults", false, true, true},
		{"1.37 with DRAListTypeAttributes", true, true, true},
		{"1.35 defaults", false, true, false},
	} {
		client := fake.NewClientset()
		client.PrependReactor("create", "resourceslices", sliceServer(c.lists, c.taints, c.shared))
		f, err := ProbeFeatures(context.Background(), client, testDriver, "node-a")
		want := Features{DeviceTaints: c.taints, ConsumableCapacity: c.shared, ListAttributes: c.lists}
		if err != nil || f != want {
			t.Errorf("%s: %+v, %v; want %+v", c.name, f, err, want)
		}
	}
	// A list probe refused for another reason says nothing about lists.
	client := fake.NewClientset()
	client.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice)
		if _, list := s.Spec.Devices[0].Attributes[apis.StdAttrNUMANode]; list {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceslices"}, "", errors.New("node authorizer"))
		}
		return true, s, nil
	})
	f, err := ProbeFeatures(context.Background(), client, testDriver, "node-a")
	if err == nil || !strings.Contains(err.Error(), "list attributes") || !f.DeviceTaints || f.ListAttributes {
		t.Errorf("list probe forbidden: %+v, %v; want taints kept, lists off, and the error", f, err)
	}
}

func TestListsKept(t *testing.T) {
	sent := listProbeSlice(testDriver, "node-a")
	if got, err := listsKept(sent, nil); !got || err != nil {
		t.Errorf("the list returned: %v, %v", got, err)
	}
	if got, err := listsKept(nil, nil); got || err != nil {
		t.Errorf("nothing returned: %v, %v", got, err)
	}
	atAttr := apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceSlice"}, "",
		field.ErrorList{field.Invalid(field.NewPath("spec", "devices").Index(0).Child("attributes").Key(apis.StdAttrNUMANode), "", "exactly one value must be specified")})
	if got, err := listsKept(nil, atAttr); got || err != nil {
		t.Errorf("refused at the attribute: %v, %v; want off, no error", got, err)
	}
	elsewhere := apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceSlice"}, "",
		field.ErrorList{field.Invalid(field.NewPath("spec", "nodeName"), "node-a", "no such node")})
	for _, e := range []error{elsewhere, fmt.Errorf("dial: %w", errors.New("connection refused"))} {
		if got, err := listsKept(nil, e); got || err == nil {
			t.Errorf("%v: %v, %v; want an error", e, got, err)
		}
	}
}
