package config

import (
	"errors"
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
