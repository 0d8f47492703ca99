package cdispec

import (
	"fmt"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// pickVersion sets the lowest cdiVersion that covers the spec (old engines
// reject anything newer than they know), and enforces MaxVersion.
func pickVersion(spec *specs.Spec, opts Options) (string, error) {
	minimum, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return "", fmt.Errorf("CDI minimum version: %w", err)
	}
	if opts.MaxVersion == "" {
		return minimum, nil
	}
	maxV, err := model.ParseVersion(opts.MaxVersion)
	if err != nil {
		return "", fmt.Errorf("--cdi-version %q: %w", opts.MaxVersion, err)
	}
	minV, err := model.ParseVersion(minimum)
	if err != nil {
		return "", fmt.Errorf("CDI minimum version %q: %w", minimum, err)
	}
	if maxV.Less(minV) {
		return "", fmt.Errorf("spec needs CDI %s but --cdi-version caps at %s (because %s)",
			minimum, opts.MaxVersion, strings.Join(versionReasons(spec, opts, maxV, minimum), "; "))
	}
	return minimum, nil
}

// versionReasons names the features of the spec that need a CDI version
// above the cap, and how to avoid each.
func versionReasons(spec *specs.Spec, opts Options, maxV model.Version, minimum string) []string {
	type feature struct {
		since  model.Version
		used   bool
		reason string
	}
	v050, v060 := model.Version{0, 5, 0}, model.Version{0, 6, 0}
	features := []feature{
		{v050, usesHostPath(spec), fmt.Sprintf("device nodes need hostPath (CDI 0.5.0) since --dev-root %s is not /dev", opts.DevRoot)},
		{v050, firstDigitDevice(spec) != "", fmt.Sprintf("device name %q starts with a digit (CDI 0.5.0)", firstDigitDevice(spec))},
		{v060, strings.Contains(opts.Class, "."), fmt.Sprintf("class %q contains a dot (CDI 0.6.0)", opts.Class)},
	}
	var out []string
	for _, f := range features {
		if f.used && maxV.Less(f.since) {
			out = append(out, f.reason)
		}
	}
	if len(out) == 0 {
		out = append(out, "the spec uses fields of CDI "+minimum)
	}
	return out
}

func usesHostPath(spec *specs.Spec) bool {
	for _, n := range spec.ContainerEdits.DeviceNodes {
		if n.HostPath != "" {
			return true
		}
	}
	for _, d := range spec.Devices {
		for _, n := range d.ContainerEdits.DeviceNodes {
			if n.HostPath != "" {
				return true
			}
		}
	}
	return false
}

func firstDigitDevice(spec *specs.Spec) string {
	for _, d := range spec.Devices {
		if d.Name != "" && d.Name[0] >= '0' && d.Name[0] <= '9' {
			return d.Name
		}
	}
	return ""
}
