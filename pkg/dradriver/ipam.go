package dradriver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/cniipam"
)

// DelegatedAddress is an address a CNI IPAM plugin (pod_network.ipam)
// gave one device of a prepared claim, for the pod the claim was reserved
// for: that pod's interface of the device gets it. The plugin keys it by
// the claim's UID and the device's name; Plugin and Subnet are the
// configuration that gave it, so the DEL reaches the same plugin after a
// reload changed the table.
type DelegatedAddress struct {
	Device string          `json:"device"`
	NetDev string          `json:"netdev"`
	Pod    types.UID       `json:"pod"`
	Subnet netip.Prefix    `json:"subnet"`
	Plugin json.RawMessage `json:"plugin"`
	Addr   netip.Prefix    `json:"addr"`
}

func (a DelegatedAddress) plugin() podnetwork.IPAMPlugin {
	return podnetwork.IPAMPlugin{Subnet: a.Subnet, Config: a.Plugin}
}

// ipamRequest is what the plugin keys a's address by: the claim's UID as
// the container, the device as the interface, and the pod the claim is
// reserved for.
func ipamRequest(claim *resourceapi.ResourceClaim, a DelegatedAddress) cniipam.Request {
	r := cniipam.Request{ContainerID: string(claim.UID), IfName: a.Device, PodNamespace: claim.Namespace, UID: string(a.Pod)}
	for _, c := range claim.Status.ReservedFor {
		if c.UID == a.Pod {
			r.PodName = c.Name
		}
	}
	return r
}

// delegatedAddresses are the addresses a claim's devices need from the
// node's IPAM plugins, without them yet: each held RoCE device whose
// netdev is in a plugin's subnet, of a claim reserved for one pod, whose
// request's config asks for an interface without addresses of its own. A
// claim several pods share gets none (its pods' sub-interfaces take the
// node's pools). Pure: the plugins run in PrepareResourceClaims.
func delegatedAddresses(claim *resourceapi.ResourceClaim, driver string, inv Inventory, node model.Node, plugins cniipam.Delegate) ([]DelegatedAddress, error) {
	if len(plugins.Plugins) == 0 || len(claim.Status.ReservedFor) != 1 || claim.Status.ReservedFor[0].Resource != "pods" {
		return nil, nil
	}
	claimed, err := claimedDevices(claim, driver)
	if err != nil {
		return nil, err
	}
	var out []DelegatedAddress
	for _, c := range claimed {
		ibdev, ok := inv.IBDevs[c.Device]
		if !ok || c.AdminAccess || slices.ContainsFunc(out, func(a DelegatedAddress) bool { return a.Device == c.Device }) {
			continue
		}
		cfg, err := ClaimNetworkConfig(claim, driver, c.Request)
		if err != nil {
			return nil, err
		}
		if cfg.Mode == v1alpha1.ModeNone || len(cfg.Addresses) > 0 {
			continue
		}
		dev := podnetwork.NodeFacts{Node: node}.Device(ibdev, false)
		p, ok := podnetwork.IPAMPluginFor(plugins.Plugins, dev.Addrs)
		if !dev.RoCE || dev.NetDev == "" || !ok {
			continue
		}
		out = append(out, DelegatedAddress{Device: c.Device, NetDev: dev.NetDev, Pod: claim.Status.ReservedFor[0].UID, Subnet: p.Subnet, Plugin: p.Config})
	}
	return out, nil
}

// addDelegated asks the plugins for each of want's addresses; on an error
// it frees those it got and says why, naming the claim.
func addDelegated(ctx context.Context, plugins cniipam.Delegate, claim *resourceapi.ResourceClaim, want []DelegatedAddress) ([]DelegatedAddress, error) {
	got := make([]DelegatedAddress, 0, len(want))
	for _, a := range want {
		addr, err := plugins.Add(ctx, a.plugin(), ipamRequest(claim, a))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("claim %s/%s: %s (%s): %w", claim.Namespace, claim.Name, a.Device, a.NetDev, err), delDelegated(ctx, plugins, claim, got))
		}
		a.Addr = addr
		got = append(got, a)
	}
	return got, nil
}

// delDelegated frees a claim's delegated addresses (DEL, which plugins
// answer with success for what they do not hold).
func delDelegated(ctx context.Context, plugins cniipam.Delegate, claim *resourceapi.ResourceClaim, addrs []DelegatedAddress) error {
	var errs []error
	for _, a := range addrs {
		if err := plugins.Del(ctx, a.plugin(), ipamRequest(claim, a)); err != nil {
			errs = append(errs, fmt.Errorf("claim %s/%s: freeing %s of %s: %w", claim.Namespace, claim.Name, a.Addr, a.Device, err))
		}
	}
	return errors.Join(errs...)
}

// withDelegated hands out the addresses the plugins gave pod's claims to
// its sub-interfaces of their netdevs, first; the rest come from pool.
type withDelegated struct {
	podnetwork.Allocator
	byNetDev map[string][]netip.Prefix
}

func (w withDelegated) Allocate(host model.NetDev) (netip.Prefix, error) {
	if held := w.byNetDev[host.Name]; len(held) > 0 {
		w.byNetDev[host.Name] = held[1:]
		return held[0], nil
	}
	return w.Allocator.Allocate(host)
}

// delegatedFor are the addresses the plugins gave for pod, by netdev.
func delegatedFor(prepared map[types.UID]PreparedClaim, pod types.UID) map[string][]netip.Prefix {
	out := map[string][]netip.Prefix{}
	for _, uid := range slices.Sorted(maps.Keys(prepared)) {
		for _, a := range prepared[uid].Addresses {
			if a.Pod == pod {
				out[a.NetDev] = append(out[a.NetDev], a.Addr)
			}
		}
	}
	return out
}
