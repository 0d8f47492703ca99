// Package arch holds the code to docs/ARCHITECTURE.md: the layers its
// packages sit in and may import from (layers_test.go), what each binary
// links, the diagram and the docs' links.
package arch

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/rdma-cdi/rdma-cdi/"

// goListJSON is `go list -json ./pkg/... ./cmd/...`, run once for the
// tests that read the imports.
var goListJSON = sync.OnceValues(func() ([]byte, error) {
	cmd := exec.Command("go", "list", "-json", "./pkg/...", "./cmd/...")
	cmd.Dir = filepath.Join("..", "..")
	return cmd.Output()
})

// actualEdges asks the go tool for the non-test imports of pkg/... and
// cmd/..., keeping those within the module.
func actualEdges(t *testing.T) map[string][]string {
	t.Helper()
	out, err := goListJSON()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	edges := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkg := strings.TrimPrefix(p.ImportPath, module)
		edges[pkg] = []string{}
		for _, imp := range p.Imports {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				edges[pkg] = append(edges[pkg], rel)
			}
		}
	}
	return edges
}

// heavyForHooks are modules whose package inits and code a container
// start must not pay for: the CDI library (its validation and YAML), gRPC
// and protobuf (the device plugin), Kubernetes' API packages.
var heavyForHooks = []string{
	"tags.cncf.io/container-device-interface",
	"go.yaml.in/yaml", "gopkg.in/yaml", "sigs.k8s.io/yaml",
	"google.golang.org/grpc", "google.golang.org/protobuf",
	"k8s.io/",
}

// agentsOnly are what the long-running agents need and the CLI must not
// link (its build, the demo's first build, and every start of list,
// generate and the runtime wrapper would pay): gRPC (the device plugin),
// Prometheus' client, net/http and, through them, crypto/tls.
var agentsOnly = []string{
	"google.golang.org/grpc", "github.com/prometheus/", "net/http", "crypto/tls", "k8s.io/",
}

// kubernetesClient is what only the DRA driver may link: client-go's
// clientset (its typed clients register every API group), informers and
// caches, and the DRA kubelet-plugin helper (54 MB, a start 2.5 times
// slower).
var kubernetesClient = []string{
	"k8s.io/client-go/kubernetes", "k8s.io/client-go/informers", "k8s.io/client-go/tools/cache",
	"k8s.io/dynamic-resource-allocation",
}

// agentAPIs are the only Kubernetes API groups rdma-cdi-agent links: the
// reviews that guard its /metrics (metrics.auth kubernetes), and the
// Leases that hold the node's pod addresses (pod_network.pools), which it
// speaks with client-go's REST client alone. Its stripped binary grew from
// 16.5 to 21.6 MB with the reviews; the typed clients would take it past
// 37 MB.
var agentAPIs = []string{"k8s.io/api/authentication/v1", "k8s.io/api/authorization/v1", "k8s.io/api/coordination/v1"}

// binaryDeps lists every package a cmd/ binary links.
func binaryDeps(t *testing.T, binary string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "./cmd/"+binary)
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list gave %d packages, too few to be %s's", len(deps), binary)
	}
	return deps
}

func linksAny(deps, prefixes []string) []string {
	var out []string
	for _, dep := range deps {
		for _, p := range prefixes {
			if strings.HasPrefix(dep, p) {
				out = append(out, dep)
			}
		}
	}
	return out
}

// sandboxLinks is all rdma-cdi-ldsandbox may link beside the standard
// library: the sandbox, what it says to the hook (apis), and the in-root
// path resolution and system calls it uses. Every container start that
// updates the linker cache starts this binary after the hook; whatever
// else it linked, that start would pay for.
var sandboxLinks = []string{
	module + "cmd/rdma-cdi-ldsandbox", module + "pkg/ldsandbox", module + "pkg/apis",
	"github.com/cyphar/filepath-securejoin/", "golang.org/x/sys/unix",
}

func TestTheSandboxBinaryLinksAlmostNothing(t *testing.T) {
	deps := binaryDeps(t, "rdma-cdi-ldsandbox")
	for _, dep := range deps {
		if strings.Contains(strings.SplitN(dep, "/", 2)[0], ".") && len(linksAny([]string{dep}, sandboxLinks)) == 0 {
			t.Errorf("rdma-cdi-ldsandbox links %s", dep)
		}
	}
	if !slices.Contains(deps, module+"pkg/ldsandbox") {
		t.Error("rdma-cdi-ldsandbox does not link pkg/ldsandbox: is ./cmd/rdma-cdi-ldsandbox the sandbox?")
	}
}

// The hook binary links none of heavyForHooks; the CLI none of agentsOnly;
// only the DRA driver links the Kubernetes client, and the agent no API
// group but agentAPIs. The agent and the DRA driver do link what they are
// there for (the test would pass vacuously on a wrong package list
// otherwise).
func TestWhatEachBinaryLinks(t *testing.T) {
	for _, dep := range linksAny(binaryDeps(t, "rdma-cdi-hook"), heavyForHooks) {
		t.Errorf("rdma-cdi-hook links %s", dep)
	}
	for _, dep := range linksAny(binaryDeps(t, "rdma-cdi"), agentsOnly) {
		t.Errorf("rdma-cdi links %s", dep)
	}
	agent := binaryDeps(t, "rdma-cdi-agent")
	for _, dep := range linksAny(agent, kubernetesClient) {
		t.Errorf("rdma-cdi-agent links %s", dep)
	}
	for _, dep := range linksAny(agent, []string{"k8s.io/api/"}) {
		if !slices.Contains(agentAPIs, dep) {
			t.Errorf("rdma-cdi-agent links %s, an API group beside %v", dep, agentAPIs)
		}
	}
	if len(linksAny(agent, []string{"google.golang.org/grpc", "github.com/prometheus/"})) == 0 {
		t.Error("rdma-cdi-agent links neither gRPC nor Prometheus' client: is ./cmd/rdma-cdi-agent the agents' binary?")
	}
	if len(linksAny(binaryDeps(t, "rdma-cdi-dra"), kubernetesClient)) == 0 {
		t.Error("rdma-cdi-dra links no Kubernetes client: is ./cmd/rdma-cdi-dra the DRA driver?")
	}
}
