package dradriver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
)

// Features are the resource.k8s.io/v1 fields, newer than the API's GA
// release, that this API server keeps. Where a feature gate is off the
// server accepts such a field and silently drops it, so the driver asks the
// server instead of assuming from its version.
type Features struct {
	// DeviceTaints: Device.Taints (KEP-5055; beta 1.33-1.36, stable 1.37).
	DeviceTaints bool
	// ConsumableCapacity: Device.AllowMultipleAllocations (KEP-5075;
	// alpha 1.34-1.35, beta 1.36).
	ConsumableCapacity bool
	// ListAttributes: DeviceAttribute's list values (KEP-6072,
	// DRAListTypeAttributes; alpha, off by default, from 1.36).
	ListAttributes bool
}

// featureProbeSlice is a ResourceSlice of node that sets every field of
// Features; created with dryRun, it is never stored.
func featureProbeSlice(driver, node string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: node + "-feature-probe-"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			NodeName: &node,
			Pool:     resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{
				Name:                     "probe",
				Taints:                   []resourceapi.DeviceTaint{{Key: driver + "/probe", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
				AllowMultipleAllocations: ptr(true),
			}},
		},
	}
}

// featuresKept reads which of featureProbeSlice's fields the server kept.
func featuresKept(kept *resourceapi.ResourceSlice) Features {
	if kept == nil || len(kept.Spec.Devices) != 1 {
		return Features{}
	}
	d := kept.Spec.Devices[0]
	return Features{
		DeviceTaints:       len(d.Taints) > 0,
		ConsumableCapacity: d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations,
	}
}

// listProbeSlice is a ResourceSlice of node whose one device has the
// standard numaNode as a list, as the driver would publish it. A list
// is not dropped as quietly as featureProbeSlice's fields: where
// DRAListTypeAttributes is off (or the server predates the field) the
// server drops the list, and the attribute left without a value fails
// validation ("exactly one value must be specified"), so the whole slice
// is refused. Hence a probe of its own.
func listProbeSlice(driver, node string) *resourceapi.ResourceSlice {
	s := featureProbeSlice(driver, node)
	s.Spec.Devices = []resourceapi.Device{{
		Name:       "probe",
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{apis.StdAttrNUMANode: {IntValues: []int64{0, 2}}},
	}}
	return s
}

// listsKept reads the answer to listProbeSlice: kept where the server
// returned the list; not where it refused the slice as invalid at the
// probe's attribute (the list dropped); err where it said anything else,
// which tells nothing about lists.
func listsKept(kept *resourceapi.ResourceSlice, err error) (bool, error) {
	if err == nil {
		if kept == nil || len(kept.Spec.Devices) != 1 {
			return false, nil
		}
		return len(kept.Spec.Devices[0].Attributes[apis.StdAttrNUMANode].IntValues) > 0, nil
	}
	var status apierrors.APIStatus
	if apierrors.IsInvalid(err) && errors.As(err, &status) && status.Status().Details != nil {
		for _, c := range status.Status().Details.Causes {
			if strings.Contains(c.Field, "attributes") {
				return false, nil
			}
		}
	}
	return false, err
}

// ProbeFeatures creates featureProbeSlice, then listProbeSlice, with
// dryRun (the agent may write its own node's slices, so it needs no other
// permission) and returns what the server kept. Where only the second
// fails, the first's answer comes with the error, lists taken as off.
func ProbeFeatures(ctx context.Context, client kubernetes.Interface, driver, node string) (Features, error) {
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	kept, err := client.ResourceV1().ResourceSlices().Create(ctx, featureProbeSlice(driver, node), dryRun)
	if err != nil {
		return Features{}, fmt.Errorf("probing the API server's DRA features (a dry-run ResourceSlice): %w", err)
	}
	f := featuresKept(kept)
	f.ListAttributes, err = listsKept(client.ResourceV1().ResourceSlices().Create(ctx, listProbeSlice(driver, node), dryRun))
	if err != nil {
		return f, fmt.Errorf("probing whether the API server keeps list attributes (a dry-run ResourceSlice): %w", err)
	}
	return f, nil
}

func (f Features) String() string {
	return fmt.Sprintf("device taints %s, consumable capacity %s, list attributes %s",
		onOff(f.DeviceTaints), onOff(f.ConsumableCapacity), onOff(f.ListAttributes))
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// ExtendedResourceVerdict says whether one of the driver's DeviceClasses
// serves the extended resource want (a plain `resources.limits: want: N`).
// A class of the driver is one whose selectors name it in
// `device.driver == "driver"`; found says whether there is any. served is
// false, with the reason, when no such class keeps extendedResourceName
// want: the field is dropped where DRAExtendedResource is off (alpha in
// 1.34-1.35).
func ExtendedResourceVerdict(classes []resourceapi.DeviceClass, driver, want string) (served, found bool, msg string) {
	var ours []string
	for _, c := range classes {
		if !selectsDriver(c, driver) {
			continue
		}
		ours = append(ours, c.Name)
		if c.Spec.ExtendedResourceName != nil && *c.Spec.ExtendedResourceName == want {
			return true, true, fmt.Sprintf("extended resource %s is served from DeviceClass %s", want, c.Name)
		}
	}
	if len(ours) == 0 {
		return false, false, fmt.Sprintf("extended resource %s is not served: no DeviceClass selects driver %s", want, driver)
	}
	return false, true, fmt.Sprintf("extended resource %s is not served: none of this driver's DeviceClasses (%s) kept extendedResourceName %s, "+
		"which the API server drops when DRAExtendedResource is off (alpha, off by default, before 1.36); "+
		"pods must ask for HCAs through ResourceClaims", want, strings.Join(ours, ", "), want)
}

func selectsDriver(c resourceapi.DeviceClass, driver string) bool {
	for _, s := range c.Spec.Selectors {
		if s.CEL != nil && strings.Contains(strings.Join(strings.Fields(s.CEL.Expression), ""), `device.driver=="`+driver+`"`) {
			return true
		}
	}
	return false
}
