package cdispec

import (
	"fmt"
	"strconv"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"
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
	maxV, err := parseVersion(opts.MaxVersion)
	if err != nil {
		return "", fmt.Errorf("--cdi-version %q: %w", opts.MaxVersion, err)
	}
	minV, err := parseVersion(minimum)
	if err != nil {
		return "", fmt.Errorf("CDI minimum version %q: %w", minimum, err)
	}
	if minV.after(maxV) {
		return "", fmt.Errorf("spec needs CDI %s but --cdi-version caps at %s (because %s)",
			minimum, opts.MaxVersion, strings.Join(versionReasons(spec, opts, maxV, minimum), "; "))
	}
	return minimum, nil
}

// versionReasons names the features of the spec that need a CDI version
// above the cap, and how to avoid each.
func versionReasons(spec *specs.Spec, opts Options, maxV semver, minimum string) []string {
	type feature struct {
		since  semver
		used   bool
		reason string
	}
	v050, v060 := semver{0, 5, 0}, semver{0, 6, 0}
	features := []feature{
		{v050, usesHostPath(spec), fmt.Sprintf("device nodes need hostPath (CDI 0.5.0) since --dev-root %s is not /dev", opts.DevRoot)},
		{v050, firstDigitDevice(spec) != "", fmt.Sprintf("device name %q starts with a digit (CDI 0.5.0)", firstDigitDevice(spec))},
		{v060, strings.Contains(opts.Class, "."), fmt.Sprintf("class %q contains a dot (CDI 0.6.0)", opts.Class)},
	}
	var out []string
	for _, f := range features {
		if f.used && f.since.after(maxV) {
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

// semver is major.minor.patch; CDI versions have no pre-release parts.
type semver [3]int

func (v semver) after(o semver) bool {
	for i := range v {
		if v[i] != o[i] {
			return v[i] > o[i]
		}
	}
	return false
}

// parseVersion accepts "0.5.0", "v0.5.0" and "0.5" (= 0.5.0).
func parseVersion(s string) (semver, error) {
	var v semver
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if len(parts) < 2 || len(parts) > 3 {
		return v, fmt.Errorf("want a version like 0.5.0")
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, fmt.Errorf("want a version like 0.5.0, %q is not a number", p)
		}
		v[i] = n
	}
	return v, nil
}
