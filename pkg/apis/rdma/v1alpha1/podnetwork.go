// Package v1alpha1 is version v1alpha1 of the DRA driver's opaque claim
// parameters (group rdma.example.com): PodNetworkConfig, what a claim or
// DeviceClass asks of the RoCE interface its HCA gives the pod, and of the
// NCCL plugins its containers get. It holds the types, their strict
// decoding, per-field validation and the merge of class and claim; what
// depends on the node is pkg/podnetwork's.
package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
)

// APIVersion and Kind name the driver's opaque parameters in a
// ResourceClaim's or DeviceClass's config.
const (
	APIVersion = apis.Group + "/v1alpha1"
	Kind       = "PodNetworkConfig"
)

// Mode is how a device's RoCE interface reaches the pod.
type Mode string

const (
	// ModeAuto moves an exclusively held netdev the node does not keep
	// for itself, and gives every other pod a sub-interface.
	ModeAuto Mode = ""
	// ModeMove moves the HCA's netdev into the pod with its addresses,
	// MTU and routes; it comes back when the sandbox stops.
	ModeMove Mode = "move"
	// ModeSubInterface gives the pod a macvlan of the HCA's netdev with
	// an address of its own, so that it has its own GID.
	ModeSubInterface Mode = "sub-interface"
	// ModeNone gives the pod no interface (the HCA alone).
	ModeNone Mode = "none"
)

// NCCLPlugins is whether the containers that use a claim's request get
// the host's NCCL plugins and carried nccl.conf keys.
type NCCLPlugins string

const (
	// NCCLPluginsAuto is the node's rule: the host's plugins for an image
	// without its own (the annotation or env may still say none).
	NCCLPluginsAuto NCCLPlugins = "auto"
	// NCCLPluginsNone gives those containers none of them, whatever the
	// pod's annotation or a container's env says, as the annotation
	// rdma.example.com/nccl-plugins: none does.
	NCCLPluginsNone NCCLPlugins = "none"
)

// Route is one route the pod gets through the interface.
type Route struct {
	Destination string `json:"destination"`
	Gateway     string `json:"gateway,omitempty"`
}

// PodNetworkConfig is the driver's opaque parameters. Unset fields
// take the node's defaults: the netdev's own name, its addresses (move) or
// one from the node's range (sub-interface), its MTU, no routes.
type PodNetworkConfig struct {
	APIVersion    string   `json:"apiVersion"`
	Kind          string   `json:"kind"`
	Mode          Mode     `json:"mode,omitempty"`
	InterfaceName string   `json:"interfaceName,omitempty"`
	Addresses     []string `json:"addresses,omitempty"`
	MTU           int      `json:"mtu,omitempty"`
	Routes        []Route  `json:"routes,omitempty"`
	// AllowedPrefixes, in a DeviceClass's config only, are where a claim
	// of the class may put its own addresses and route its own routes
	// (destination and gateway). The addresses on a fabric are the
	// operator's: without it a claim may set neither.
	AllowedPrefixes []string `json:"allowedPrefixes,omitempty"`
	// NCCLPlugins, none or auto (unset: auto), is not about the
	// interface: none keeps the host's NCCL plugins and carried nccl.conf
	// keys from the containers that use the request, as the pod annotation
	// rdma.example.com/nccl-plugins: none does, and wins over that
	// annotation and the containers' env when they say auto. The driver
	// carries it to the containers' hook as a CDI device
	// (apis.ClaimNCCLPluginsNone).
	NCCLPlugins NCCLPlugins `json:"ncclPlugins,omitempty"`
}

// Bounds on what one config may ask: an address costs a GID table entry
// of the HCA (a few hundred at most) and each one a sub-interface holds is
// out of the node's range.
const (
	MaxAddresses = 8
	MaxRoutes    = 32
)

// Decode reads one opaque parameter object strictly: an unknown field, a
// wrong apiVersion or kind, or a bad value is an error that names it.
func Decode(raw []byte) (PodNetworkConfig, error) {
	var c PodNetworkConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return PodNetworkConfig{}, fmt.Errorf("%s: %w", Kind, err)
	}
	if c.APIVersion != APIVersion || c.Kind != Kind {
		return PodNetworkConfig{}, fmt.Errorf("parameters of apiVersion %q kind %q: want apiVersion %s, kind %s", c.APIVersion, c.Kind, APIVersion, Kind)
	}
	if err := c.Validate(); err != nil {
		return PodNetworkConfig{}, fmt.Errorf("%s: %w", Kind, err)
	}
	return c, nil
}

// Merge lays configs over each other in order (class configs first, then
// the claim's): each field a later one sets replaces the earlier value.
func Merge(layers ...PodNetworkConfig) PodNetworkConfig {
	out := PodNetworkConfig{APIVersion: APIVersion, Kind: Kind}
	for _, c := range layers {
		if c.Mode != ModeAuto {
			out.Mode = c.Mode
		}
		if c.InterfaceName != "" {
			out.InterfaceName = c.InterfaceName
		}
		if c.Addresses != nil {
			out.Addresses = c.Addresses
		}
		if c.MTU != 0 {
			out.MTU = c.MTU
		}
		if c.Routes != nil {
			out.Routes = c.Routes
		}
		if c.AllowedPrefixes != nil {
			out.AllowedPrefixes = c.AllowedPrefixes
		}
		if c.NCCLPlugins != "" {
			out.NCCLPlugins = c.NCCLPlugins
		}
	}
	return out
}

// MergeClassAndClaim is Merge of the class's configs, then the claim's,
// where the claim's own addresses and routes must lie inside the class's
// AllowedPrefixes, and a claim may not set AllowedPrefixes itself: a
// tenant would otherwise take the node's address, its gateway's or
// another pod's. A mode the class sets is the operator's as well: a
// claim may repeat it, not change it (a class of mode none stays none).
func MergeClassAndClaim(class, claim []PodNetworkConfig) (PodNetworkConfig, error) {
	classCfg := Merge(class...)
	allowed, err := classCfg.allowed()
	if err != nil {
		return PodNetworkConfig{}, fmt.Errorf("the DeviceClass's %w", err)
	}
	var errs []error
	for _, c := range claim {
		if classCfg.Mode != ModeAuto && c.Mode != ModeAuto && c.Mode != classCfg.Mode {
			errs = append(errs, fmt.Errorf("mode %q: the DeviceClass sets mode %q", c.Mode, classCfg.Mode))
		}
		if c.AllowedPrefixes != nil {
			errs = append(errs, errors.New("allowedPrefixes: only a DeviceClass's config may set it"))
		}
		addrs, _ := c.Prefixes() // Validate has parsed them
		for i, a := range addrs {
			if !within(allowed, a.Addr()) {
				errs = append(errs, fmt.Errorf("addresses[%d] %s: %s", i, a, notAllowed(allowed)))
			}
		}
		for i, r := range c.Routes {
			pr, _ := r.Parse()
			if !withinPrefix(allowed, pr.Dst) || (pr.Gw.IsValid() && !within(allowed, pr.Gw)) {
				errs = append(errs, fmt.Errorf("routes[%d] to %s: %s", i, r.Destination, notAllowed(allowed)))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return PodNetworkConfig{}, err
	}
	return Merge(append(slices.Clone(class), claim...)...), nil
}

func (c PodNetworkConfig) allowed() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range c.AllowedPrefixes {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("allowedPrefixes[%d] %q: want a CIDR", i, s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func within(allowed []netip.Prefix, a netip.Addr) bool {
	return slices.ContainsFunc(allowed, func(p netip.Prefix) bool { return p.Contains(a) })
}

func withinPrefix(allowed []netip.Prefix, q netip.Prefix) bool {
	return slices.ContainsFunc(allowed, func(p netip.Prefix) bool { return p.Bits() <= q.Bits() && p.Contains(q.Addr()) })
}

func notAllowed(allowed []netip.Prefix) string {
	if len(allowed) == 0 {
		return "the DeviceClass allows a claim no addresses or routes of its own (allowedPrefixes); the node's range gives sub-interfaces theirs"
	}
	return fmt.Sprintf("outside the DeviceClass's allowedPrefixes %v", allowed)
}

// MTU bounds: IPv4's minimum and the largest jumbo frame of RoCE NICs.
const (
	minMTU = 68
	maxMTU = 9216
)

// Validate checks each field on its own; what depends on the node (the
// netdev, its subnet) is Plan's.
func (c PodNetworkConfig) Validate() error {
	var errs []error
	switch c.Mode {
	case ModeAuto, ModeMove, ModeSubInterface, ModeNone:
	default:
		errs = append(errs, fmt.Errorf("mode %q: want move, sub-interface or none", c.Mode))
	}
	if c.InterfaceName != "" {
		if err := ValidInterfaceName(c.InterfaceName); err != nil {
			errs = append(errs, fmt.Errorf("interfaceName %q: %w", c.InterfaceName, err))
		}
	}
	if _, err := c.Prefixes(); err != nil {
		errs = append(errs, err)
	}
	if len(c.Addresses) > MaxAddresses {
		errs = append(errs, fmt.Errorf("addresses: %d, at most %d", len(c.Addresses), MaxAddresses))
	}
	if len(c.Routes) > MaxRoutes {
		errs = append(errs, fmt.Errorf("routes: %d, at most %d", len(c.Routes), MaxRoutes))
	}
	if _, err := c.allowed(); err != nil {
		errs = append(errs, err)
	}
	switch c.NCCLPlugins {
	case "", NCCLPluginsAuto, NCCLPluginsNone:
	default:
		errs = append(errs, fmt.Errorf("ncclPlugins %q: want %s or %s", c.NCCLPlugins, NCCLPluginsAuto, NCCLPluginsNone))
	}
	if c.MTU != 0 && (c.MTU < minMTU || c.MTU > maxMTU) {
		errs = append(errs, fmt.Errorf("mtu %d: want %d to %d", c.MTU, minMTU, maxMTU))
	}
	for i, r := range c.Routes {
		if _, err := r.Parse(); err != nil {
			errs = append(errs, fmt.Errorf("routes[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// Prefixes parses Addresses: each an address with its prefix length,
// neither a network's nor a loopback, link-local or multicast one, none
// overlapping another.
func (c PodNetworkConfig) Prefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range c.Addresses {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("addresses[%d] %q: want an address with its prefix length, e.g. 10.0.61.20/24", i, s)
		}
		a := p.Addr()
		if a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsUnspecified() {
			return nil, fmt.Errorf("addresses[%d] %q: not a unicast address a pod can use", i, s)
		}
		for j, q := range out {
			if q.Addr() == a {
				return nil, fmt.Errorf("addresses[%d] %q: the same address as addresses[%d]", i, s, j)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// Parse reads a route: a destination CIDR (masked) and, optionally, a
// gateway of its family (the zero Addr when it has none).
func (r Route) Parse() (ParsedRoute, error) {
	dst, err := netip.ParsePrefix(r.Destination)
	if err != nil {
		return ParsedRoute{}, fmt.Errorf("destination %q: want a CIDR", r.Destination)
	}
	out := ParsedRoute{Dst: dst.Masked()}
	if r.Gateway != "" {
		gw, err := netip.ParseAddr(r.Gateway)
		if err != nil {
			return ParsedRoute{}, fmt.Errorf("gateway %q: want an address", r.Gateway)
		}
		if gw.Is4() != dst.Addr().Is4() {
			return ParsedRoute{}, fmt.Errorf("gateway %s is not of destination %s's family", gw, dst)
		}
		out.Gw = gw
	}
	return out, nil
}

// ParsedRoute is a Route as addresses.
type ParsedRoute struct {
	Dst netip.Prefix
	Gw  netip.Addr
}

// ValidInterfaceName is the kernel's rule for a netdev name (dev_valid_name):
// 1 to 15 bytes, not . or .., no slash, colon or white space (isspace:
// \t \n \v \f \r and space). Beyond it, names a pod's interface must not
// take: one with a %, which the kernel reads as a template and numbers
// (net%d), leaving the interface under a name nobody asked for; lo and
// eth0, the pod's loopback and the network its CNI plugin gave it; and
// the agent's own travel names (apis.TravelNetDevPrefix), which would
// collide with a netdev on its way into a pod.
func ValidInterfaceName(name string) error {
	switch {
	case len(name) > 15:
		return errors.New("longer than 15 bytes (IFNAMSIZ)")
	case name == "." || name == "..":
		return errors.New("not a netdev name")
	case strings.ContainsAny(name, "/: \t\n\v\f\r"):
		return errors.New("holds a slash, colon or white space")
	case strings.Contains(name, "%"):
		return errors.New("holds a %, which the kernel takes for a name template")
	case name == "lo":
		return errors.New("is the pod's loopback")
	case name == "eth0":
		return errors.New("is the pod's network (its CNI plugin's interface)")
	case strings.HasPrefix(name, apis.TravelNetDevPrefix):
		return fmt.Errorf("starts with %s, the prefix of the names netdevs travel under", apis.TravelNetDevPrefix)
	}
	return nil
}
