package config

import (
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"unicode"
)

// Topology says where the node's HCAs and the node itself sit in the
// fabric: each HCA's rail (the leaf switch that NIC i of every node in a
// rail-optimized cluster is wired to), and the node's block and rack. The
// DRA driver publishes the rails as the rail attribute; the agents write
// them, with the node's counts, as Node Feature Discovery labels.
type Topology struct {
	// Rails are tried in order; the first whose selectors all match an HCA
	// names its rail.
	Rails        []Rail `toml:"rails,omitempty" help:"each HCA's rail, as [[topology.rails]] tables (below), the first that matches wins; an HCA none names, where every RoCE HCA of the node but the default-route one is in an IPv4 subnet of its own, is on the rail named after its subnet (25.11.128.32/27); an SR-IOV VF is on its PF's rail"`
	Block        string `toml:"block" flag:"topology-block" help:"this node's block (a group of racks under one set of leaf or spine switches), written as the NFD label <vendor>/block; a label value: up to 63 letters, digits, '-', '_', '.'; empty: none"`
	Rack         string `toml:"rack" flag:"topology-rack" help:"this node's rack, written as the NFD label <vendor>/rack; a label value like block; empty: none"`
	FeaturesFile string `toml:"features_file" flag:"topology-features-file" help:"the Node Feature Discovery feature file the agents (watch, device-plugin, dra-driver) keep current with this node's RDMA facts (hca-count, rail-count, transports, block, rack), which NFD's worker turns into node labels, e.g. /etc/kubernetes/node-feature-discovery/features.d/rdma-cdi; empty: none"`
}

// Rail names the rail of the HCAs its selectors match. A selector is a
// glob (path.Match: *, ?, [...]); the ones left empty match anything, and
// at least one is set.
type Rail struct {
	Rail   string `toml:"rail" help:"the rail's name, the HCA's rail attribute: up to 64 characters, no space"`
	IBDev  string `toml:"ibdev" help:"glob matched against the HCA's name, e.g. mlx5_1 or mlx5_[1-4]"`
	NetDev string `toml:"netdev" help:"glob matched against the netdev of any of the HCA's ports, e.g. eth1"`
	PCI    string `toml:"pci" help:"glob matched against the HCA's PCI address, e.g. 0000:54:00.*"`
}

// MaxRailName is the longest rail name: a DRA string attribute's value
// holds at most 64 characters (resourceapi.DeviceAttributeMaxValueLength).
const MaxRailName = 64

// Matches reports whether every selector r sets matches the HCA with this
// name, PCI address and port netdevs. The patterns were validated.
func (r Rail) Matches(ibdev, pciAddress string, netdevs []string) bool {
	if r.IBDev != "" && !globMatch(r.IBDev, ibdev) {
		return false
	}
	if r.PCI != "" && !globMatch(r.PCI, pciAddress) {
		return false
	}
	if r.NetDev != "" {
		for _, n := range netdevs {
			if globMatch(r.NetDev, n) {
				return true
			}
		}
		return false
	}
	return true
}

func globMatch(pattern, name string) bool {
	ok, _ := path.Match(pattern, name)
	return ok
}

// labelValue is a Kubernetes label value (IsValidLabelValue), which NFD
// writes a feature file's value into.
var labelValue = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`)
})

// dnsSubdomain is a label key's prefix (IsDNS1123Subdomain, less the length).
var dnsSubdomain = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
})

// validate checks the section; vendor is cdi.vendor, the prefix of the
// labels the feature file carries.
func (t Topology) validate(vendor string) []error {
	var errs []error
	for i, r := range t.Rails {
		where := fmt.Sprintf("topology.rails[%d] (%s)", i, r.Rail)
		if r.Rail == "" || len(r.Rail) > MaxRailName || strings.IndexFunc(r.Rail, func(c rune) bool { return unicode.IsSpace(c) || !unicode.IsPrint(c) }) >= 0 {
			errs = append(errs, fmt.Errorf("%s: rail %q: want a name of 1 to %d characters, no space", where, r.Rail, MaxRailName))
		}
		if r.IBDev == "" && r.NetDev == "" && r.PCI == "" {
			errs = append(errs, fmt.Errorf("%s: no selector: set ibdev, netdev or pci", where))
		}
		for _, sel := range [][2]string{{"ibdev", r.IBDev}, {"netdev", r.NetDev}, {"pci", r.PCI}} {
			if _, err := path.Match(sel[1], ""); err != nil {
				errs = append(errs, fmt.Errorf("%s: %s %q: %v", where, sel[0], sel[1], err))
			}
		}
	}
	for _, l := range [][2]string{{"block", t.Block}, {"rack", t.Rack}} {
		if len(l[1]) > 63 || !labelValue().MatchString(l[1]) {
			errs = append(errs, fmt.Errorf("topology.%s %q: want a label value: up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", l[0], l[1]))
		}
	}
	if f := t.FeaturesFile; f != "" {
		switch {
		case !filepath.IsAbs(f):
			errs = append(errs, fmt.Errorf("topology.features_file %q: want an absolute path", f))
		case strings.HasPrefix(filepath.Base(f), "."):
			// NFD skips hidden files: its readers' way to ignore a temp file.
			errs = append(errs, fmt.Errorf("topology.features_file %q: NFD ignores a file whose name starts with '.'", f))
		}
		if len(vendor) > 253 || !dnsSubdomain().MatchString(vendor) {
			errs = append(errs, fmt.Errorf("topology.features_file: cdi.vendor %q is the labels' prefix, which must be a lower-case DNS subdomain", vendor))
		}
	}
	return errs
}
