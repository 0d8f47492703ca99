package ociedit

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
)

// Who asks decides which requests count. On a plain engine (podman, Docker,
// containerd's ctr) whoever creates the container is the engine's user,
// root-equivalent on the node: everything they write is a request. Under
// Kubernetes the env and annotations are written by a pod's author or its
// image, not by the node's owner; the devices a pod may have are decided by
// the scheduler and the kubelet's allocation (device plugin, DRA), which
// place them in linux.devices. See Decide.

// Policy is what the editor accepts from a Kubernetes container beyond the
// devices the kubelet placed. The zero value accepts nothing more. The
// fields are config.Runtime's switches of the same names.
type Policy struct {
	// KubernetesAcceptEnv accepts RDMA_VISIBLE_DEVICES from a Kubernetes
	// container's env.
	KubernetesAcceptEnv bool
	// KubernetesAcceptAnnotations accepts <vendor>/devices and
	// cdi.k8s.io/* from a Kubernetes container's annotations.
	KubernetesAcceptAnnotations bool
}

// The config keys of Policy's fields, named in the log line of what was
// ignored.
const (
	SwitchEnv         = "runtime.kubernetes_accept_env"
	SwitchAnnotations = "runtime.kubernetes_accept_annotations"
)

// Asker is who creates a container, as its config.json shows it.
type Asker struct {
	// Kubernetes is true for a container a kubelet asked a CRI runtime
	// for (or anything else that spoke CRI to it).
	Kubernetes bool
	// Evidence is what showed it, e.g. "containerd's CRI annotation
	// io.kubernetes.cri.sandbox-id"; "" on a plain engine.
	Evidence string
}

// criMarkers are annotations a CRI runtime writes into every container's
// config.json, its pod sandbox's included, whatever the pod says. A pod
// cannot remove them: it may at most add its own annotations (CRI-O copies
// them in, containerd those its pod_annotations lets through), so only
// whether a key is there counts, never its value.
//
// CRI-O's ContainerType, SandboxID, Created and TTY are not among them:
// podman writes those too (the first two for a container of a pod, for
// Kata), and podman is a plain engine. podman has never written the CRI-O
// keys below (checked in its history, 1.9 to 5.x).
var criMarkers = []struct{ key, runtime string }{
	// containerd's CRI plugin (internal/cri/annotations,
	// DefaultCRIAnnotations); 1.4 wrote the first two only.
	{"io.kubernetes.cri.sandbox-id", "containerd's CRI"},
	{"io.kubernetes.cri.container-type", "containerd's CRI"},
	{"io.kubernetes.cri.sandbox-uid", "containerd's CRI"},
	{"io.kubernetes.cri.sandbox-name", "containerd's CRI"},
	{"io.kubernetes.cri.sandbox-namespace", "containerd's CRI"},
	{"io.kubernetes.cri.container-name", "containerd's CRI"},
	// CRI-O (internal/factory/container SpecAddAnnotations, and its
	// sandboxes' specs).
	{"io.kubernetes.cri-o.Metadata", "CRI-O"},
	{"io.kubernetes.cri-o.Labels", "CRI-O"},
	{"io.kubernetes.cri-o.Annotations", "CRI-O"},
	{"io.kubernetes.cri-o.ContainerID", "CRI-O"},
	{"io.kubernetes.cri-o.SandboxName", "CRI-O"},
	{"io.kubernetes.cri-o.LogPath", "CRI-O"},
}

// kubeletMount is the source of a mount the kubelet gives every container
// of a pod: its /etc/hosts (<root-dir>/pods/<uid>/etc-hosts) and its
// termination log (<root-dir>/pods/<uid>/containers/<name>/<id>). It shows
// a Kubernetes container where the runtime writes no CRI annotation of its
// own (cri-dockerd: Docker under the kubelet). A pod's uid is a UUID, a
// static pod's a 32-digit hash.
var kubeletMount = regexp.MustCompile(`/pods/[0-9a-f][0-9a-f-]{31,35}/(etc-hosts|containers/[^/]+/[^/]+)$`)

// DetectAsker reads who creates the container from its config.json: a
// CRI runtime's own annotations, or the kubelet's mounts, make it a
// Kubernetes container.
func DetectAsker(spec *specs.Spec) Asker {
	for _, m := range criMarkers {
		if _, ok := spec.Annotations[m.key]; ok {
			return Asker{Kubernetes: true, Evidence: fmt.Sprintf("%s annotation %s", m.runtime, m.key)}
		}
	}
	for _, m := range spec.Mounts {
		if kubeletMount.MatchString(m.Source) {
			return Asker{Kubernetes: true, Evidence: fmt.Sprintf("mount of the kubelet's %s", clip(m.Source))}
		}
	}
	return Asker{}
}

// Ignored is one source of a request that was not accepted from its
// asker.
type Ignored struct {
	// Source is as in Request.Sources, e.g. "env RDMA_VISIBLE_DEVICES".
	Source string
	// Switch is the config key that would accept it (SwitchEnv,
	// SwitchAnnotations).
	Switch string
	// All, Devices: what it asked for (names as written, sorted).
	All     bool
	Devices []string
	// Unreadable: some of its names did not parse.
	Unreadable bool
}

// Decision is a container's request under Policy: what counts, who asked,
// and what did not count.
type Decision struct {
	// Request is the accepted sources' request, names as written (not
	// resolved against a cache: Editor.Request does that, and adds the
	// injected devices).
	Request Request
	Asker   Asker
	// Ignored are the sources not accepted, in the order read (env, then
	// annotations by key).
	Ignored []Ignored
}

// Decide reads spec's request under p. On a plain engine every source
// counts, as ParseRequest reads them. Under Kubernetes (DetectAsker) the
// env request counts only with p.KubernetesAcceptEnv and the annotation
// requests only with p.KubernetesAcceptAnnotations; the rest is returned
// as Ignored, and its bad names are no error (an ignored request can no
// more fail a start than it can give a device). Devices the kubelet placed
// are not read here: Editor.Request adds them (SourceInjected) whoever
// asks. Decide does no I/O.
func Decide(spec *specs.Spec, vendor, class string, p Policy) (Decision, error) {
	d := Decision{Asker: DetectAsker(spec)}
	accepted := newRequestParser(vendor, class)
	env, annotations := accepted, accepted
	var ignoredEnv, ignoredAnnotations *requestParser
	if d.Asker.Kubernetes && !p.KubernetesAcceptEnv {
		ignoredEnv = newRequestParser(vendor, class)
		env = ignoredEnv
	}
	if d.Asker.Kubernetes && !p.KubernetesAcceptAnnotations {
		ignoredAnnotations = newRequestParser(vendor, class)
		annotations = ignoredAnnotations
	}
	env.parseEnv(spec.Process)
	annotations.parseAnnotations(spec.Annotations)
	d.Ignored = append(ignoredEnv.ignored(SwitchEnv), ignoredAnnotations.ignored(SwitchAnnotations)...)
	var err error
	d.Request, err = accepted.result()
	return d, err
}

// ignored is what p read, one Ignored per source, for switch; nil for a
// nil p.
func (p *requestParser) ignored(switchKey string) []Ignored {
	if p == nil {
		return nil
	}
	var out []Ignored
	for _, source := range p.order {
		r := p.bySource[source]
		devices := make([]string, 0, len(r.names))
		for n := range r.names {
			devices = append(devices, n)
		}
		sort.Strings(devices)
		out = append(out, Ignored{Source: source, Switch: switchKey, All: r.all, Devices: devices, Unreadable: p.failures[source] > 0})
	}
	return out
}

// covered reports whether ig asked for nothing beyond placed (the devices
// already in linux.devices) out of known: the annotations fallback of the
// device plugin names in a cdi.k8s.io annotation the very devices whose
// nodes it placed, which is no attempt worth a warning.
func (ig Ignored) covered(placed, known []string) bool {
	if ig.Unreadable {
		return false
	}
	if ig.All {
		return len(known) > 0 && len(placed) == len(known)
	}
	for _, n := range ig.Devices {
		if !slices.Contains(placed, n) {
			return false
		}
	}
	return true
}

// Bounds of the ignored-request log line: the sources and names come from
// whoever creates the container.
const (
	maxIgnoredSources = 4
	maxIgnoredNames   = 8
)

// IgnoredMessage is the log line for r.Ignored, "" when nothing was: who
// asked, what was ignored, and the switch that would accept each.
func (r Request) IgnoredMessage() string {
	if len(r.Ignored) == 0 {
		return ""
	}
	var parts []string
	for i, ig := range r.Ignored {
		if i == maxIgnoredSources {
			parts = append(parts, fmt.Sprintf("and %d more sources", len(r.Ignored)-i))
			break
		}
		var what []string
		if ig.All {
			what = append(what, apis.AllDevices)
		}
		for j, n := range ig.Devices {
			if j == maxIgnoredNames {
				what = append(what, fmt.Sprintf("and %d more", len(ig.Devices)-j))
				break
			}
			what = append(what, n)
		}
		if ig.Unreadable {
			what = append(what, "unreadable names")
		}
		parts = append(parts, fmt.Sprintf("%s (%s; accepted with %s = true)", shortSource(ig.Source), strings.Join(what, ", "), ig.Switch))
	}
	asker := "Kubernetes container"
	if r.Asker.Evidence != "" {
		asker += " (" + r.Asker.Evidence + ")"
	}
	return fmt.Sprintf("%s: ignored its own RDMA request from %s; under Kubernetes a container gets HCAs that the kubelet placed (device plugin, DRA claim), and only those",
		asker, strings.Join(parts, ", "))
}

// shortSource is a source for a log line, its annotation key clipped.
func shortSource(source string) string {
	if kind, key, ok := strings.Cut(source, " "); ok {
		return kind + " " + shortKey(key)
	}
	return shortKey(source)
}
