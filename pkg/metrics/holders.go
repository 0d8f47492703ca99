package metrics

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdma-cdi/rdma-cdi/pkg/hookevents"
)

// Sources of a holder.
const (
	// SourceHook: a container started with our CDI devices (any engine,
	// and pods of either Kubernetes path), as its hook reported.
	SourceHook = "hook"
	// SourceDRA: a pod a prepared ResourceClaim is reserved for.
	SourceDRA = "dra"
)

// Holder is one HCA held by one container or pod.
type Holder struct {
	Device      string
	Namespace   string
	Pod         string
	Container   string
	ContainerID string
	Source      string
}

var holderInfoDesc = prometheus.NewDesc("rdma_cdi_hca_holder_info",
	"A container or pod that holds the HCA now (1). Join on device for traffic per pod.",
	[]string{"device", "namespace", "pod", "container", "container_id", "source"}, nil)

// The hooked containers remembered are bounded twice, so that a flood of
// reports (each may name 256 devices) cannot grow the agent without bound:
// by containers, and by the (container, HCA) pairs they hold, which is what
// each scrape turns into series. More are refused, and counted.
//
// maxHeldDevices is 250 pods (more than the 110 a kubelet admits by
// default) holding 32 HCAs each. Measured at this cap with every name at
// its longest, as a flood can send them: the table keeps under 10 MiB of
// heap (TestHolderFloodIsBounded); a scrape allocates 47 MB and takes the
// heap to 95-115 MiB, three at once (the most the server runs) to 140-195
// MiB (BenchmarkScrapeHolders), within the chart's 256 Mi. Twice this cap
// took three scrapes to 300 MiB; the 4,096 × 256 pairs allowed before held
// 108 MiB, and one scrape peaked near 566 MiB.
const (
	maxHookHolders = 4096
	maxHeldDevices = 8192
)

// Holders is who holds which HCA right now: the containers hooks reported,
// each forgotten once its init is gone, and the DRA driver's prepared
// claims, by claim.
type Holders struct {
	// alive reports whether a container's init still runs.
	alive func(hookevents.Init) bool

	mu     sync.Mutex
	hooked map[string]hookedContainer // by container id
	// heldDevices is the number of (container, HCA) pairs in hooked.
	heldDevices int
	// hcas are the node's HCAs by name, from the latest good generation;
	// nil before the first.
	hcas          map[string]bool
	claims        map[string][]Holder // by claim UID
	lastFullPrune time.Time
}

type hookedContainer struct {
	init    hookevents.Init
	holders []Holder
}

func newHolders(alive func(hookevents.Init) bool) *Holders {
	return &Holders{alive: alive, hooked: map[string]hookedContainer{}, claims: map[string][]Holder{}}
}

// setNodeHCAs records the node's HCAs, which later reports are checked
// against. The first call also drops what the reports before it named and
// the node lacks: until the node was discovered their devices could not be
// checked, and they were held all the same (within the caps), since a
// container started while the agent starts would otherwise never count as
// a holder. Later calls leave held containers be: an HCA missing from one
// generation (a reset in progress) does not end its holders.
func (h *Holders) setNodeHCAs(names []string) {
	hcas := make(map[string]bool, len(names))
	for _, n := range names {
		hcas[n] = true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	first := h.hcas == nil
	h.hcas = hcas
	if !first {
		return
	}
	for id, c := range h.hooked {
		kept := slices.DeleteFunc(slices.Clone(c.holders), func(x Holder) bool { return !hcas[x.Device] })
		if len(kept) < len(c.holders) {
			c.holders = kept
			h.setLocked(id, c)
		}
	}
}

// fromHook remembers the node's HCAs of a container whose hook succeeded;
// false when the table is full even after forgetting the containers gone
// (looked for at most once a second, so a flood of reports costs no walk
// of every container's liveness each).
func (h *Holders) fromHook(o hookevents.Outcome) bool {
	if o.FailedStep != "" || len(o.Devices) == 0 || (o.Pid <= 0 && o.Cgroup == "") {
		return true
	}
	if h.add(o) {
		return true
	}
	h.mu.Lock()
	due := time.Since(h.lastFullPrune) > time.Second
	if due {
		h.lastFullPrune = time.Now()
	}
	h.mu.Unlock()
	if !due {
		return false
	}
	h.prune()
	return h.add(o)
}

// add records the container's devices that are the node's HCAs (each once)
// unless a cap would be passed. A report with none left holds nothing, and
// replaces what its container held before.
func (h *Holders) add(o hookevents.Outcome) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	devices := h.onNode(o.Devices)
	old, known := h.hooked[o.ContainerID]
	containersFull := !known && len(h.hooked) >= maxHookHolders
	pairsFull := h.heldDevices-len(old.holders)+len(devices) > maxHeldDevices
	if len(devices) > 0 && (containersFull || pairsFull) {
		return false
	}
	hs := make([]Holder, 0, len(devices))
	for _, d := range devices {
		hs = append(hs, Holder{Device: d, Namespace: o.Namespace, Pod: o.Pod, Container: o.Container, ContainerID: o.ContainerID, Source: SourceHook})
	}
	h.setLocked(o.ContainerID, hookedContainer{init: o.Init(), holders: hs})
	return true
}

// onNode is devices without repeats and, once the node is known, without
// what is not among its HCAs. (Sorted: a report may name 256 devices, too
// many to look each up among the kept ones.)
func (h *Holders) onNode(devices []string) []string {
	kept := make([]string, 0, len(devices))
	for _, d := range devices {
		if h.hcas == nil || h.hcas[d] {
			kept = append(kept, d)
		}
	}
	slices.Sort(kept)
	return slices.Compact(kept)
}

// setLocked stores (or, holding nothing, forgets) a container and keeps
// heldDevices its pairs' count. h.mu is held.
func (h *Holders) setLocked(id string, c hookedContainer) {
	h.heldDevices -= len(h.hooked[id].holders)
	if len(c.holders) == 0 {
		delete(h.hooked, id)
		return
	}
	h.hooked[id] = c
	h.heldDevices += len(c.holders)
}

// SetClaim records the holders of a prepared claim (none: forget it).
func (h *Holders) SetClaim(uid string, holders []Holder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(holders) == 0 {
		delete(h.claims, uid)
		return
	}
	h.claims[uid] = slices.Clone(holders)
}

// prune forgets containers whose init is gone. The cgroup and /proc reads
// happen without the lock, so reports keep arriving meanwhile.
func (h *Holders) prune() {
	h.mu.Lock()
	seen := maps.Clone(h.hooked)
	h.mu.Unlock()
	var gone []string
	for id, c := range seen {
		if !h.alive(c.init) {
			gone = append(gone, id)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range gone {
		// Unless the id was reported again meanwhile (a restarted container).
		if cur, ok := h.hooked[id]; ok && cur.init == seen[id].init {
			h.setLocked(id, hookedContainer{})
		}
	}
}

// List is every holder now, sorted.
func (h *Holders) List() []Holder {
	h.prune()
	h.mu.Lock()
	var out []Holder
	for _, c := range h.hooked {
		out = append(out, c.holders...)
	}
	for _, hs := range h.claims {
		out = append(out, hs...)
	}
	h.mu.Unlock()
	slices.SortFunc(out, func(a, b Holder) int {
		return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod),
			cmp.Compare(a.Container, b.Container), cmp.Compare(a.ContainerID, b.ContainerID), cmp.Compare(a.Source, b.Source))
	})
	return slices.Compact(out)
}

func (h *Holders) Describe(ch chan<- *prometheus.Desc) { ch <- holderInfoDesc }

func (h *Holders) Collect(ch chan<- prometheus.Metric) {
	for _, x := range h.List() {
		ch <- prometheus.MustNewConstMetric(holderInfoDesc, prometheus.GaugeValue, 1,
			x.Device, x.Namespace, x.Pod, x.Container, x.ContainerID, x.Source)
	}
}
