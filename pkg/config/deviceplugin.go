package config

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// extendedResourceShape is what the kubelet accepts from a device plugin,
// less the lengths (isExtendedResourceName): DOMAIN/NAME with a
// DNS-subdomain domain outside kubernetes.io, and a name that is a
// qualified-name part. The lengths are checked apart: as bounded
// repetitions ({0,251}) they made the pattern cost about a millisecond to
// compile, on every hook process (config validation).
var extendedResourceShape = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
})

// isExtendedResourceName: a domain of at most 253 characters, a name of at
// most 63, in extendedResourceShape.
func isExtendedResourceName(s string) bool {
	domain, name, _ := strings.Cut(s, "/")
	return len(domain) <= 253 && len(name) <= 63 && extendedResourceShape().MatchString(s)
}

// ValidateDevicePlugin checks the [device_plugin] section alone.
func (c Config) ValidateDevicePlugin() error { return errors.Join(c.DevicePlugin.validate()...) }

func (d DevicePlugin) validate() []error {
	var errs []error
	switch d.Allocation {
	case AllocationCDIDevices, AllocationAnnotations:
	default:
		errs = append(errs, fmt.Errorf("device_plugin.allocation %q: want cdi-devices or annotations", d.Allocation))
	}
	seen := map[string]bool{}
	for i, r := range d.ServedResources() {
		where := fmt.Sprintf("device_plugin.resources[%d] (%s)", i, r.Name)
		domain, _, _ := strings.Cut(r.Name, "/")
		switch {
		case !isExtendedResourceName(r.Name):
			errs = append(errs, fmt.Errorf("%s: name %q: want DOMAIN/NAME, e.g. rdma/hca", where, r.Name))
		case domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io"):
			errs = append(errs, fmt.Errorf("%s: the kubernetes.io domain is reserved", where))
		case seen[r.Name]:
			errs = append(errs, fmt.Errorf("%s: a second resource of that name", where))
		}
		seen[r.Name] = true
		switch r.Mode {
		case ModeShared:
			if r.MaxPods < 1 || r.MaxPods > 100000 {
				errs = append(errs, fmt.Errorf("%s: max_pods %d: want 1 to 100000", where, r.MaxPods))
			}
		case ModeExclusive:
			if r.MaxPods != 0 {
				errs = append(errs, fmt.Errorf("%s: max_pods applies to shared resources only", where))
			}
		default:
			errs = append(errs, fmt.Errorf("%s: mode %q: want shared or exclusive", where, r.Mode))
		}
		switch r.Functions {
		case FunctionsAuto, FunctionsVFs, FunctionsPFs, FunctionsAll:
		default:
			errs = append(errs, fmt.Errorf("%s: functions %q: want vfs, pfs, all or empty (VFs where there are any)", where, r.Functions))
		}
		for _, ll := range r.LinkLayers {
			if ll != "Ethernet" && ll != "InfiniBand" {
				errs = append(errs, fmt.Errorf("%s: link_layers %q: want Ethernet or InfiniBand", where, ll))
			}
		}
		for _, id := range append(append([]string{}, r.PCIVendors...), r.PCIDevices...) {
			if !pciID().MatchString(id) {
				errs = append(errs, fmt.Errorf("%s: PCI ID %q: want 4 hex digits, e.g. 0x15b3", where, id))
			}
		}
	}
	return errs
}

var pciID = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(0x)?[0-9a-fA-F]{4}$`) })
