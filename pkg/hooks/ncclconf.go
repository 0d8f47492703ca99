package hooks

import (
	"errors"
	"os"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
	"github.com/rdma-cdi/rdma-cdi/pkg/netinfo"
)

// NCCLConfPath is where NCCL reads its system-wide defaults.
const NCCLConfPath = "/etc/nccl.conf"

// maxNCCLConf bounds the image's own nccl.conf.
const maxNCCLConf = 1 << 20

// NCCLConfOptions steer WriteNCCLConf.
type NCCLConfOptions struct {
	NCCL config.NCCL
	// Roots are the host trees discovery reads (sysfs and dev).
	Roots model.Roots
	// Plugins, when set, adds the container's NCCL plugins decision's
	// variables (NCCL_NET_PLUGIN, the host's carried keys) after the rest.
	Plugins PluginsDecider
	// Scan, when set, is this start's scan of the node, shared with the
	// plugins decision; it must be made with NCCL (NewContainerScan). Nil
	// scans here.
	Scan ContainerScan
}

// WriteNCCLConf writes the container's NCCL defaults into its
// /etc/nccl.conf, which NCCL reads with lower precedence than the process
// environment:
//   - NCCL_IB_HCA lists exactly the RDMA devices whose uverbs node
//     config.json's linux.devices carries; a container without one gets no
//     file at all;
//   - NCCL_IB_GID_INDEX follows NCCL's own rule restricted to the addresses
//     the container's network namespace holds, and NCCL_SOCKET_IFNAME is
//     that namespace's default-route netdev;
//   - NCCL_IB_SUBNET_AWARE_ROUTING where those HCAs' addresses in the
//     namespace sit in different subnets (one per rail);
//   - the site's tunables from the config.
//
// Keys the image's nccl.conf sets and keys config.json's process.env sets
// are not written; an earlier rdma-cdi block is replaced. Only the config
// (nccl.delivery "nccl-conf") turns this on or off, never the container.
func WriteNCCLConf(c *Container, opts NCCLConfOptions, log *logrus.Entry) error {
	if opts.NCCL.Delivery != config.DeliveryNCCLConf {
		log.Debugf("nccl.delivery is %q: no nccl.conf written", opts.NCCL.Delivery)
		return nil
	}
	scan := opts.Scan
	if scan == nil {
		scan = NewContainerScan(c, opts.Roots, &opts.NCCL, log)
	}
	sc, err := scan()
	if err != nil {
		return err
	}
	if sc.Net == nil {
		return errors.New("the node was scanned without the container's network namespace (NewContainerScan without the NCCL settings)")
	}
	node := sc.Node
	devices := deviceNames(sc.Devices)
	if len(devices) == 0 {
		log.Debug("no RDMA device (uverbs) in linux.devices: no nccl.conf written")
		return nil
	}
	defRoute, held := sc.Net.DefaultRouteNetDev, sc.Net.Held

	// The default-route HCA (the management NIC) is the host's: with host
	// networking the container's default route is the node's; in a
	// namespace of its own, netdev names are the container's (eth0 of a
	// veth), so the host's route is read from the host's namespace.
	node.DefaultRouteNetDev = defRoute
	// The subnets NCCL compares are those of the addresses it picks, which
	// the container's namespace holds (the host's, with host networking).
	node.NetDevs = sc.Net.NetDevs
	if !hostNetwork(c.Spec) {
		node.DefaultRouteNetDev = hostDefaultRouteNetDev(log)
	}
	settings := nccl.Compute(node, opts.NCCL, nccl.Scope{Devices: devices, HeldAddrs: held, DefaultRouteNetDev: defRoute})
	if opts.Plugins != nil {
		pd, err := opts.Plugins()
		if err != nil {
			return err
		}
		// The site's own tunables win over what the host's plugins bring.
		for _, v := range pluginVars(pd) {
			if !slices.ContainsFunc(settings.Vars, func(o nccl.Var) bool { return o.Name == v.Name }) {
				settings.Vars = append(settings.Vars, v)
			}
		}
	}
	for _, w := range settings.Warnings {
		log.Warn(w)
	}
	if c.ReadOnly() {
		log.Warnf("container root is read-only (config.json root.readonly): %s not written", NCCLConfPath)
		return nil
	}

	existing, err := c.ReadFile(NCCLConfPath, maxNCCLConf)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	userEnv := processEnvKeys(c.Spec)
	merged := nccl.MergeConf(existing, settings.Vars, func(name string) bool { return userEnv[name] })
	if string(merged) == string(existing) {
		log.Debugf("%s already up to date", NCCLConfPath)
		return nil
	}
	if err := c.WriteFile(NCCLConfPath, merged, 0o644); err != nil {
		if errors.Is(err, ErrReadOnly) {
			log.Warnf("%v; %s not written", err, NCCLConfPath)
			return nil
		}
		return err
	}
	written := []string{}
	for _, v := range settings.Vars {
		if !userEnv[v.Name] {
			written = append(written, v.Name+"="+v.Value)
		}
	}
	log.Infof("%s: devices %s; %s", NCCLConfPath, strings.Join(devices, ","), strings.Join(written, " "))
	return nil
}

// processEnvKeys are the names config.json's process.env sets: the user's
// and the engine's values, which NCCL reads before the file anyway.
func processEnvKeys(spec *specs.Spec) map[string]bool {
	keys := map[string]bool{}
	if spec.Process == nil {
		return keys
	}
	for _, kv := range spec.Process.Env {
		if k, _, ok := strings.Cut(kv, "="); ok {
			keys[k] = true
		}
	}
	return keys
}

// hostNetwork reports whether config.json leaves the network namespace
// alone (no linux.namespaces entry of type network).
func hostNetwork(spec *specs.Spec) bool {
	if spec.Linux == nil {
		return true
	}
	return !slices.ContainsFunc(spec.Linux.Namespaces, func(ns specs.LinuxNamespace) bool {
		return ns.Type == specs.NetworkNamespace
	})
}

// hostNetNSPath is the host's network namespace as the hook sees it: a
// createContainer hook still has the host's /proc (pivot_root is later).
var hostNetNSPath = "/proc/1/ns/net"

// hostDefaultRouteNetDev returns "" when the host's namespace cannot be
// read; then no HCA is left out, which is the safe side for NCCL_IB_HCA.
func hostDefaultRouteNetDev(log *logrus.Entry) string {
	h, err := netinfo.Open(hostNetNSPath)
	if err != nil {
		log.Debugf("host network namespace: %v", err)
		return ""
	}
	defer h.Close()
	name, err := h.DefaultRouteNetDev()
	if err != nil {
		log.Debugf("host default route: %v", err)
	}
	return name
}
