package cdispec

import (
	"fmt"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
)

// RenderClaimSpec renders the claim class's spec under vendor
// (vendor/claim): one device per setting a DRA claim's config carries to
// the containers that use it, each setting the variable the containers'
// hook reads. The DRA driver writes it when it starts and names its
// devices in a prepare answer beside the claim's HCAs (ClaimDevice); the
// engine applies a device's edits to exactly the containers that use the
// request, as it does the HCA's.
func RenderClaimSpec(vendor string) (*specs.Spec, error) {
	kind, err := kindOf(vendor, apis.ClaimClass)
	if err != nil {
		return nil, err
	}
	spec := &specs.Spec{Kind: kind, Devices: []specs.Device{{
		Name:           apis.ClaimNCCLPluginsNone,
		ContainerEdits: specs.ContainerEdits{Env: []string{apis.EnvClaimNCCLPlugins + "=" + string(v1alpha1.NCCLPluginsNone)}},
	}}}
	if spec.Version, err = pickVersion(spec, Options{}); err != nil {
		return nil, err
	}
	if err := validate(spec); err != nil {
		return nil, fmt.Errorf("rendered claim CDI spec is invalid: %w", err)
	}
	return spec, nil
}

// ClaimDevice is the CDI name of the claim class's device name under
// vendor (rdma.example.com/claim=nccl-plugins-none).
func ClaimDevice(vendor, name string) string {
	return vendor + "/" + apis.ClaimClass + "=" + name
}
