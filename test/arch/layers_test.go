package arch

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// A layer is a set of the module's packages. A package may import the
// packages of lower layers and, of its own layer, only the layer's base;
// anything else is an exception below, or a mistake. The order is the
// rule; docs/ARCHITECTURE.md's Layers section is this list, rendered.
type layer struct {
	name string
	what string
	pkgs []string
	// base is the one package of the layer that the layer's others may
	// import, or "".
	base string
}

var layers = []layer{
	{
		name: "apis",
		what: "The public names (group, hook names, env vars, annotations, taint keys, slice attributes) and the claim parameters; `pkg/apis/...` imports `pkg/apis` and nothing else of the module.",
		pkgs: []string{"pkg/apis", "pkg/apis/rdma/v1alpha1"},
		base: "pkg/apis",
	},
	{
		name: "model",
		what: "Pure data: the node, its devices and ports, a user-space stack, the roots.",
		pkgs: []string{"pkg/model"},
	},
	{
		name: "leaves",
		what: "One job each, knowing only apis and model: sysfs and netlink reads, atomic writes, rlimits, the CDI dirs, `ld.so.cache`, the ldconfig sandbox, the hooks' reports, the metrics' auth, stale mounts, the kubelet's PodResources.",
		pkgs: []string{
			"pkg/sysfs", "pkg/netinfo", "pkg/specio", "pkg/rlimit", "pkg/cdilist", "pkg/hostlibs/ldcache",
			"pkg/ldsandbox", "pkg/hookevents", "pkg/metricsauth", "pkg/stalemount", "pkg/deviceplugin/podresources",
		},
	},
	{
		name: "state",
		what: "The node's state files, one primitive for all: bounded non-blocking reads of regular files, versioned schemas, a corrupt file set aside, atomic saves, fault points.",
		pkgs: []string{"pkg/statefile"},
	},
	{
		name: "discovery",
		what: "What the node has: its HCAs, its RDMA user space, its ports' counters, the pod sandboxes the pod-network agent has handled.",
		pkgs: []string{"pkg/discover", "pkg/hostlibs", "pkg/portstats", "pkg/podnetwork/sandboxlist"},
	},
	{
		name: "config",
		what: "The config file: plain settings structs, which policy takes as values (`config.NCCL`), and `Load`.",
		pkgs: []string{"pkg/config"},
	},
	{
		name: "policy",
		what: "Pure decisions: NCCL's variables, health, GPUDirect paths, whose user space a container runs, what a pod's network gets, each HCA's rail.",
		pkgs: []string{"pkg/nccl", "pkg/health", "pkg/gpudirect", "pkg/userspace", "pkg/podnetwork", "pkg/topology"},
	},
	{
		name: "renderers",
		what: "Pure output: the CDI spec, a container's OCI config edits, the node's NFD feature file.",
		pkgs: []string{"pkg/cdispec", "pkg/ociedit", "pkg/nodefeatures"},
	},
	{
		name: "io",
		what: "Work with effects, one kind each: a spec generated, a hook's steps, doctor's checks, grey health sampled, a netdev moved into a pod, a node's pod addresses held as Leases, a subnet's from a CNI IPAM plugin.",
		pkgs: []string{"pkg/specgen", "pkg/hooks", "pkg/doctor", "pkg/greyhealth", "pkg/podnetwork/attach", "pkg/podnetwork/blocklease", "pkg/podnetwork/cniipam"},
	},
	{
		name: "services",
		what: "What runs on that work: the metrics endpoint, the watch loop, the device plugin, the sandbox networker, the OCI config applier.",
		pkgs: []string{"pkg/metrics", "pkg/watch", "pkg/deviceplugin", "pkg/podnetwork/networker", "pkg/ociapply"},
	},
	{
		name: "programs",
		what: "What a command runs whole: the agents' assembly, the DRA driver, top's view, the runtime wrapper, the pod-network worker.",
		pkgs: []string{"pkg/agent", "pkg/dradriver", "pkg/top", "pkg/runtimewrap", "pkg/podnetwork/netnsworker"},
	},
	{
		name: "commands",
		what: "The commands: `pkg/cli`, and each binary's `pkg/cli/*` on it; a `pkg/cli/*` never imports a sibling.",
		pkgs: []string{"pkg/cli", "pkg/cli/nodecmd", "pkg/cli/agentcmd", "pkg/cli/dracmd"},
		base: "pkg/cli",
	},
	{
		name: "binaries",
		what: "`main`, one per binary.",
		pkgs: []string{"cmd/rdma-cdi", "cmd/rdma-cdi-hook", "cmd/rdma-cdi-ldsandbox", "cmd/rdma-cdi-agent", "cmd/rdma-cdi-dra"},
	},
}

// An exception is one import the layers refuse and the project keeps.
type exception struct{ from, to, why string }

var exceptions = []exception{
	{
		"pkg/config", "pkg/podnetwork",
		"The pod network's ranges are `podnetwork.Range`s, parsed by `podnetwork.ParseBlocks` as the file is read and checked for overlaps by `podnetwork.CheckOverlaps`, so a bad range fails at load.",
	},
}

// layerOf maps each package to its layer's index.
func layerOf(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for i, l := range layers {
		for _, p := range l.pkgs {
			if j, dup := out[p]; dup {
				t.Errorf("%s is in the layers %s and %s", p, layers[j].name, l.name)
			}
			out[p] = i
		}
		if l.base != "" && !slices.Contains(l.pkgs, l.base) {
			t.Errorf("layer %s's base %s is not one of its packages", l.name, l.base)
		}
	}
	return out
}

// allowed says whether the layers let from import to.
func allowed(layer map[string]int, from, to string) bool {
	lf, lt := layer[from], layer[to]
	return lt < lf || lt == lf && to == layers[lf].base && from != to
}

func isException(from, to string) bool {
	return slices.ContainsFunc(exceptions, func(e exception) bool { return e.from == from && e.to == to })
}

// Every package of pkg/ and cmd/ is in exactly one layer, and every package
// the layers name exists.
func TestEveryPackageHasALayer(t *testing.T) {
	layer, code := layerOf(t), actualEdges(t)
	for _, p := range slices.Sorted(maps.Keys(code)) {
		if _, ok := layer[p]; !ok {
			t.Errorf("%s is in no layer: add it to test/arch's layers (and docs/ARCHITECTURE.md's Layers)", p)
		}
	}
	for p := range layer {
		if _, ok := code[p]; !ok {
			t.Errorf("the layers name %s, which does not exist", p)
		}
	}
}

// Each import goes down the layers (or to its layer's base), or is a named
// exception; each exception is an import that exists and that the layers
// refuse.
func TestImportsFollowTheLayers(t *testing.T) {
	layer, code := layerOf(t), actualEdges(t)
	for _, from := range slices.Sorted(maps.Keys(code)) {
		if _, ok := layer[from]; !ok {
			continue // TestEveryPackageHasALayer says so
		}
		for _, to := range code[from] {
			lt, ok := layer[to]
			switch {
			case !ok:
				t.Errorf("%s imports %s, which is in no layer", from, to)
			case allowed(layer, from, to) || isException(from, to):
			default:
				t.Errorf("%s (layer %s) imports %s (layer %s): move the code, or name an exception with its reason",
					from, layers[layer[from]].name, to, layers[lt].name)
			}
		}
	}
	for _, e := range exceptions {
		switch {
		case !slices.Contains(code[e.from], e.to):
			t.Errorf("the exception %s -> %s names no import: delete it", e.from, e.to)
		case allowed(layer, e.from, e.to):
			t.Errorf("the layers allow %s -> %s: delete its exception", e.from, e.to)
		}
	}
}

// pkg/apis is what everything may import, the hook binary included: its
// packages import nothing of the module but pkg/apis itself.
func TestAPIsImportOnlyAPIs(t *testing.T) {
	for from, imps := range actualEdges(t) {
		if from != "pkg/apis" && !strings.HasPrefix(from, "pkg/apis/") {
			continue
		}
		for _, to := range imps {
			if to != "pkg/apis" {
				t.Errorf("%s imports %s; pkg/apis/... may import pkg/apis alone", from, to)
			}
		}
	}
}

// Each binary's commands (pkg/cli/*) stand on pkg/cli alone, never on
// another binary's.
func TestCommandsImportNoSibling(t *testing.T) {
	for from, imps := range actualEdges(t) {
		if !strings.HasPrefix(from, "pkg/cli/") {
			continue
		}
		for _, to := range imps {
			if strings.HasPrefix(to, "pkg/cli/") {
				t.Errorf("%s imports its sibling %s; what both need goes into pkg/cli or below", from, to)
			}
		}
	}
}

// renderLayers is the Layers section's two tables, as the doc must show
// them.
func renderLayers() string {
	var b strings.Builder
	b.WriteString("| layer | packages | what |\n|---|---|---|\n")
	for i, l := range layers {
		var pkgs []string
		for _, p := range l.pkgs {
			pkgs = append(pkgs, "`"+p+"`")
		}
		fmt.Fprintf(&b, "| %d %s | %s | %s |\n", i, l.name, strings.Join(pkgs, " "), l.what)
	}
	b.WriteString("\n| exception | why |\n|---|---|\n")
	for _, e := range exceptions {
		fmt.Fprintf(&b, "| `%s` -> `%s` | %s |\n", e.from, e.to, e.why)
	}
	return b.String()
}

// docs/ARCHITECTURE.md's Layers section shows exactly these layers, their
// packages and the exceptions: the tables are renderLayers' output.
func TestArchitectureDocShowsTheLayers(t *testing.T) {
	doc := repoFile(t, "docs/ARCHITECTURE.md")
	_, section, ok := strings.Cut(doc, "\n## Layers\n")
	if !ok {
		t.Fatal("docs/ARCHITECTURE.md has no \"## Layers\" section")
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	if want := renderLayers(); !strings.Contains(section, want) {
		t.Errorf("docs/ARCHITECTURE.md's Layers section does not show test/arch's layers; its tables should read:\n\n%s", want)
	}
}
