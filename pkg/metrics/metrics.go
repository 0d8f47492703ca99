// Package metrics is the node agents' Prometheus endpoint (/metrics) and
// probes (/healthz, /readyz): each RDMA port's state and counters read at
// scrape time, who holds each HCA, and what the agent and the container
// hooks did.
package metrics

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/hookevents"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// snapshot is the latest good generation's node and NCCL settings.
type snapshot struct {
	Node model.Node
	NCCL config.NCCL
}

// Exporter holds an agent's metrics. Its methods are safe for concurrent
// use, and those that record are no-ops on a nil Exporter (metrics off).
type Exporter struct {
	// Holders is who holds each HCA; the DRA driver sets its claims here.
	Holders *Holders

	reg *prometheus.Registry

	mu          sync.Mutex
	snap        snapshot
	haveSnap    bool
	lastAttempt time.Time
	stale       time.Duration // healthz fails after this long without a generation

	specWrites      prometheus.Counter
	generations     *prometheus.CounterVec
	lastSuccess     prometheus.Gauge
	discoveryErrors *prometheus.CounterVec
	writeErrors     *prometheus.CounterVec
	slicePublishes  *prometheus.CounterVec
	claimStatuses   *prometheus.CounterVec
	listAndWatch    *prometheus.CounterVec
	hookContainers  *prometheus.CounterVec
	hookFailures    *prometheus.CounterVec
	hookRejected    prometheus.Counter
	holdersRefused  prometheus.Counter
	conditions      *prometheus.GaugeVec
	giveBacks       prometheus.Gauge
}

// Options configure New.
type Options struct {
	// Sysfs is the root the ports are read under, and the cgroup mounts
	// (fs/cgroup) where a container's liveness is looked for (default
	// /sys).
	Sysfs string
	// Mode names the agent (watch, device-plugin, dra-driver) in
	// rdma_cdi_agent_info.
	Mode, Version string
	// Rescan is the watch's rescan interval: /healthz fails when no
	// generation was attempted for three of them (0: never).
	Rescan time.Duration
	// Proc is the host's procfs, where the init of a container without a
	// usable cgroup (an older hook's report, a hierarchy the agent does not
	// see) is looked for by pid and start time; "" where the agent has none
	// (a DaemonSet mounts neither the host's / nor its /proc, and has no
	// hostPID).
	Proc string
	// Alive reports whether a container's init still runs (default
	// hookevents.Liveness of Sysfs and Proc); tests replace it.
	Alive func(hookevents.Init) bool
}

// New registers every metric of an agent.
func New(opts Options) *Exporter {
	if opts.Sysfs == "" {
		opts.Sysfs = model.DefaultSysfsRoot
	}
	if opts.Alive == nil {
		opts.Alive = hookevents.Liveness{Sysfs: opts.Sysfs, Proc: opts.Proc}.Alive
	}
	e := &Exporter{reg: prometheus.NewRegistry(), Holders: newHolders(opts.Alive), stale: 3 * opts.Rescan}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		e.reg.MustRegister(c)
		return c
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		e.reg.MustRegister(c)
		return c
	}
	e.specWrites = counter("rdma_cdi_spec_writes_total", "CDI spec files written because their content changed.")
	e.generations = counterVec("rdma_cdi_generations_total", "Discoveries with their spec generation, by result (ok, error).", "result")
	e.lastSuccess = prometheus.NewGauge(prometheus.GaugeOpts{Name: "rdma_cdi_last_discovery_success_timestamp_seconds", Help: "When the node was last discovered and its spec generated without error."})
	e.reg.MustRegister(e.lastSuccess)
	e.discoveryErrors = counterVec("rdma_cdi_discovery_errors_total", "Failed discoveries of the node or its user-space stack, by reason.", "reason")
	e.writeErrors = counterVec("rdma_cdi_spec_write_errors_total", "Failed CDI spec writes, by reason.", "reason")
	e.slicePublishes = counterVec("rdma_cdi_resourceslice_publishes_total", "ResourceSlice publications by the DRA driver, by result (ok, error).", "result")
	e.claimStatuses = counterVec("rdma_cdi_claim_status_writes_total", "Writes of the DRA driver's entries in a claim's status.devices, by result (ok, error); a failed one is tried again after a growing pause.", "result")
	e.listAndWatch = counterVec("rdma_cdi_listandwatch_updates_total", "Device lists sent to the kubelet by the device plugin, by resource.", "resource")
	e.hookContainers = counterVec("rdma_cdi_hook_containers_total", "Containers whose hook succeeded, by the RDMA user space they run (image, host, or none when not decided).", "user_space")
	e.hookFailures = counterVec("rdma_cdi_hook_failures_total", "Hook runs that failed, by step and reason.", "step", "reason")
	e.hookRejected = counter("rdma_cdi_hook_events_rejected_total", "Hook reports refused: not root's, too large or malformed.")
	e.conditions = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rdma_cdi_hca_condition",
		Help: "A grey health condition an HCA has now (1), by port (empty: the HCA's PCIe link), condition (Unhealthy, Degraded) and reason (LinkFlapping, LinkErrors, LinkDegraded, PCIeDegraded)."},
		[]string{"device", "port", "condition", "reason"})
	e.reg.MustRegister(e.conditions)
	e.holdersRefused = counter("rdma_cdi_hook_holders_refused_total", "Containers not tracked as holders because the table was full (of containers or of held HCAs).")
	e.giveBacks = prometheus.NewGauge(prometheus.GaugeOpts{Name: "rdma_cdi_pod_network_give_backs_pending",
		Help: "Ended pod sandboxes whose RoCE interfaces could not be given back to the node yet; retried every 30 s. Above 0 for long: a netdev is out of the node, and its HCA's next pod cannot start."})
	e.reg.MustRegister(e.giveBacks)

	// Every known label value starts at 0: a rate or an alert over them
	// then has a series before the first event.
	for _, r := range []string{"ok", "error"} {
		e.generations.WithLabelValues(r)
		e.slicePublishes.WithLabelValues(r)
		e.claimStatuses.WithLabelValues(r)
	}
	for _, us := range []string{hookevents.UserSpaceImage, hookevents.UserSpaceHost, "none"} {
		e.hookContainers.WithLabelValues(us)
	}
	for _, reason := range hookevents.Reasons() {
		e.discoveryErrors.WithLabelValues(reason)
		e.writeErrors.WithLabelValues(reason)
		for _, step := range hookevents.Steps() {
			e.hookFailures.WithLabelValues(step, reason)
		}
	}

	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rdma_cdi_agent_info", Help: "The agent: its mode and version (1).",
		ConstLabels: prometheus.Labels{"mode": opts.Mode, "version": opts.Version},
	})
	info.Set(1)
	e.reg.MustRegister(info,
		newPortCollector(sysfs.Root(opts.Sysfs), e.latest),
		e.Holders,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return e
}

func (e *Exporter) latest() (snapshot, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snap, e.haveSnap
}

// Generation records one generation of the watch loop.
func (e *Exporter) Generation(out specgen.Outcome, cfg config.Config, err error) {
	if e == nil {
		return
	}
	now := time.Now()
	e.mu.Lock()
	e.lastAttempt = now
	if err == nil {
		e.snap, e.haveSnap = snapshot{Node: out.Node, NCCL: cfg.NCCL}, true
	}
	e.mu.Unlock()
	if err == nil {
		// What hooks report is checked against the node's HCAs.
		names := make([]string, 0, len(out.Node.Devices))
		for _, d := range out.Node.Devices {
			names = append(names, d.Name)
		}
		e.Holders.setNodeHCAs(names)
	}
	if err != nil {
		e.generations.WithLabelValues("error").Inc()
		reason := hookevents.Reason(err)
		if errors.Is(err, specgen.ErrWrite) {
			e.writeErrors.WithLabelValues(reason).Inc()
		} else {
			e.discoveryErrors.WithLabelValues(reason).Inc()
		}
		return
	}
	e.generations.WithLabelValues("ok").Inc()
	e.lastSuccess.Set(float64(now.UnixNano()) / 1e9)
	if out.Changed {
		e.specWrites.Inc()
	}
}

// SetConditions replaces the grey health conditions exported.
func (e *Exporter) SetConditions(conds []health.Condition) {
	if e == nil {
		return
	}
	e.conditions.Reset()
	for _, c := range conds {
		port := ""
		if c.Port != 0 {
			port = strconv.Itoa(c.Port)
		}
		e.conditions.WithLabelValues(strings.ToValidUTF8(c.Device, "?"), port, string(c.Level), c.Code).Set(1)
	}
}

// SlicePublished records one ResourceSlice publication.
func (e *Exporter) SlicePublished(err error) {
	if e == nil {
		return
	}
	e.slicePublishes.WithLabelValues(result(err)).Inc()
}

// ClaimStatusWritten records one write of a claim's status entries.
func (e *Exporter) ClaimStatusWritten(err error) {
	if e == nil {
		return
	}
	e.claimStatuses.WithLabelValues(result(err)).Inc()
}

// ListAndWatchUpdate records one device list sent for resource.
func (e *Exporter) ListAndWatchUpdate(resource string) {
	if e == nil {
		return
	}
	e.listAndWatch.WithLabelValues(resource).Inc()
}

// HookOutcome counts one hook's report and tracks its container.
func (e *Exporter) HookOutcome(o hookevents.Outcome) {
	if e == nil {
		return
	}
	if o.FailedStep != "" {
		reason := o.Reason
		if reason == "" {
			reason = hookevents.ReasonOther
		}
		e.hookFailures.WithLabelValues(o.FailedStep, reason).Inc()
		return
	}
	if o.Hook != string(apis.HookCreateRuntime) && o.Hook != string(apis.HookCreateContainer) {
		return // a one-step hook of an older spec: not the container's only hook
	}
	us := o.UserSpace
	if us == "" {
		us = "none"
	}
	e.hookContainers.WithLabelValues(us).Inc()
	if !e.Holders.fromHook(o) {
		e.holdersRefused.Inc()
	}
}

// GiveBacksPending sets how many ended sandboxes still hold what the pod
// network gave them (networker.Service's retries).
func (e *Exporter) GiveBacksPending(n int) {
	if e == nil {
		return
	}
	e.giveBacks.Set(float64(n))
}

// HookRejected counts a report the listener refused.
func (e *Exporter) HookRejected(error) {
	if e == nil {
		return
	}
	e.hookRejected.Inc()
}

// SetClaimHolders records the holders of a prepared claim (none: it was
// unprepared).
func (e *Exporter) SetClaimHolders(uid string, holders []Holder) {
	if e == nil {
		return
	}
	e.Holders.SetClaim(uid, holders)
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}
