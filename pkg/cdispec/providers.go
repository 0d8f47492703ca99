package cdispec

import (
	"maps"
	"slices"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// providerOfKernelDriver names the rdma-core provider that serves the HCAs
// a PCI driver binds (the driver of an RDMA device's parent function, as
// sysfs names it). Each entry is what rdma-core's provider matches for
// that hardware.
var providerOfKernelDriver = map[string]string{
	"mlx5_core":  "mlx5",
	"mlx4_core":  "mlx4",
	"bnxt_en":    "bnxt_re",
	"efa":        "efa",
	"ice":        "irdma",
	"i40e":       "irdma",
	"hns3":       "hns",
	"qede":       "qedr",
	"be2net":     "ocrdma",
	"vmw_pvrdma": "vmw_pvrdma",
	"cxgb4":      "cxgb4",
	"mana":       "mana",
	"erdma":      "erdma",
	"hfi1":       "hfi1verbs",
	"ib_qib":     "ipathverbs",
	"ib_mthca":   "mthca",
	// AMD Pensando (Pollara): ionic_rdma sits on the ionic PCI driver.
	"ionic": "ionic",
}

// nodeProviders returns the providers the node's devices need, and false
// when any device's driver is unknown (soft RoCE and iWARP devices have no
// PCI parent; a driver this table lacks): then every provider is kept.
func nodeProviders(devices []model.Device) (map[string]bool, bool) {
	need := map[string]bool{}
	for _, d := range devices {
		p, ok := providerOfKernelDriver[d.Driver]
		if !ok {
			return nil, false
		}
		need[p] = true
	}
	return need, len(need) > 0
}

// forNodeProviders drops the provider files (libraries and their
// /etc/libibverbs.d entries, as hostlibs marks them) of providers no
// device of the node uses. A
// Debian node's ibverbs-providers ships 17; each file left in costs every
// container start a bind mount, and a mount is the dearest part of a
// start (BENCHMARKS.md). libibverbs skips a provider whose hardware is
// absent, so the dropped ones did nothing in the container.
func forNodeProviders(files []model.HostFile, devices []model.Device) []model.HostFile {
	need, ok := nodeProviders(devices)
	if !ok {
		return files
	}
	kept := make([]model.HostFile, 0, len(files))
	for _, f := range files {
		if f.Provider != "" && !need[f.Provider] {
			continue
		}
		kept = append(kept, f)
	}
	return kept
}

// NodeProviders lists the providers the node's HCAs use, sorted: what an
// image that brings its own stack must carry (the hook and doctor check
// it). Nil when a device's driver is unknown: then none is named missing.
func NodeProviders(devices []model.Device) []string {
	need, ok := nodeProviders(devices)
	if !ok {
		return nil
	}
	return slices.Sorted(maps.Keys(need))
}
