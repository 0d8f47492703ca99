// Package cniipam gets pod addresses from a CNI IPAM plugin the site runs
// already (Whereabouts, nv-ipam, host-local): the plugin is executed as
// the CNI spec's IPAM interface says (ADD gives an address, DEL frees it,
// both keyed by container ID and interface name), through the CNI
// library's invoke package, so the plugin's own store (Whereabouts' IPPool
// objects) keeps every address to one pod across the cluster.
package cniipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
)

// Request is what the plugin keys one address by, and the pod it is for
// (CNI_ARGS K8S_POD_*, which Whereabouts records as the address's owner).
type Request struct {
	ContainerID, IfName        string
	PodNamespace, PodName, UID string
}

// Delegate runs the plugins (pod_network.ipam).
type Delegate struct {
	// BinDirs are where plugin binaries are looked up (CNI_PATH).
	BinDirs []string
	Plugins []podnetwork.IPAMPlugin
	// Timeout bounds one ADD or DEL; zero: DefaultTimeout.
	Timeout time.Duration
	// Exec runs the binaries; nil: the invoke package's.
	Exec invoke.Exec
}

// DefaultTimeout bounds one plugin call: Whereabouts waits for its
// cluster-wide leader lease, a few hundred milliseconds per node that
// allocates at the same time.
const DefaultTimeout = 30 * time.Second

// netConf is the network configuration the plugin reads on stdin: its
// "ipam" object as configured, in a network of the CNI spec's version.
func netConf(p podnetwork.IPAMPlugin) ([]byte, error) {
	return json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "rdma-cdi", "ipam": p.Config})
}

// args are the CNI_* variables of one call, and the plugin's whole
// environment: the agent's PATH, nothing else of it. An IPAM plugin does
// not enter the network namespace, and when a claim is prepared its pod's
// does not exist: CNI_NETNS names the agent's own, and CNI_NETNS_OVERRIDE
// lets the plugin take it (the CNI library refuses its own namespace
// otherwise, after the plugin has allocated).
type args struct {
	command string
	r       Request
	path    string
}

func (a args) AsEnv() []string {
	r := a.r
	return []string{
		"PATH=" + os.Getenv("PATH"), "CNI_NETNS_OVERRIDE=1",
		"CNI_COMMAND=" + a.command, "CNI_CONTAINERID=" + r.ContainerID, "CNI_NETNS=/proc/self/ns/net", "CNI_IFNAME=" + r.IfName,
		"CNI_ARGS=IgnoreUnknown=true;K8S_POD_NAMESPACE=" + r.PodNamespace + ";K8S_POD_NAME=" + r.PodName + ";K8S_POD_UID=" + r.UID,
		"CNI_PATH=" + a.path,
	}
}

func (d Delegate) args(command string, r Request) args {
	return args{command: command, r: r, path: strings.Join(d.BinDirs, ":")}
}

// prepare finds p's binary and bounds ctx.
func (d Delegate) prepare(ctx context.Context, p podnetwork.IPAMPlugin) (string, []byte, context.Context, context.CancelFunc, error) {
	typ, err := p.Type()
	if err != nil {
		return "", nil, nil, nil, err
	}
	bin, err := invoke.FindInPath(typ, d.BinDirs)
	if err != nil {
		return "", nil, nil, nil, fmt.Errorf("IPAM plugin %s of %s: %w", typ, p.Subnet, err)
	}
	conf, err := netConf(p)
	if err != nil {
		return "", nil, nil, nil, err
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return bin, conf, ctx, cancel, nil
}

// Add asks p for an address of its subnet for r: the first the plugin
// returns inside p.Subnet, with the subnet's prefix length (the plugin's
// range may be a part of the subnet, and the pod reaches the rest of it on
// link, as the node does). An answer with none is freed again (DEL) and
// is an error.
func (d Delegate) Add(ctx context.Context, p podnetwork.IPAMPlugin, r Request) (netip.Prefix, error) {
	bin, conf, ctx, cancel, err := d.prepare(ctx, p)
	if err != nil {
		return netip.Prefix{}, err
	}
	defer cancel()
	res, err := invoke.ExecPluginWithResult(ctx, bin, conf, d.args("ADD", r), d.Exec)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("IPAM plugin %s (ADD %s/%s): %s", bin, r.ContainerID, r.IfName, tail(err))
	}
	out, err := types100.GetResult(res)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("IPAM plugin %s: its result: %w", bin, err)
	}
	var got []string
	for _, ip := range out.IPs {
		a, ok := netip.AddrFromSlice(ip.Address.IP)
		bits, _ := ip.Address.Mask.Size()
		if !ok {
			continue
		}
		a = a.Unmap()
		got = append(got, netip.PrefixFrom(a, bits).String())
		if p.Subnet.Contains(a) {
			return netip.PrefixFrom(a, p.Subnet.Bits()), nil
		}
	}
	undo := d.Del(context.WithoutCancel(ctx), p, r)
	return netip.Prefix{}, errors.Join(fmt.Errorf("IPAM plugin %s gave %v, none in %s", bin, got, p.Subnet), undo)
}

// Del frees what p gave r. Plugins answer a DEL of nothing with success
// (the CNI spec asks them to), so it may be repeated.
func (d Delegate) Del(ctx context.Context, p podnetwork.IPAMPlugin, r Request) error {
	bin, conf, ctx, cancel, err := d.prepare(ctx, p)
	if err != nil {
		return err
	}
	defer cancel()
	if err := invoke.ExecPluginWithoutResult(ctx, bin, conf, d.args("DEL", r), d.Exec); err != nil {
		return fmt.Errorf("IPAM plugin %s (DEL %s/%s): %s", bin, r.ContainerID, r.IfName, tail(err))
	}
	return nil
}

// maxMessage bounds what of a plugin's failure goes into the error, which
// reaches the pod's events through the kubelet: a plugin that fails
// without its JSON error answer is quoted with all it wrote to stderr
// (Whereabouts' debug log, kilobytes), and the reason is at its end.
const maxMessage = 512

// tail is err's message, its last maxMessage bytes when longer.
func tail(err error) string {
	msg := err.Error()
	if len(msg) <= maxMessage {
		return msg
	}
	cut := len(msg) - maxMessage
	for cut < len(msg) && !utf8.RuneStart(msg[cut]) {
		cut++
	}
	return "..." + msg[cut:]
}
