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

// maxHookHolders bounds the containers remembered; more are refused (and
// counted), so a flood of reports cannot grow the agent without bound.
const maxHookHolders = 4096

// Holders is who holds which HCA right now: the containers hooks reported,
// each forgotten once its init is gone, and the DRA driver's prepared
// claims, by claim.
type Holders struct {
	// alive reports whether a container's init still runs.
	alive func(hookevents.Init) bool

	mu            sync.Mutex
	hooked        map[string]hookedContainer // by container id
	claims        map[string][]Holder        // by claim UID
	lastFullPrune time.Time
}

type hookedContainer struct {
	init    hookevents.Init
	holders []Holder
}

func newHolders(alive func(hookevents.Init) bool) *Holders {
	return &Holders{alive: alive, hooked: map[string]hookedContainer{}, claims: map[string][]Holder{}}
}

// fromHook remembers the devices of a container whose hook succeeded; false
// when the table is full even after forgetting the containers gone (looked
// for at most once a second, so a flood of reports costs no walk of every
// container's liveness each).
func (h *Holders) fromHook(o hookevents.Outcome) bool {
	if o.FailedStep != "" || len(o.Devices) == 0 || (o.Pid <= 0 && o.Cgroup == "") {
		return true
	}
	hs := make([]Holder, 0, len(o.Devices))
	for _, d := range o.Devices {
		hs = append(hs, Holder{Device: d, Namespace: o.Namespace, Pod: o.Pod, Container: o.Container, ContainerID: o.ContainerID, Source: SourceHook})
	}
	entry := hookedContainer{init: o.Init(), holders: hs}
	if h.add(o.ContainerID, entry) {
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
	return h.add(o.ContainerID, entry)
}

// add records a container unless the table is full.
func (h *Holders) add(id string, c hookedContainer) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, known := h.hooked[id]; !known && len(h.hooked) >= maxHookHolders {
		return false
	}
	h.hooked[id] = c
	return true
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
			delete(h.hooked, id)
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
