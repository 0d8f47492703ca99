package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
)

// PodNetworkRanges is pod_network.ranges: per host netdev, the blocks of
// addresses its sub-interfaces take, parsed when the config is read. That
// no two blocks overlap is Validate's check, which sees them all.
type PodNetworkRanges map[string]RangeBlocks

// ByNetDev is the ranges as the pod networker's address pool takes them.
func (r PodNetworkRanges) ByNetDev() map[string][]podnetwork.Range {
	out := make(map[string][]podnetwork.Range, len(r))
	for netdev, blocks := range r {
		out[netdev] = blocks
	}
	return out
}

// RangeBlocks is one netdev's blocks, written CIDR or FIRST-LAST,
// comma-separated (podnetwork.ParseBlocks).
type RangeBlocks []podnetwork.Range

// UnmarshalText parses one netdev's blocks; its error names no netdev:
// the table's key does (Decode, applyFlag).
func (b *RangeBlocks) UnmarshalText(text []byte) error {
	blocks, err := podnetwork.ParseBlocks(string(text))
	if err != nil {
		return err
	}
	*b = blocks
	return nil
}

// MarshalText writes each block as FIRST-LAST, which parses back to the
// same addresses whether it was written so or as a CIDR.
func (b RangeBlocks) MarshalText() ([]byte, error) {
	parts := make([]string, len(b))
	for i, r := range b {
		parts[i] = r.String()
	}
	return []byte(strings.Join(parts, ",")), nil
}

// PodNetworkPools is pod_network.pools: the cluster's shared pools, a TOML
// array of strings, or one comma-separated string (the flag).
type PodNetworkPools []podnetwork.ClusterPool

// UnmarshalText parses one comma-separated string of pools.
func (p *PodNetworkPools) UnmarshalText(text []byte) error {
	var out PodNetworkPools
	var errs []error
	for _, s := range strings.Split(string(text), ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		var pool podnetwork.ClusterPool
		if err := pool.UnmarshalText([]byte(s)); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, pool)
	}
	*p = out
	return errors.Join(errs...)
}

// MarshalText writes the pools comma-separated, as the flag takes them.
func (p PodNetworkPools) MarshalText() ([]byte, error) {
	parts := make([]string, len(p))
	for i, pool := range p {
		parts[i] = pool.String()
	}
	return []byte(strings.Join(parts, ",")), nil
}

// PodNetworkIPAM is one [[pod_network.ipam]] table: the CNI IPAM plugin
// that gives the pod addresses of one subnet.
type PodNetworkIPAM struct {
	Subnet string `toml:"subnet" help:"the subnet (a CIDR, e.g. 10.0.61.0/24) of the host netdevs whose pods' addresses the plugin gives; no pool or range of pod_network may overlap it"`
	Config string `toml:"config" help:"the plugin's configuration, the \"ipam\" object of a CNI network config as JSON, whose type names the binary in cni_bin_dirs, e.g. {\"type\":\"whereabouts\",\"range\":\"10.0.61.128/25\"} (Whereabouts reads its kubeconfig from its whereabouts.conf)"`
}

// Plugins are the tables as the delegate takes them; validateIPAM has
// checked them.
func (p PodNetwork) Plugins() []podnetwork.IPAMPlugin {
	var out []podnetwork.IPAMPlugin
	for _, t := range p.IPAM {
		subnet, err := netip.ParsePrefix(t.Subnet)
		if err != nil {
			continue
		}
		out = append(out, podnetwork.IPAMPlugin{Subnet: subnet.Masked(), Config: json.RawMessage(t.Config)})
	}
	return out
}

// validateIPAM checks the [[pod_network.ipam]] tables: a subnet each, a
// plugin configuration that names a binary, no subnet in two tables, and
// none holding an address of a pool or a static range (one allocator per
// address).
func (p PodNetwork) validateIPAM() []error {
	var errs []error
	var subnets []netip.Prefix
	var managed []podnetwork.Range
	for _, pool := range p.Pools {
		managed = append(managed, pool.Range)
	}
	for _, rs := range p.Ranges.ByNetDev() {
		managed = append(managed, rs...)
	}
	for i, t := range p.IPAM {
		where := fmt.Sprintf("pod_network.ipam[%d]", i)
		subnet, err := netip.ParsePrefix(t.Subnet)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: subnet %q: %w", where, t.Subnet, err))
			continue
		}
		subnet = subnet.Masked()
		if _, err := (podnetwork.IPAMPlugin{Subnet: subnet, Config: json.RawMessage(t.Config)}).Type(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
		for _, o := range subnets {
			if o.Overlaps(subnet) {
				errs = append(errs, fmt.Errorf("%s: subnet %s overlaps %s of an earlier table", where, subnet, o))
			}
		}
		subnets = append(subnets, subnet)
		for _, r := range managed {
			if subnet.Contains(r.First) || subnet.Contains(r.Last) || r.Contains(subnet.Addr()) {
				errs = append(errs, fmt.Errorf("%s: subnet %s overlaps %s of pod_network's pools or ranges: one allocator per subnet", where, subnet, r))
			}
		}
	}
	if len(p.IPAM) > 0 && len(p.CNIBinDirs) == 0 {
		errs = append(errs, errors.New("pod_network.cni_bin_dirs: empty, and pod_network.ipam names plugins"))
	}
	for _, d := range p.CNIBinDirs {
		if !filepath.IsAbs(d) {
			errs = append(errs, fmt.Errorf("pod_network.cni_bin_dirs %q: want an absolute path", d))
		}
	}
	return errs
}
