package dradriver

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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

// ProbeFeatures creates featureProbeSlice with dryRun (the agent may write
// its own node's slices, so it needs no other permission) and returns what
// the server kept.
func ProbeFeatures(ctx context.Context, client kubernetes.Interface, driver, node string) (Features, error) {
	kept, err := client.ResourceV1().ResourceSlices().Create(ctx, featureProbeSlice(driver, node),
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return Features{}, fmt.Errorf("probing the API server's DRA features (a dry-run ResourceSlice): %w", err)
	}
	return featuresKept(kept), nil
}

func (f Features) String() string {
	return fmt.Sprintf("device taints %s, consumable capacity %s", onOff(f.DeviceTaints), onOff(f.ConsumableCapacity))
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
