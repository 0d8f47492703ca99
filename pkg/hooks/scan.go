package hooks

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
	"github.com/rdma-cdi/rdma-cdi/pkg/netinfo"
)

// ContainerScan is one container start's reading of the node's RDMA
// devices, made at most once however many steps ask (NewContainerScan):
// the NCCL plugins decision asks which EFA devices the container gets,
// nccl-conf which devices it gets with their GID tables. Discovery is the
// larger part of a hook's work, and the two steps run side by side.
type ContainerScan func() (Scan, error)

// Scan is what a ContainerScan read.
type Scan struct {
	// Node holds the node's RDMA devices as discover's NCCLOnly reads
	// them, with the GID tables of the container's devices alone, and
	// those only where Net was read (cut where NCCL's pick for its
	// addresses is settled, nccl.GIDScanStop).
	Node model.Node
	// Devices are the container's devices (ContainerDevices).
	Devices []model.Device
	// Net is the container's network namespace, read where the scan is
	// made for nccl-conf; nil otherwise.
	Net *ContainerNet
}

// ContainerNet is what nccl-conf reads of the container's network
// namespace (the host's, with host networking).
type ContainerNet struct {
	NetDevs []model.NetDev
	// DefaultRouteNetDev is the namespace's default-route netdev.
	DefaultRouteNetDev string
	// Held are the namespace's addresses.
	Held []netip.Addr
}

// runDiscovery is discovery as the hooks run it; a test counts its calls.
var runDiscovery = discover.Discover

// NewContainerScan returns c's scan of the node under roots. With ncclConf
// set (nccl-conf writes this start's nccl.conf under those settings) it
// reads the container's network namespace first, whose addresses decide
// how much of each GID table NCCL's pick needs, and the GID tables of the
// container's devices; without, no GID table at all. Discovery's warnings
// go to log at debug level.
func NewContainerScan(c *Container, roots model.Roots, ncclConf *config.NCCL, log *logrus.Entry) ContainerScan {
	return sync.OnceValues(func() (Scan, error) {
		var sc Scan
		opts := discover.Options{Roots: roots, SkipNet: true, NCCLOnly: true, GIDTables: func(model.Device) bool { return false }}
		if ncclConf != nil {
			net, err := readContainerNet(c)
			if err != nil {
				return Scan{}, fmt.Errorf("container network namespace: %w", err)
			}
			sc.Net = net
			opts.GIDTables = func(d model.Device) bool { return hasVerbsNode(c.Spec, d) }
			opts.GIDScanStop = nccl.GIDScanStop(*ncclConf, net.Held)
		}
		res, err := runDiscovery(opts)
		if err != nil {
			return Scan{}, err
		}
		for _, w := range res.Warnings {
			log.Debug(w)
		}
		sc.Node = res.Node
		sc.Devices = ContainerDevices(res.Node, c.Spec)
		return sc, nil
	})
}

// readContainerNet reads the netdevs, addresses and default route of c's
// network namespace.
func readContainerNet(c *Container) (*ContainerNet, error) {
	h, err := netinfo.Open(c.netNSToOpen())
	if err != nil {
		return nil, err
	}
	defer h.Close()
	netdevs, err := h.All()
	if err != nil {
		return nil, err
	}
	defRoute, err := h.DefaultRouteNetDev()
	if err != nil {
		return nil, err
	}
	held := []netip.Addr{}
	for _, nd := range netdevs {
		for _, p := range nd.Addrs {
			held = append(held, p.Addr())
		}
	}
	return &ContainerNet{NetDevs: netdevs, DefaultRouteNetDev: defRoute, Held: held}, nil
}

// ContainerDevices are the node's RDMA devices whose uverbs char device
// config.json's linux.devices holds: the one answer to which devices a
// container has.
func ContainerDevices(node model.Node, spec *specs.Spec) []model.Device {
	var out []model.Device
	for _, d := range node.Devices {
		if hasVerbsNode(spec, d) {
			out = append(out, d)
		}
	}
	return out
}

// ContainerRDMADevices names the container's devices (ContainerDevices).
func ContainerRDMADevices(node model.Node, spec *specs.Spec) []string {
	return deviceNames(ContainerDevices(node, spec))
}

func deviceNames(devices []model.Device) []string {
	var names []string
	for _, d := range devices {
		names = append(names, d.Name)
	}
	return names
}

// hasVerbsNode reports whether config.json's linux.devices holds the
// device's uverbs node, matched by major:minor (what the container can
// open), or by path when the numbers are absent.
func hasVerbsNode(spec *specs.Spec, d model.Device) bool {
	if d.Verbs == nil || spec.Linux == nil {
		return false
	}
	return slices.ContainsFunc(spec.Linux.Devices, func(ld specs.LinuxDevice) bool {
		if ld.Type != "c" && ld.Type != "u" {
			return false
		}
		if ld.Major != 0 || ld.Minor != 0 {
			return ld.Major == int64(d.Verbs.Major) && ld.Minor == int64(d.Verbs.Minor)
		}
		return ld.Path == d.Verbs.Path
	})
}
