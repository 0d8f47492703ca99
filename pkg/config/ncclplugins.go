package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// NCCLPlugins steers what a container's NCCL gets of the host's own NCCL
// set-up: the cloud's net and tuner plugins, and chosen keys of the host's
// nccl.conf with the files they name (Azure's NCCL_TOPO_FILE). The hook
// decides per container (pkg/userspace.DecidePlugins); these are the
// node's offer.
type NCCLPlugins struct {
	Enabled   bool     `toml:"enabled" flag:"nccl-plugins" help:"lend the host's NCCL net and tuner plugins (read-only, at the same path, in the linker cache, named in nccl.conf) and carry chosen keys of the host's nccl.conf to each container whose image has no plugin of its own and that does not opt out (rdma.example.com/nccl-plugins: none)"`
	Dirs      []string `toml:"dirs" flag:"nccl-plugin-dirs" help:"host directories searched for libnccl-net*.so* and libnccl-tuner*.so*; those that do not exist are skipped (default: the clouds' own locations, GCP gIB and AWS aws-ofi-nccl)"`
	ConfFile  string   `toml:"conf_file" flag:"nccl-plugins-host-conf" help:"the host's nccl.conf, whose carry_keys are carried into containers' nccl.conf"`
	CarryKeys []string `toml:"carry_keys" flag:"nccl-plugins-carry-keys" help:"keys of the host's nccl.conf carried into containers' nccl.conf; the files NCCL_TOPO_FILE and NCCL_GRAPH_FILE name are mounted read-only at the same path"`
	// LibfabricDirs hold the libfabric the aws-ofi-nccl plugin needs.
	LibfabricDirs []string `toml:"libfabric_dirs" flag:"nccl-plugins-libfabric-dirs" help:"host directories searched for libfabric.so*, lent with the plugins (and FI_PROVIDER=efa written) to a container that gets EFA devices and whose image has no libfabric of its own; those that do not exist are skipped (default: AWS's EFA install)"`
}

// DefaultNCCLPluginDirs are where the clouds install their NCCL plugins:
// GCP's gIB (A3 Ultra, A4) and AWS's aws-ofi-nccl (EFA).
var DefaultNCCLPluginDirs = []string{"/home/kubernetes/bin/gib", "/home/kubernetes/bin/gib/lib64", "/opt/amazon/aws-ofi-nccl/lib"}

// DefaultLibfabricDirs are where AWS's EFA installer puts libfabric: lib
// on Debian-family hosts, lib64 on Amazon Linux and RHEL.
var DefaultLibfabricDirs = []string{"/opt/amazon/efa/lib", "/opt/amazon/efa/lib64"}

// DefaultNCCLPlugins is the section's defaults.
func DefaultNCCLPlugins() NCCLPlugins {
	return NCCLPlugins{
		Enabled:   true,
		Dirs:      slices.Clone(DefaultNCCLPluginDirs),
		ConfFile:  "/etc/nccl.conf",
		CarryKeys: []string{"NCCL_TOPO_FILE"},

		LibfabricDirs: slices.Clone(DefaultLibfabricDirs),
	}
}

// validate refuses what would be ambiguous on the host or in a container:
// relative paths, "..", keys that are not NCCL's.
func (p NCCLPlugins) validate() []error {
	var errs []error
	for _, d := range slices.Concat(p.Dirs, p.LibfabricDirs, []string{p.ConfFile}) {
		if !model.CleanAbsPath(d) {
			errs = append(errs, fmt.Errorf("nccl_plugins: %q: want an absolute path without \"..\" in it", d))
		}
	}
	for _, k := range p.CarryKeys {
		if !strings.HasPrefix(k, "NCCL_") || strings.ContainsAny(k, "= \t\n") {
			errs = append(errs, fmt.Errorf("nccl_plugins.carry_keys %q: want an NCCL_* name", k))
		}
	}
	return errs
}
