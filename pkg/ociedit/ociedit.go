// Package ociedit edits an OCI runtime config (config.json) for a container
// that asked for RDMA. It serves the precreate hook (podman) and the runtime
// wrapper (Docker, containerd, CRI-O); both call it the same way:
//
//	req, err := editor.Request(spec)        // what the container asked for, under editor.Policy
//	log(req.IgnoredMessage())               // what was not accepted from whoever asked, if anything
//	if req.Empty() { /* write back the ORIGINAL bytes */ }
//	vars := nccl.Compute(node, cfg, nccl.Scope{Devices: req.Devices}).Vars
//	changed, err := editor.Edit(spec, req, vars)
//
// # How a container asks
//
// Three sources, unioned; names are this node's RDMA device names (the CDI
// device names of the configured vendor/class, e.g. mlx5_1):
//
//   - process.env RDMA_VISIBLE_DEVICES=all | NAME[,NAME...]
//     ("", "none" and "void" mean no request). A name may also be written
//     qualified, rdma.example.com/hca=mlx5_1.
//   - annotation "<vendor>/devices" (rdma.example.com/devices by default),
//     same syntax as the env var. Engines can match annotations (podman's
//     hooks.d "when"), not env.
//   - annotations "cdi.k8s.io/<anything>" holding comma-separated qualified
//     CDI names (the Kubernetes CDI annotation convention). Only names of
//     this editor's vendor/class are taken; other vendors' devices are left
//     to the engine.
//
// In addition, a device whose CDI device nodes are all already in
// linux.devices counts as requested (source "injected"): the engine applied
// the CDI spec itself (podman --device rdma.example.com/hca=mlx5_1, CDI in
// containerd or CRI-O from a device plugin or a DRA claim, or the device
// nodes of the device plugin's annotations fallback) and the container
// still needs what CDI cannot express. Such a device is not injected again.
//
// # Who asks (Decide)
//
// Which sources count depends on who creates the container. On a plain
// engine (podman, Docker, ctr) that is the engine's user, root-equivalent
// on the node: all three sources count. A Kubernetes container is one whose
// config.json carries a CRI runtime's own annotations (containerd's
// io.kubernetes.cri.*, CRI-O's io.kubernetes.cri-o.Metadata and the like;
// not CRI-O's ContainerType or SandboxID, which podman writes too) or the
// kubelet's mounts (cri-dockerd): DetectAsker. Its env is the pod's or its
// image's, and its annotations may be the pod's own (CRI-O copies them in),
// so by default neither counts there: only "injected" devices do, which
// the kubelet placed after the scheduler and the device plugin or DRA
// driver allocated them. Policy (config runtime.kubernetes_accept_env,
// runtime.kubernetes_accept_annotations) turns either source back on. An
// ignored source is neither a request nor an error; Request.Ignored and
// IgnoredMessage name it and its switch, unless it asked only for devices
// the kubelet placed anyway (the annotations fallback's own annotation).
//
// CAP_IPC_LOCK and RLIMIT_MEMLOCK still come with injected devices under
// Kubernetes: the device nodes are the kubelet's allocation, whose spec
// (the memlock hook) already raises the holder's memlock limit, and pinned
// memory stays charged to the pod's memory cgroup.
//
// The request env var is left in place: it documents the request inside
// the container (as NVIDIA_VISIBLE_DEVICES does) and makes Edit idempotent,
// so a second pass (precreate hook and wrapper both configured) changes
// nothing.
//
// # What Edit changes
//
//   - the CDI edits of the requested devices, applied by the CDI library's
//     cache (cdi.Cache.InjectDevices); devices already present are skipped,
//     and hooks the injection would duplicate are dropped;
//   - CAP_IPC_LOCK in the bounding, effective and permitted sets, and for a
//     non-root process user (uid != 0) in the ambient and inheritable sets
//     too, so it survives the switch to that user;
//   - RLIMIT_MEMLOCK soft = hard = Editor.Memlock, unless process.rlimits
//     already lists RLIMIT_MEMLOCK (the user's --ulimit wins);
//   - the NCCL variables given, each only when process.env does not already
//     set it (the user's value wins; a CDI env of the same name, with
//     nccl.delivery = cdi-env, has already replaced it, as in every engine).
//
// A config that asked for nothing is not touched at all.
package ociedit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
)

const (
	// CapIPCLock lets a process pin memory beyond RLIMIT_MEMLOCK.
	CapIPCLock = "CAP_IPC_LOCK"
	// RlimitMemlock is the OCI name of the locked-memory limit.
	RlimitMemlock = "RLIMIT_MEMLOCK"
	// SourceInjected marks devices the engine had already injected.
	SourceInjected = "injected"
)

// Request is what a container asked for.
type Request struct {
	// All is true when some source asked for "all".
	All bool
	// Devices are bare device names, sorted. After Editor.Request they are
	// resolved: "all" expanded, every name known to the cache.
	Devices []string
	// Sources name where the request came from, e.g.
	// "env RDMA_VISIBLE_DEVICES", "annotation cdi.k8s.io/x", "injected".
	Sources []string
	// Asker and Ignored are set by Editor.Request: who asked (Decide), and
	// the sources not accepted from it that asked for more than the
	// kubelet placed (IgnoredMessage logs them).
	Asker   Asker
	Ignored []Ignored
}

// Empty reports whether nothing was asked for.
func (r Request) Empty() bool { return !r.All && len(r.Devices) == 0 }

// Editor applies requests against a CDI cache.
type Editor struct {
	// Cache resolves and injects devices (cdi.NewCache over the spec dirs).
	Cache *cdi.Cache
	// Vendor and Class are the CDI kind served, e.g. rdma.example.com, hca.
	Vendor, Class string
	// Memlock is RLIMIT_MEMLOCK to set (config.Unlimited for unlimited).
	Memlock uint64
	// Policy is what a Kubernetes container may ask with besides the
	// devices the kubelet placed; the zero value: nothing.
	Policy Policy
}

func (e Editor) qualified(name string) string { return parser.QualifiedName(e.Vendor, e.Class, name) }

// ParseRequest reads the env var and annotations of spec, every source
// whoever asks (a plain engine's rules; Decide applies the asker's). It
// does not consult the cache: names are as written, not yet checked.
func ParseRequest(spec *specs.Spec, vendor, class string) (Request, error) {
	p := newRequestParser(vendor, class)
	p.parseEnv(spec.Process)
	p.parseAnnotations(spec.Annotations)
	return p.result()
}

// requestParser collects one config's request and its errors, counted per
// source so that each source is named.
type requestParser struct {
	vendor, class string
	req           Request
	seen          map[string]bool
	errs          []error
	failures      map[string]int
	failedSources []string
	// order and bySource: each source that asked or failed, in the order
	// read, with what it alone asked for (for Decide's Ignored).
	order    []string
	bySource map[string]*sourceRequest
}

// sourceRequest is what one source asked for.
type sourceRequest struct {
	all   bool
	names map[string]bool
}

func newRequestParser(vendor, class string) *requestParser {
	return &requestParser{vendor: vendor, class: class, seen: map[string]bool{}, failures: map[string]int{}, bySource: map[string]*sourceRequest{}}
}

// source is what source alone asked for, recorded in order.
func (p *requestParser) source(source string) *sourceRequest {
	r := p.bySource[source]
	if r == nil {
		r = &sourceRequest{names: map[string]bool{}}
		p.bySource[source] = r
		p.order = append(p.order, source)
	}
	return r
}

// parseEnv reads RDMA_VISIBLE_DEVICES of the process env, every instance.
func (p *requestParser) parseEnv(process *specs.Process) {
	if process == nil {
		return
	}
	for _, kv := range process.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == apis.EnvDevices {
			p.parseList("env "+apis.EnvDevices, v)
		}
	}
}

// add records device name (or all) as asked for by source.
func (p *requestParser) add(source, name string) {
	own := p.source(source)
	if name == apis.AllDevices {
		p.req.All = true
		own.all = true
	} else {
		if !p.seen[name] {
			p.seen[name] = true
			p.req.Devices = append(p.req.Devices, name)
		}
		own.names[name] = true
	}
	if !slices.Contains(p.req.Sources, source) {
		p.req.Sources = append(p.req.Sources, source)
	}
}

// fail records err of source; past maxRequestErrors a source's errors are
// only counted.
func (p *requestParser) fail(source string, err error) {
	p.source(source)
	if p.failures[source] == 0 {
		p.failedSources = append(p.failedSources, source)
	}
	if p.failures[source]++; p.failures[source] <= maxRequestErrors {
		p.errs = append(p.errs, err)
	}
}

// parseList reads a list of our own syntax (env, <vendor>/devices): all,
// NAME or VENDOR/CLASS=NAME, comma-separated; "", none and void ask for
// nothing.
func (p *requestParser) parseList(source, value string) {
	switch strings.TrimSpace(value) {
	case "", "none", "void":
		return
	}
	for _, item := range strings.Split(value, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		if name, err := p.listItem(source, item); err != nil {
			p.fail(source, err)
		} else {
			p.add(source, name)
		}
	}
}

// listItem is the device name one item of a list asks for.
func (p *requestParser) listItem(source, item string) (string, error) {
	if len(item) > maxNameLen {
		return "", fmt.Errorf("%s: device name of %d bytes (%s): longer than %d", source, len(item), clip(item), maxNameLen)
	}
	if !strings.Contains(item, "=") {
		if item != apis.AllDevices {
			if err := parser.ValidateDeviceName(item); err != nil {
				return "", fmt.Errorf("%s: device %q: %w", source, item, err)
			}
		}
		return item, nil
	}
	v, c, n, err := parser.ParseQualifiedName(item)
	if err != nil {
		return "", fmt.Errorf("%s: %w", source, err)
	}
	if v != p.vendor || c != p.class {
		return "", fmt.Errorf("%s: device %q is not a %s/%s device", source, item, p.vendor, p.class)
	}
	return n, nil
}

// parseAnnotations reads <vendor>/devices and the cdi.k8s.io/ annotations,
// in key order.
func (p *requestParser) parseAnnotations(annotations map[string]string) {
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	own := apis.DevicesAnnotation(p.vendor)
	for _, k := range keys {
		switch {
		case k == own:
			p.parseList("annotation "+k, annotations[k])
		case strings.HasPrefix(k, cdi.AnnotationPrefix):
			p.parseCDIAnnotation(k, annotations[k])
		}
	}
}

// parseCDIAnnotation takes the devices of our kind from a cdi.k8s.io/
// annotation; other kinds' devices are not ours to judge.
func (p *requestParser) parseCDIAnnotation(k, value string) {
	source := "annotation " + k
	for _, item := range strings.Split(value, ",") {
		item = strings.TrimSpace(item)
		ours := strings.HasPrefix(item, p.vendor+"/"+p.class+"=")
		if len(item) > maxNameLen {
			if ours {
				p.fail(source, fmt.Errorf("annotation %s: device name of %d bytes (%s): longer than %d", shortKey(k), len(item), clip(item), maxNameLen))
			}
			continue
		}
		v, c, n, err := parser.ParseQualifiedName(item)
		if err != nil {
			// Not parseable: ours only if it claims our kind.
			if ours {
				p.fail(source, fmt.Errorf("annotation %s: %w", shortKey(k), err))
			}
			continue
		}
		if v == p.vendor && c == p.class {
			p.add(source, n)
		}
	}
}

// result is the request, its devices sorted, and the errors, with a count
// of those left out per source.
func (p *requestParser) result() (Request, error) {
	sort.Strings(p.req.Devices)
	for _, source := range p.failedSources {
		if n := p.failures[source] - maxRequestErrors; n > 0 {
			p.errs = append(p.errs, fmt.Errorf("%s: and %d more bad device names", shortKey(source), n))
		}
	}
	return p.req, errors.Join(p.errs...)
}

// A request comes from whoever creates the container, in values of any
// size: its errors are bounded, so a megabyte of bad names costs a few
// lines of log, not megabytes per start attempt.
const (
	maxRequestErrors = 4 // per source
	// maxNameLen bounds one (qualified) device name; CDI names are short.
	maxNameLen = 256
)

// shortKey is an annotation key for an error: as it is, or clipped when long.
func shortKey(k string) string {
	if len(k) <= 128 {
		return k
	}
	return clip(k)
}

// clip quotes s, cut to its first 64 bytes.
func clip(s string) string {
	if len(s) <= 64 {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q...", s[:64])
}

// Known returns the device names of the editor's kind in the cache, sorted,
// without "all".
func (e Editor) Known() []string {
	var names []string
	prefix := e.Vendor + "/" + e.Class + "="
	for _, q := range e.Cache.ListDevices() {
		if n, ok := strings.CutPrefix(q, prefix); ok && n != apis.AllDevices {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// Request decides spec's request under e.Policy (Decide) and resolves it
// against the cache: "all" becomes every known device, unknown names are
// an error that lists the known ones, and devices the engine already
// injected are added, whoever asks. req.Ignored keeps the ignored sources
// that asked for more than those injected devices.
func (e Editor) Request(spec *specs.Spec) (Request, error) {
	d, err := Decide(spec, e.Vendor, e.Class, e.Policy)
	req := d.Request
	req.Asker, req.Ignored = d.Asker, d.Ignored
	if err != nil {
		return req, err
	}
	known := e.Known()
	if !req.Empty() {
		if len(known) == 0 {
			return req, fmt.Errorf("%s asked for RDMA devices but the CDI spec dirs %v hold no %s/%s devices (has `rdma-cdi generate` run?)%s",
				strings.Join(req.Sources, " and "), e.Cache.GetSpecDirectories(), e.Vendor, e.Class, e.specErrors())
		}
		var unknown []string
		for _, n := range req.Devices {
			if !slices.Contains(known, n) {
				unknown = append(unknown, n)
			}
		}
		if len(unknown) > 0 {
			return req, fmt.Errorf("unknown RDMA device %s requested by %s (known: %s)%s",
				quoteAll(unknown), strings.Join(req.Sources, " and "), strings.Join(known, ", "), e.specErrors())
		}
		if req.All {
			req.Devices = slices.Clone(known)
		}
	}
	var placed []string
	for _, n := range known {
		if !e.present(spec, n) {
			continue
		}
		placed = append(placed, n)
		if !slices.Contains(req.Devices, n) {
			req.Devices = append(req.Devices, n)
			if !slices.Contains(req.Sources, SourceInjected) {
				req.Sources = append(req.Sources, SourceInjected)
			}
		}
	}
	sort.Strings(req.Devices)
	req.Ignored = slices.DeleteFunc(req.Ignored, func(ig Ignored) bool { return ig.covered(placed, known) })
	return req, nil
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

func (e Editor) specErrors() string {
	var msgs []string
	for path, errs := range e.Cache.GetErrors() {
		for _, err := range errs {
			msgs = append(msgs, fmt.Sprintf("%s: %v", path, err))
		}
	}
	if len(msgs) == 0 {
		return ""
	}
	sort.Strings(msgs)
	return "; CDI spec errors: " + strings.Join(msgs, "; ")
}

// present reports whether every device node of the named CDI device is in
// the config's linux.devices already (matched by container path).
func (e Editor) present(spec *specs.Spec, name string) bool {
	d := e.Cache.GetDevice(e.qualified(name))
	if d == nil || len(d.ContainerEdits.DeviceNodes) == 0 || spec.Linux == nil {
		return false
	}
	for _, dn := range d.ContainerEdits.DeviceNodes {
		if !slices.ContainsFunc(spec.Linux.Devices, func(ld specs.LinuxDevice) bool { return ld.Path == dn.Path }) {
			return false
		}
	}
	return true
}

// Edit applies req (as returned by Request) and the NCCL variables to spec
// in place. It reports whether spec changed. An empty request changes
// nothing. On error spec may be partly edited: callers must then discard it.
func (e Editor) Edit(spec *specs.Spec, req Request, ncclVars []nccl.Var) (bool, error) {
	if req.Empty() {
		return false, nil
	}
	if spec.Process == nil {
		return false, errors.New("config has no process: cannot give it RDMA")
	}
	before, err := json.Marshal(spec)
	if err != nil {
		return false, err
	}

	var inject []string
	for _, n := range req.Devices {
		if !e.present(spec, n) {
			inject = append(inject, e.qualified(n))
		}
	}
	if len(inject) > 0 {
		hooksBefore := copyHooks(spec.Hooks)
		var rulesBefore int
		if spec.Linux != nil && spec.Linux.Resources != nil {
			rulesBefore = len(spec.Linux.Resources.Devices)
		}
		if unresolved, err := e.Cache.InjectDevices(spec, inject...); err != nil {
			if len(unresolved) > 0 {
				return false, fmt.Errorf("unknown RDMA device %s (known: %s)%s", quoteAll(unresolved), strings.Join(e.Known(), ", "), e.specErrors())
			}
			return false, fmt.Errorf("CDI injection of %s: %w", strings.Join(inject, ", "), err)
		}
		dedupHooks(spec.Hooks, hooksBefore)
		dedupDeviceRules(spec.Linux.Resources, rulesBefore)
	}

	addCapability(spec.Process, CapIPCLock)
	setMemlock(spec.Process, e.Memlock)
	addEnvIfUnset(spec.Process, ncclVars)

	after, err := json.Marshal(spec)
	if err != nil {
		return false, err
	}
	return string(before) != string(after), nil
}

func addCapability(p *specs.Process, capName string) {
	if p.Capabilities == nil {
		p.Capabilities = &specs.LinuxCapabilities{}
	}
	c := p.Capabilities
	sets := []*[]string{&c.Bounding, &c.Effective, &c.Permitted}
	if p.User.UID != 0 {
		sets = append(sets, &c.Ambient, &c.Inheritable)
	}
	for _, set := range sets {
		if !slices.Contains(*set, capName) {
			*set = append(*set, capName)
		}
	}
}

func setMemlock(p *specs.Process, limit uint64) {
	for _, r := range p.Rlimits {
		if r.Type == RlimitMemlock {
			return
		}
	}
	p.Rlimits = append(p.Rlimits, specs.POSIXRlimit{Type: RlimitMemlock, Hard: limit, Soft: limit})
}

func addEnvIfUnset(p *specs.Process, vars []nccl.Var) {
	set := map[string]bool{}
	for _, kv := range p.Env {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	for _, v := range vars {
		if !set[v.Name] {
			p.Env = append(p.Env, v.Name+"="+v.Value)
			set[v.Name] = true
		}
	}
}

func copyHooks(h *specs.Hooks) specs.Hooks {
	if h == nil {
		return specs.Hooks{}
	}
	return *h // the slices are only read
}

// dedupHooks drops hooks the injection added that are equal to a hook the
// config had before (the spec-wide edits of a CDI spec re-applied).
func dedupHooks(h *specs.Hooks, before specs.Hooks) {
	if h == nil {
		return
	}
	pairs := []struct {
		now *[]specs.Hook
		old []specs.Hook
	}{
		{&h.Prestart, before.Prestart}, //nolint:staticcheck // engines still run prestart hooks: a config may carry them
		{&h.CreateRuntime, before.CreateRuntime},
		{&h.CreateContainer, before.CreateContainer},
		{&h.StartContainer, before.StartContainer},
		{&h.Poststart, before.Poststart},
		{&h.Poststop, before.Poststop},
	}
	for _, p := range pairs {
		if len(p.old) == 0 || len(*p.now) <= len(p.old) {
			continue
		}
		kept := slices.Clone((*p.now)[:len(p.old)])
		for _, added := range (*p.now)[len(p.old):] {
			if !slices.ContainsFunc(kept, func(k specs.Hook) bool { return reflect.DeepEqual(k, added) }) {
				kept = append(kept, added)
			}
		}
		*p.now = kept
	}
}

// Encode returns the config to write for spec, edited from orig (the bytes
// it was decoded from): top-level keys whose value did not change keep
// their original bytes, and keys that specs-go does not know survive.
func Encode(orig []byte, spec *specs.Spec) ([]byte, error) {
	var old specs.Spec
	if err := json.Unmarshal(orig, &old); err != nil {
		return nil, err
	}
	top := map[string]json.RawMessage{}
	if err := json.Unmarshal(orig, &top); err != nil {
		return nil, err
	}
	oldKeys, err := topLevel(&old)
	if err != nil {
		return nil, err
	}
	newKeys, err := topLevel(spec)
	if err != nil {
		return nil, err
	}
	for k, v := range newKeys {
		if string(oldKeys[k]) != string(v) {
			top[k] = v
		}
	}
	for k := range oldKeys {
		if _, ok := newKeys[k]; !ok {
			delete(top, k)
		}
	}
	// json.Marshal would compact the raw values; write them as they are.
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(k)
		b.Write(name)
		b.WriteByte(':')
		b.Write(top[k])
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

func topLevel(spec *specs.Spec) (map[string]json.RawMessage, error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	m := map[string]json.RawMessage{}
	return m, json.Unmarshal(data, &m)
}

// dedupDeviceRules drops cgroup device rules the injection added that are
// equal to a rule already present (CDI appends a rule per node even when
// it replaced an existing node of the same path).
func dedupDeviceRules(r *specs.LinuxResources, before int) {
	if r == nil || len(r.Devices) <= before {
		return
	}
	kept := slices.Clone(r.Devices[:before])
	for _, added := range r.Devices[before:] {
		if !slices.ContainsFunc(kept, func(k specs.LinuxDeviceCgroup) bool { return reflect.DeepEqual(k, added) }) {
			kept = append(kept, added)
		}
	}
	r.Devices = kept
}
