// Package blocklease keeps a node's share of the cluster's pod addresses
// in the API server, as coordination.k8s.io/v1 Leases in the agent's
// namespace: one per block of a cluster pool (pod_network.pools) the node
// took, and one per static range (pod_network.ranges) it serves. A Lease
// is named from its range (podnetwork.BlockName, StaticName), so two nodes
// racing for one range collide on its creation; it is held by the node's
// name, owned by its Node (a deleted Node frees its ranges through the
// garbage collector) and renewed every third of pod_network.reclaim_after.
// A range whose Lease ran out may be taken over; its own node stops
// handing out its addresses from then on, until it renews it again.
//
// The choices (which block, which range conflicts) are pkg/podnetwork's;
// this package reads and writes the Leases.
package blocklease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
)

// Options are a node's settings: pod_network's pools, block_size,
// reclaim_after and ranges, and who the node is.
type Options struct {
	API  API
	Node string
	// Pools, BlockSize and ReclaimAfter are the cluster's (the same on
	// every node).
	Pools        []podnetwork.ClusterPool
	BlockSize    podnetwork.BlockSize
	ReclaimAfter time.Duration
	// Static are the node's static ranges, by host netdev.
	Static map[string][]podnetwork.Range
	// Clock is the real one when nil.
	Clock clock.Clock
	Log   logrus.FieldLogger
}

// maxRaces bounds the attempts at one pool's blocks that another node
// wins between the listing and the write.
const maxRaces = 16

// Holder holds a node's Leases: it takes them (Start, Claim), renews them
// (Run) and says which ranges the node may hand out now (Pool).
type Holder struct {
	opts Options

	mu      sync.Mutex
	nodeUID types.UID
	held    map[string]*heldRange
}

// heldRange is one Lease the node holds.
type heldRange struct {
	lease *coordinationv1.Lease // as last written: its resourceVersion
	rng   podnetwork.Range
	// netdev is a static range's host netdev; "" for a block.
	netdev string
	// renewed is when the node last wrote the Lease, by its own clock:
	// the range is the node's until ReclaimAfter later.
	renewed time.Time
}

// New makes the Holder of opts; Start takes its Leases.
func New(opts Options) *Holder {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Holder{opts: opts, held: map[string]*heldRange{}}
}

// Start adopts the Leases the node holds from an earlier run (a static
// range no longer configured is given up), renews them, and registers the
// static ranges of netdevs that lie in their subnets. A static range that
// overlaps another node's range or a cluster block is refused, naming
// both nodes and ranges: two nodes would hand out the same addresses.
func (h *Holder) Start(ctx context.Context, netdevs []model.NetDev) error {
	if err := h.adopt(ctx); err != nil {
		return err
	}
	if err := h.Renew(ctx); err != nil {
		h.opts.Log.Warnf("address leases: %v", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, nd := range netdevs {
		for _, r := range h.staticIn(nd) {
			if _, held := h.held[podnetwork.StaticName(r)]; held {
				continue
			}
			if _, err := h.registerStatic(ctx, nd.Name, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// adopt reads the node's uid and takes the Leases it holds.
func (h *Holder) adopt(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	uid, err := h.opts.API.NodeUID(ctx, h.opts.Node)
	if err != nil {
		return fmt.Errorf("address leases: reading node %s (their owner): %w", h.opts.Node, err)
	}
	h.nodeUID = uid
	leases, err := h.opts.API.List(ctx)
	if err != nil {
		return fmt.Errorf("address leases: %w", err)
	}
	for i := range leases {
		l := &leases[i]
		if holderOf(l) != h.opts.Node {
			continue
		}
		r, err := podnetwork.ParseRange(l.Annotations[apis.AddressRangeAnnotation])
		if err != nil {
			h.opts.Log.Warnf("address lease %s: %v; left alone", l.Name, err)
			continue
		}
		netdev := ""
		if l.Labels[apis.AddressBlockLabel] == apis.AddressBlockStatic {
			netdev = l.Annotations[apis.AddressNetDevAnnotation]
			if !slices.Contains(h.opts.Static[netdev], r) {
				h.opts.Log.Infof("address lease %s: %s's static range %s is no longer configured; given up", l.Name, netdev, r)
				if err := h.opts.API.Delete(ctx, l); err != nil && !apierrors.IsNotFound(err) {
					h.opts.Log.Warnf("address lease %s: %v", l.Name, err)
				}
				continue
			}
		}
		h.held[l.Name] = &heldRange{lease: l, rng: r, netdev: netdev, renewed: renewedAt(l)}
		h.opts.Log.Infof("address lease %s: %s adopted", l.Name, r)
	}
	return nil
}

// staticIn are nd's static ranges inside its subnets (those of other
// subnets are other nodes', one config for a routed fabric).
func (h *Holder) staticIn(nd model.NetDev) []podnetwork.Range {
	var out []podnetwork.Range
	for _, r := range h.opts.Static[nd.Name] {
		for _, a := range nd.Addrs {
			if a.Masked().Contains(r.First) && a.Masked().Contains(r.Last) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// Run renews the Leases every third of ReclaimAfter until ctx ends; after
// a failure it tries again sooner.
func (h *Holder) Run(ctx context.Context) error {
	every := h.opts.ReclaimAfter / 3
	wait := every
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.opts.Clock.After(wait):
		}
		if err := h.Renew(ctx); err != nil {
			h.opts.Log.Warnf("address leases: %v", err)
			wait = min(every, retryAfterFailure)
			continue
		}
		wait = every
	}
}

// retryAfterFailure is how soon a failed renewal is tried again.
const retryAfterFailure = 30 * time.Second

// Renew writes every held Lease's renewTime. A Lease another node took
// over (or that was deleted) is lost: its range is no longer handed out.
// One that could not be written stays held, and is handed out only until
// ReclaimAfter past its last renewal. The API calls are made without the
// Holder's lock: a slow API server delays no pod whose block has room.
func (h *Holder) Renew(ctx context.Context) error {
	type pending struct {
		hr    *heldRange
		lease *coordinationv1.Lease
	}
	h.mu.Lock()
	todo := map[string]pending{}
	for name, hr := range h.held {
		todo[name] = pending{hr, hr.lease}
	}
	h.mu.Unlock()
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(todo)) {
		p := todo[name]
		now := h.opts.Clock.Now()
		out, lost, err := h.renewLease(ctx, p.lease, now)
		h.mu.Lock()
		switch {
		case h.held[name] != p.hr:
			// Taken again (Claim) or dropped meanwhile: that write stands.
		case lost != "":
			h.lose(name, lost)
		case err != nil:
			errs = append(errs, fmt.Errorf("renewing %s (%s): %w; its addresses are handed out until %s", name, p.hr.rng,
				err, p.hr.renewed.Add(h.opts.ReclaimAfter).Format(time.RFC3339)))
		default:
			p.hr.lease, p.hr.renewed = out, now
		}
		h.mu.Unlock()
	}
	return errors.Join(errs...)
}

// apiTimeout bounds each renewal's calls.
const apiTimeout = 30 * time.Second

// renewLease writes l renewed at now. lost says why the node no longer
// holds it ("" while it does).
func (h *Holder) renewLease(ctx context.Context, l *coordinationv1.Lease, now time.Time) (out *coordinationv1.Lease, lost string, err error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	out, err = h.opts.API.Update(ctx, h.stamp(l, now))
	if apierrors.IsConflict(err) {
		// Written by someone else since: still the node's?
		var cur *coordinationv1.Lease
		if cur, err = h.opts.API.Get(ctx, l.Name); err == nil {
			if holder := holderOf(cur); holder != h.opts.Node {
				return nil, fmt.Sprintf("node %s holds it now", holder), nil
			}
			out, err = h.opts.API.Update(ctx, h.stamp(cur, now))
		}
	}
	if apierrors.IsNotFound(err) {
		return nil, "its Lease was deleted", nil
	}
	return out, "", err
}

// lose drops a held range. Its pods keep their addresses: the node that
// has it now may hand them out again.
func (h *Holder) lose(name, why string) {
	h.opts.Log.Errorf("address lease %s (%s) lost: %s; no more of its addresses are handed out here, and the pods holding them may meet their twins",
		name, h.held[name].rng, why)
	delete(h.held, name)
}

// Pool is what the node may hand out now: its static ranges and blocks
// whose Leases it renewed within ReclaimAfter (a node that could not
// renew fails closed), and a Claim, working in ctx, for one more range.
func (h *Holder) Pool(ctx context.Context) podnetwork.Pool {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.opts.Clock.Now()
	p := podnetwork.Pool{Ranges: map[string][]podnetwork.Range{}}
	for _, pool := range h.opts.Pools {
		p.Managed = append(p.Managed, pool.Range)
	}
	for _, rs := range h.opts.Static {
		p.Managed = append(p.Managed, rs...)
	}
	for _, name := range slices.Sorted(maps.Keys(h.held)) {
		hr := h.held[name]
		switch {
		case !now.Before(hr.renewed.Add(h.opts.ReclaimAfter)):
			continue
		case hr.netdev != "":
			p.Ranges[hr.netdev] = append(p.Ranges[hr.netdev], hr.rng)
		default:
			p.Blocks = append(p.Blocks, hr.rng)
		}
	}
	p.Claim = func(host model.NetDev) (podnetwork.Range, error) { return h.Claim(ctx, host) }
	return p
}

// Claim gets the node one more range for host: a static range of host's
// not registered yet (its address came after Start), else the lowest
// free or expired block of a pool in host's subnets. Exhaustion is an
// error naming the pools; podnetwork.ErrNoClusterPool says no pool
// serves host.
func (h *Holder) Claim(ctx context.Context, host model.NetDev) (podnetwork.Range, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.staticIn(host) {
		if _, held := h.held[podnetwork.StaticName(r)]; !held {
			return h.registerStatic(ctx, host.Name, r)
		}
	}
	pools := podnetwork.PoolsFor(h.opts.Pools, host.Addrs)
	if len(pools) == 0 {
		return podnetwork.Range{}, podnetwork.ErrNoClusterPool
	}
	var errs []error
	for _, pool := range pools {
		r, err := h.claimBlock(ctx, pool)
		if err == nil {
			return r, nil
		}
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	h.opts.Log.Warnf("pod addresses for %s: %v", host.Name, err)
	return podnetwork.Range{}, err
}

// claimBlock takes the lowest free or expired block of pool.
func (h *Holder) claimBlock(ctx context.Context, pool podnetwork.ClusterPool) (podnetwork.Range, error) {
	size, err := h.opts.BlockSize.In(pool)
	if err != nil {
		return podnetwork.Range{}, err
	}
	for range maxRaces {
		leases, held, err := h.list(ctx)
		if err != nil {
			return podnetwork.Range{}, err
		}
		choice, err := podnetwork.ChooseBlock(pool, size, held, h.opts.Clock.Now())
		if err != nil {
			return podnetwork.Range{}, err
		}
		l := h.newLease(choice.Name, apis.AddressBlockPool, choice.Range)
		l.Annotations[apis.AddressPoolAnnotation] = pool.String()
		if choice.TakeOver != nil {
			h.opts.Log.Infof("address block %s: taking it over from node %s, whose lease ran out at %s",
				choice.Range, choice.TakeOver.Holder, choice.TakeOver.Expires.Format(time.RFC3339))
			l = h.takeOver(leases[choice.Name], l)
		}
		switch err := h.write(ctx, l, choice.TakeOver != nil, choice.Range, ""); {
		case err == nil:
			return choice.Range, nil
		case !errLostRace(err):
			return podnetwork.Range{}, fmt.Errorf("address block %s of pool %s: %w", choice.Range, pool, err)
		}
	}
	return podnetwork.Range{}, fmt.Errorf("pool %s: other nodes took %d blocks first; the next pod tries again", pool, maxRaces)
}

// registerStatic holds netdev's static range r: a new Lease, the node's
// own from an earlier run, or one whose node's lease ran out. Any other
// node's range over it is a conflict, named.
func (h *Holder) registerStatic(ctx context.Context, netdev string, r podnetwork.Range) (podnetwork.Range, error) {
	name := podnetwork.StaticName(r)
	leases, held, err := h.list(ctx)
	if err != nil {
		return podnetwork.Range{}, err
	}
	now := h.opts.Clock.Now()
	cur, exists := leases[name]
	takeOver := exists && holderOf(cur) != h.opts.Node && !holdingOf(cur, h.opts.ReclaimAfter).Live(now)
	var others []podnetwork.Holding
	for _, o := range podnetwork.Conflicts(r, h.opts.Node, held) {
		if !(takeOver && o.Name == name) {
			others = append(others, o)
		}
	}
	if len(others) > 0 {
		return podnetwork.Range{}, h.staticConflict(netdev, r, others)
	}
	l := h.newLease(name, apis.AddressBlockStatic, r)
	l.Annotations[apis.AddressNetDevAnnotation] = netdev
	if exists {
		l = h.takeOver(cur, l)
	}
	if err := h.write(ctx, l, exists, r, netdev); err != nil {
		if errLostRace(err) {
			// Another node registered it, or an overlap, meanwhile.
			if _, held, lerr := h.list(ctx); lerr == nil {
				if others := podnetwork.Conflicts(r, h.opts.Node, held); len(others) > 0 {
					return podnetwork.Range{}, h.staticConflict(netdev, r, others)
				}
			}
		}
		return podnetwork.Range{}, fmt.Errorf("registering %s's static range %s: %w", netdev, r, err)
	}
	return r, nil
}

func (h *Holder) staticConflict(netdev string, r podnetwork.Range, others []podnetwork.Holding) error {
	parts := make([]string, len(others))
	for i, o := range others {
		parts[i] = fmt.Sprintf("node %s's %s (lease %s)", o.Holder, o.Range, o.Name)
	}
	return fmt.Errorf("pod_network.ranges: node %s's %s range %s overlaps %s: two nodes would hand out the same addresses; give each node its own range, or use pod_network.pools",
		h.opts.Node, netdev, r, strings.Join(parts, ", "))
}

// errLostRace: another node wrote first.
func errLostRace(err error) bool {
	return apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) || errors.Is(err, errOverlapped)
}

var errOverlapped = errors.New("another node holds an overlapping range from before")

// write creates l (or, update, writes it over the Lease it takes over),
// then lists again: should another node's range, written first, overlap
// it (a static range and a block raced, or two nodes' block sizes
// differ), the node gives it back (errOverlapped). Otherwise the node
// holds r.
func (h *Holder) write(ctx context.Context, l *coordinationv1.Lease, update bool, r podnetwork.Range, netdev string) error {
	now := h.opts.Clock.Now()
	var out *coordinationv1.Lease
	var err error
	if update {
		out, err = h.opts.API.Update(ctx, l)
	} else {
		out, err = h.opts.API.Create(ctx, l)
	}
	if err != nil {
		return err
	}
	leases, held, err := h.list(ctx)
	if err != nil {
		return err
	}
	for _, o := range podnetwork.Conflicts(r, h.opts.Node, held) {
		if o.Live(now) && before(leases[o.Name], out) {
			if err := h.opts.API.Delete(ctx, out); err != nil && !apierrors.IsNotFound(err) {
				h.opts.Log.Warnf("address lease %s: giving it back: %v", out.Name, err)
			}
			return fmt.Errorf("%w: node %s's %s", errOverlapped, o.Holder, o.Range)
		}
	}
	h.held[out.Name] = &heldRange{lease: out, rng: r, netdev: netdev, renewed: now}
	h.opts.Log.Infof("address lease %s: %s held", out.Name, r)
	return nil
}

// before says whether a was created before b (the name breaks a tie):
// of two overlapping ranges, the older stays.
func before(a, b *coordinationv1.Lease) bool {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c < 0
	}
	return a.Name < b.Name
}

// list reads the address Leases, by name, and what they hold.
func (h *Holder) list(ctx context.Context) (map[string]*coordinationv1.Lease, []podnetwork.Holding, error) {
	leases, err := h.opts.API.List(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("address leases: %w", err)
	}
	byName := map[string]*coordinationv1.Lease{}
	var held []podnetwork.Holding
	for i := range leases {
		l := &leases[i]
		byName[l.Name] = l
		hd := holdingOf(l, h.opts.ReclaimAfter)
		if !hd.Range.First.IsValid() {
			h.opts.Log.Warnf("address lease %s: no range in its %s annotation; not counted", l.Name, apis.AddressRangeAnnotation)
			continue
		}
		held = append(held, hd)
	}
	return byName, held, nil
}

// holdingOf is what l holds; its range is invalid when the annotation is.
// A Lease without a duration lasts reclaim.
func holdingOf(l *coordinationv1.Lease, reclaim time.Duration) podnetwork.Holding {
	r, _ := podnetwork.ParseRange(l.Annotations[apis.AddressRangeAnnotation])
	d := reclaim
	if s := l.Spec.LeaseDurationSeconds; s != nil {
		d = time.Duration(*s) * time.Second
	}
	return podnetwork.Holding{Name: l.Name, Range: r, Holder: holderOf(l), Expires: renewedAt(l).Add(d)}
}

func holderOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// renewedAt is when l was last renewed, else acquired, else created.
func renewedAt(l *coordinationv1.Lease) time.Time {
	switch {
	case l.Spec.RenewTime != nil:
		return l.Spec.RenewTime.Time
	case l.Spec.AcquireTime != nil:
		return l.Spec.AcquireTime.Time
	}
	return l.CreationTimestamp.Time
}

// newLease is the node's Lease of r, of kind (apis.AddressBlockPool or
// Static), owned by its Node.
func (h *Holder) newLease(name, kind string, r podnetwork.Range) *coordinationv1.Lease {
	now := metav1.NewMicroTime(h.opts.Clock.Now())
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{apis.AddressBlockLabel: kind},
			Annotations: map[string]string{apis.AddressRangeAnnotation: r.String()},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: h.opts.Node, UID: h.nodeUID,
			}},
		},
		Spec: coordinationv1.LeaseSpec{AcquireTime: &now},
	}
	return h.stamp(l, now.Time)
}

// takeOver is want written over cur: cur's name and resourceVersion (the
// write fails if another node took it first), want's holder and owner.
func (h *Holder) takeOver(cur, want *coordinationv1.Lease) *coordinationv1.Lease {
	l := cur.DeepCopy()
	l.Labels, l.Annotations, l.OwnerReferences = want.Labels, want.Annotations, want.OwnerReferences
	l.Spec = want.Spec
	return l
}

// stamp is l held by the node, renewed at now.
func (h *Holder) stamp(l *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	l = l.DeepCopy()
	node := h.opts.Node
	seconds := int32(h.opts.ReclaimAfter / time.Second)
	renew := metav1.NewMicroTime(now)
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &node, &seconds, &renew
	l.Spec.AcquireTime = cmp.Or(l.Spec.AcquireTime, &renew)
	return l
}
