package podnetwork

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// IPAMPlugin is one pod_network.ipam entry: the CNI IPAM plugin
// configuration (the "ipam" object of a CNI network config: its "type"
// names the binary) that gives the pod addresses of Subnet
// (pkg/podnetwork/cniipam runs it).
type IPAMPlugin struct {
	Subnet netip.Prefix
	Config json.RawMessage
}

// Type is the plugin's binary name, from its configuration: a bare name,
// since a type with a slash would run a binary outside the plugin
// directories.
func (p IPAMPlugin) Type() (string, error) {
	var c struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(p.Config, &c); err != nil {
		return "", fmt.Errorf("IPAM config of %s: %w", p.Subnet, err)
	}
	if c.Type == "" || strings.ContainsAny(c.Type, "/\x00") || c.Type == "." || c.Type == ".." {
		return "", fmt.Errorf("IPAM config of %s: \"type\" %q: want the name of a plugin binary", p.Subnet, c.Type)
	}
	return c.Type, nil
}

// IPAMPluginFor is the plugin of plugins whose subnet holds one of a host
// netdev's addresses.
func IPAMPluginFor(plugins []IPAMPlugin, addrs []netip.Prefix) (IPAMPlugin, bool) {
	for _, p := range plugins {
		for _, a := range addrs {
			if p.Subnet.Contains(a.Addr()) {
				return p, true
			}
		}
	}
	return IPAMPlugin{}, false
}
