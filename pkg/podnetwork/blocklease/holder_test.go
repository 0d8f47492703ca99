package blocklease

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
)

const reclaim = time.Hour

func mustPool(t *testing.T, s string) podnetwork.ClusterPool {
	t.Helper()
	p, err := podnetwork.ParsePool(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustRange(t *testing.T, s string) podnetwork.Range {
	t.Helper()
	r, err := podnetwork.ParseRange(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// eth1 is node n's RoCE netdev: every node's in 10.0.61.0/24.
func eth1(n int) model.NetDev {
	return model.NetDev{Name: "eth1", Addrs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 61, byte(n)}), 24)}}
}

// node is one agent: its Holder and the addresses its pods hold (what
// the networker's records give it across restarts).
type node struct {
	t      *testing.T
	name   string
	host   model.NetDev
	holder *Holder
	inUse  map[netip.Addr]bool
}

type nodeOpts struct {
	pools  []string
	size   uint64
	static map[string][]podnetwork.Range
}

func startNode(t *testing.T, c *cluster, clk *clocktesting.FakeClock, name string, host model.NetDev, o nodeOpts) (*node, error) {
	t.Helper()
	var pools []podnetwork.ClusterPool
	for _, p := range o.pools {
		pools = append(pools, mustPool(t, p))
	}
	h := New(Options{
		API: c.api(), Node: name, Pools: pools, BlockSize: podnetwork.BlockOf(max(o.size, 16)),
		ReclaimAfter: reclaim, Static: o.static, Clock: clk, Log: quietLog(),
	})
	n := &node{t: t, name: name, host: host, holder: h, inUse: map[netip.Addr]bool{}}
	return n, h.Start(context.Background(), []model.NetDev{host})
}

func mustStart(t *testing.T, c *cluster, clk *clocktesting.FakeClock, name string, host model.NetDev, o nodeOpts) *node {
	t.Helper()
	n, err := startNode(t, c, clk, name, host, o)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// allocate gives one pod an address, as the networker does.
func (n *node) allocate() (netip.Addr, error) {
	pool := n.holder.Pool(context.Background())
	pool.InUse = n.inUse
	p, err := pool.Allocate(n.host)
	return p.Addr(), err
}

func (n *node) mustAllocate(count int) []netip.Addr {
	n.t.Helper()
	var out []netip.Addr
	for range count {
		a, err := n.allocate()
		if err != nil {
			n.t.Fatalf("node %s, address %d: %v", n.name, len(out), err)
		}
		out = append(out, a)
	}
	return out
}

// blocks are the ranges n may hand out now.
func (n *node) blocks() []podnetwork.Range {
	return n.holder.Pool(context.Background()).Blocks
}

func newClock() *clocktesting.FakeClock {
	return clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
}

// Two nodes whose netdevs share a subnet take disjoint blocks of one pool
// and never hand out one address twice.
func TestTwoNodesOneSubnetGetDisjointAddresses(t *testing.T) {
	c, clk := newCluster(t, "a", "b"), newClock()
	opts := nodeOpts{pools: []string{"10.0.61.128/25"}}
	a, b := mustStart(t, c, clk, "a", eth1(5), opts), mustStart(t, c, clk, "b", eth1(6), opts)
	seen := map[netip.Addr]string{}
	for range 20 {
		for _, n := range []*node{a, b} {
			addr := n.mustAllocate(1)[0]
			if other, dup := seen[addr]; dup {
				t.Fatalf("%s handed to pods of %s and %s", addr, other, n.name)
			}
			if !netip.MustParsePrefix("10.0.61.128/25").Contains(addr) {
				t.Fatalf("%s is outside the pool", addr)
			}
			seen[addr] = n.name
		}
	}
	for _, x := range a.blocks() {
		for _, y := range b.blocks() {
			if x.First.Compare(y.Last) <= 0 && y.First.Compare(x.Last) <= 0 {
				t.Errorf("a's block %s overlaps b's %s", x, y)
			}
		}
	}
	if len(a.blocks()) != 2 || len(b.blocks()) != 2 {
		t.Errorf("blocks a %v, b %v: want two each for 20 addresses in blocks of 16", a.blocks(), b.blocks())
	}
	for _, l := range c.leases() {
		h := *l.Spec.HolderIdentity
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].Kind != "Node" || l.OwnerReferences[0].Name != h ||
			string(l.OwnerReferences[0].UID) != "uid-"+h {
			t.Errorf("lease %s of %s: owners %+v, want its Node", l.Name, h, l.OwnerReferences)
		}
		if l.Labels[apis.AddressBlockLabel] != apis.AddressBlockPool || l.Annotations[apis.AddressPoolAnnotation] != "10.0.61.128/25" ||
			*l.Spec.LeaseDurationSeconds != int32(reclaim/time.Second) || l.Name != podnetwork.BlockName(mustRange(t, l.Annotations[apis.AddressRangeAnnotation])) {
			t.Errorf("lease %+v", l)
		}
	}
}

// A restarted agent adopts the blocks its node holds, takes no new one
// while they have room, and hands out none of the addresses its pods hold.
func TestRestartAdoptsItsBlocks(t *testing.T) {
	c, clk := newCluster(t, "a"), newClock()
	opts := nodeOpts{pools: []string{"10.0.61.128/25"}}
	a := mustStart(t, c, clk, "a", eth1(5), opts)
	held := a.mustAllocate(3)
	before := a.blocks()

	clk.Step(10 * time.Minute)
	again := mustStart(t, c, clk, "a", eth1(5), opts)
	for _, addr := range held {
		again.inUse[addr] = true // the networker's restored records
	}
	if got := again.blocks(); !slices.Equal(got, before) {
		t.Fatalf("blocks after a restart %v, want %v adopted", got, before)
	}
	next := again.mustAllocate(1)[0]
	if slices.Contains(held, next) || !before[0].First.Less(next) && before[0].First != next {
		t.Errorf("after the restart: %s, want a new address of %s (held: %v)", next, before[0], held)
	}
	if n := len(c.leases()); n != 1 {
		t.Errorf("%d leases, want the one block", n)
	}
	if l := c.leases()[0]; !l.Spec.RenewTime.Time.Equal(clk.Now()) {
		t.Errorf("adopted lease renewed at %v, want at the restart (%v)", l.Spec.RenewTime, clk.Now())
	}
}

// The garbage collector deletes a deleted Node's Leases: its blocks go to
// the next node that needs one.
func TestDeletedNodeFreesItsBlocks(t *testing.T) {
	c, clk := newCluster(t, "a", "b"), newClock()
	opts := nodeOpts{pools: []string{"10.0.61.128/25"}}
	a := mustStart(t, c, clk, "a", eth1(5), opts)
	a.mustAllocate(1)
	first := a.blocks()[0]
	c.collectGarbage("a")
	b := mustStart(t, c, clk, "b", eth1(6), opts)
	b.mustAllocate(1)
	if got := b.blocks(); len(got) != 1 || got[0] != first {
		t.Errorf("b's blocks %v, want a's freed %s", got, first)
	}
}

// A block whose lease ran out (its node lost, not deleted) is taken over;
// a live one is not. The node that lost it stops handing it out.
func TestExpiredBlockIsTakenOver(t *testing.T) {
	c, clk := newCluster(t, "a", "b"), newClock()
	opts := nodeOpts{pools: []string{"10.0.61.128/27"}} // two blocks
	a := mustStart(t, c, clk, "a", eth1(5), opts)
	a.mustAllocate(1)
	aBlock := a.blocks()[0]
	b := mustStart(t, c, clk, "b", eth1(6), opts)
	clk.Step(reclaim - time.Minute)
	b.mustAllocate(16) // its block, whole
	if _, err := b.allocate(); err == nil || !strings.Contains(err.Error(), "pool 10.0.61.128/27 is used up") {
		t.Fatalf("a's block is live: %v", err)
	}
	clk.Step(2 * time.Minute) // a has not renewed for the reclaim time
	if got := a.blocks(); len(got) != 0 {
		t.Errorf("a still hands out %v past its lease", got)
	}
	addr := b.mustAllocate(1)[0]
	if !slices.Contains(b.blocks(), aBlock) || addr != aBlock.First {
		t.Fatalf("b's blocks %v, address %s: want a's expired %s taken over", b.blocks(), addr, aBlock)
	}
	for _, l := range c.leases() {
		if l.Name == podnetwork.BlockName(aBlock) && (*l.Spec.HolderIdentity != "b" || l.OwnerReferences[0].Name != "b") {
			t.Errorf("taken-over lease: holder %s, owner %s; want b's", *l.Spec.HolderIdentity, l.OwnerReferences[0].Name)
		}
	}
	// a comes back: its renewal finds b holding the block, and a lets go.
	if err := a.holder.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := a.blocks(); len(got) != 0 {
		t.Errorf("a holds %v after b took it over", got)
	}
}

// A node that cannot renew stops handing out a block once its lease ran
// out (another node may have it by then), and starts again once renewed.
func TestRenewalFailureFailsClosed(t *testing.T) {
	c, clk := newCluster(t, "a"), newClock()
	a := mustStart(t, c, clk, "a", eth1(5), nodeOpts{pools: []string{"10.0.61.128/25"}})
	a.mustAllocate(1)
	c.setDown(errors.New("the API server is away"))
	clk.Step(reclaim / 3)
	if err := a.holder.Renew(context.Background()); err == nil {
		t.Fatal("Renew with the API server away: no error")
	}
	a.mustAllocate(1) // within the lease
	clk.Step(reclaim)
	if err := a.holder.Renew(context.Background()); err == nil || !strings.Contains(err.Error(), "away") {
		t.Fatalf("Renew: %v", err)
	}
	if _, err := a.allocate(); err == nil || !strings.Contains(err.Error(), "away") {
		t.Fatalf("allocation past the lease: %v, want none (the block may be another node's)", err)
	}
	c.setDown(nil)
	if err := a.holder.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := a.mustAllocate(1)[0]; !a.blocks()[0].First.Less(got) || len(a.blocks()) != 1 {
		t.Errorf("after renewing: %s from %v, want the same block again", got, a.blocks())
	}
}

// Exhaustion is an error that names the pool and its holders.
func TestExhaustionNamesThePool(t *testing.T) {
	c, clk := newCluster(t, "a", "b"), newClock()
	opts := nodeOpts{pools: []string{"10.0.61.128/28"}, size: 16}
	a, b := mustStart(t, c, clk, "a", eth1(5), opts), mustStart(t, c, clk, "b", eth1(6), opts)
	a.mustAllocate(1)
	_, err := b.allocate()
	if err == nil || !strings.Contains(err.Error(), "eth1: pool 10.0.61.128/28 is used up") || !strings.Contains(err.Error(), "held by a") {
		t.Fatalf("b's allocation: %v", err)
	}
	// A netdev in a subnet no pool serves keeps the allocator's own error.
	other := &node{t: t, name: "b", host: model.NetDev{Name: "eth2", Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.70.6/24")}}, holder: b.holder, inUse: map[netip.Addr]bool{}}
	if _, err := other.allocate(); err == nil || !strings.Contains(err.Error(), "no range for eth2") {
		t.Errorf("a netdev no pool serves: %v", err)
	}
}

// Static ranges are registered too: one that overlaps another node's (the
// chart gives every node the same) or a cluster block is refused at the
// start, naming both nodes and ranges; the node's own, after a restart, is
// not, and one no longer configured is given up.
func TestStaticRanges(t *testing.T) {
	c, clk := newCluster(t, "a", "b", "c"), newClock()
	static := func(r string) nodeOpts {
		return nodeOpts{static: map[string][]podnetwork.Range{"eth1": {mustRange(t, r)}}, pools: []string{"10.0.61.128/26"}}
	}
	a := mustStart(t, c, clk, "a", eth1(5), static("10.0.61.200-10.0.61.220"))
	if got := a.mustAllocate(1)[0]; got != netip.MustParseAddr("10.0.61.200") {
		t.Errorf("a's first address %s, want its static range's first", got)
	}
	for _, r := range []string{"10.0.61.200-10.0.61.220", "10.0.61.210-10.0.61.230"} {
		_, err := startNode(t, c, clk, "b", eth1(6), static(r))
		if err == nil || !strings.Contains(err.Error(), "node b's eth1 range "+mustRange(t, r).String()) ||
			!strings.Contains(err.Error(), "node a's 10.0.61.200-10.0.61.220") {
			t.Errorf("b's static range %s: %v", r, err)
		}
	}
	// A static range over a block another node took of a pool.
	c2 := mustStart(t, c, clk, "c", eth1(7), nodeOpts{pools: []string{"10.0.61.0/26"}})
	c2.mustAllocate(1)
	_, err := startNode(t, c, clk, "b", eth1(6), static("10.0.61.10-10.0.61.12"))
	if err == nil || !strings.Contains(err.Error(), "node c's 10.0.61.0-10.0.61.15") {
		t.Errorf("b's static range over c's block: %v", err)
	}
	// A static range outside the node's subnets is another node's: not
	// registered.
	if _, err := startNode(t, c, clk, "b", eth1(6), static("10.0.62.200-10.0.62.220")); err != nil {
		t.Errorf("a static range of another subnet: %v", err)
	}
	if _, err := startNode(t, c, clk, "a", eth1(5), static("10.0.61.200-10.0.61.220")); err != nil {
		t.Errorf("a's restart: %v", err)
	}
	mustStart(t, c, clk, "a", eth1(5), static("10.0.61.230-10.0.61.240"))
	for _, l := range c.leases() {
		if l.Name == podnetwork.StaticName(mustRange(t, "10.0.61.200-10.0.61.220")) {
			t.Errorf("a's former static range still registered: %s", l.Name)
		}
	}
}

// Two nodes that race for one block collide: the loser's create finds it
// exists, its takeover of an expired one finds it rewritten, and either
// moves to the next block.
func TestRacesMoveToTheNextBlock(t *testing.T) {
	c, clk := newCluster(t, "a", "b"), newClock()
	opts := nodeOpts{pools: []string{"10.0.61.128/26"}}
	a, b := mustStart(t, c, clk, "a", eth1(5), opts), mustStart(t, c, clk, "b", eth1(6), opts)
	c.beforeWrite = func(verb, name string) { b.mustAllocate(1) } // b creates the block a listed as free
	a.mustAllocate(1)
	if a.blocks()[0] == b.blocks()[0] || a.blocks()[0].First != netip.MustParseAddr("10.0.61.144") {
		t.Fatalf("a %v, b %v: want b the first block, a the next", a.blocks(), b.blocks())
	}

	// Both blocks expire; a, restarted, renews its own and needs one
	// more: it races b, restarted too, for b's expired one.
	clk.Step(reclaim + time.Minute)
	a = mustStart(t, c, clk, "a", eth1(5), opts)
	c.beforeWrite = func(verb, name string) {
		if verb != "update" || name != podnetwork.BlockName(mustRange(t, "10.0.61.128-10.0.61.143")) {
			t.Errorf("a's %s of %s: want the takeover of b's expired block", verb, name)
		}
		b = mustStart(t, c, clk, "b", eth1(6), opts) // renews it first
	}
	got, err := a.holder.Claim(context.Background(), a.host)
	if err != nil {
		t.Fatal(err)
	}
	if got.First != netip.MustParseAddr("10.0.61.160") {
		t.Errorf("a claimed %s, want the next free block 10.0.61.160 after losing the takeover", got)
	}
	holders := map[string]string{}
	for _, l := range c.leases() {
		holders[l.Annotations[apis.AddressRangeAnnotation]] = *l.Spec.HolderIdentity
	}
	if holders["10.0.61.128-10.0.61.143"] != "b" || holders["10.0.61.144-10.0.61.159"] != "a" || holders["10.0.61.160-10.0.61.175"] != "a" {
		t.Errorf("holders %v", holders)
	}
}

// Run renews the Leases every third of ReclaimAfter, and sooner again
// after a failure.
func TestRunRenews(t *testing.T) {
	c, clk := newCluster(t, "a"), newClock()
	a := mustStart(t, c, clk, "a", eth1(5), nodeOpts{pools: []string{"10.0.61.128/25"}})
	a.mustAllocate(1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.holder.Run(ctx) }()
	renewedAt := func() time.Time { return c.leases()[0].Spec.RenewTime.Time }
	step := func(d time.Duration) {
		for !clk.HasWaiters() {
			runtime.Gosched()
		}
		clk.Step(d)
	}
	step(reclaim / 3)
	for !renewedAt().Equal(clk.Now()) {
		runtime.Gosched()
	}
	c.setDown(errors.New("the API server is away"))
	step(reclaim / 3)
	step(0) // Run waits again once the renewal failed
	c.setDown(nil)
	step(retryAfterFailure)
	for !renewedAt().Equal(clk.Now()) {
		runtime.Gosched()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
