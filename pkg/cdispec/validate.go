package cdispec

import (
	"encoding/json"
	"fmt"

	"go.yaml.in/yaml/v3"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// validate runs the checks a CDI cache runs when it loads a spec file
// (version, kind, device names, edits), built from the library's exported
// validators: its whole-spec check is unexported and reads from a file.
func validate(spec *specs.Spec) error {
	if err := specs.ValidateVersion(spec); err != nil {
		return err
	}
	vendor, class := parser.ParseQualifier(spec.Kind)
	if err := parser.ValidateVendorName(vendor); err != nil {
		return err
	}
	if err := parser.ValidateClassName(class); err != nil {
		return err
	}
	if err := (&cdi.ContainerEdits{ContainerEdits: &spec.ContainerEdits}).Validate(); err != nil {
		return err
	}
	if len(spec.Devices) == 0 {
		return ErrNoDevices
	}
	seen := make(map[string]bool, len(spec.Devices))
	for i := range spec.Devices {
		d := &spec.Devices[i]
		if err := validateDevice(d); err != nil {
			return fmt.Errorf("device %q: %w", d.Name, err)
		}
		if seen[d.Name] {
			return fmt.Errorf("device %q listed twice", d.Name)
		}
		seen[d.Name] = true
	}
	return nil
}

func validateDevice(d *specs.Device) error {
	if err := parser.ValidateDeviceName(d.Name); err != nil {
		return err
	}
	if len(d.ContainerEdits.DeviceNodes) == 0 && len(d.ContainerEdits.Mounts) == 0 &&
		len(d.ContainerEdits.Hooks) == 0 && len(d.ContainerEdits.Env) == 0 {
		return fmt.Errorf("empty device edits")
	}
	return (&cdi.ContainerEdits{ContainerEdits: &d.ContainerEdits}).Validate()
}

// Marshal encodes the spec as "yaml" (the default for "") or "json". Both
// are deterministic: fields come out in struct order.
func Marshal(spec *specs.Spec, format string) ([]byte, error) {
	if spec == nil {
		return nil, fmt.Errorf("marshal CDI spec: nil spec")
	}
	switch format {
	case "", "yaml":
		out, err := yaml.Marshal(spec)
		if err != nil {
			return nil, fmt.Errorf("marshal CDI spec as YAML: %w", err)
		}
		return out, nil
	case "json":
		out, err := json.MarshalIndent(spec, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("marshal CDI spec as JSON: %w", err)
		}
		return append(out, '\n'), nil
	}
	return nil, fmt.Errorf("unknown spec format %q (want yaml or json)", format)
}
