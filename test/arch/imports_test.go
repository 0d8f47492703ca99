// Package arch checks that docs/ARCHITECTURE.md and the code agree on
// which of the project's packages import which.
package arch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/rdma-cdi/rdma-cdi/"

// documentedEdges reads the "Import edges" table: package -> imports.
func documentedEdges(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "## Import edges")
	if !ok {
		t.Fatal("docs/ARCHITECTURE.md has no \"## Import edges\" section")
	}
	name := regexp.MustCompile("`([^`]+)`")
	edges := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(table))
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) != 4 || !name.MatchString(cells[1]) {
			if strings.HasPrefix(sc.Text(), "## ") {
				break
			}
			continue
		}
		pkg := name.FindStringSubmatch(cells[1])[1]
		edges[pkg] = []string{}
		for _, m := range name.FindAllStringSubmatch(cells[2], -1) {
			edges[pkg] = append(edges[pkg], m[1])
		}
	}
	if len(edges) == 0 {
		t.Fatal("the Import edges table is empty")
	}
	return edges
}

// actualEdges asks the go tool for the non-test imports of pkg/... and
// cmd/..., keeping those within the module; with the dra build tag, which
// only adds edges (pkg/cli's DRA command).
func actualEdges(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-tags", "dra", "-json", "./pkg/...", "./cmd/...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
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

func TestImportEdgesMatchTheArchitectureDoc(t *testing.T) {
	doc, code := documentedEdges(t), actualEdges(t)
	var pkgs []string
	for p := range code {
		pkgs = append(pkgs, p)
	}
	for p := range doc {
		if _, ok := code[p]; !ok {
			t.Errorf("docs/ARCHITECTURE.md lists %s, which does not exist", p)
		}
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		want, listed := doc[p]
		if !listed {
			t.Errorf("%s is not in docs/ARCHITECTURE.md's Import edges table (it imports %v)", p, code[p])
			continue
		}
		sort.Strings(want)
		got := code[p]
		sort.Strings(got)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s imports %v; docs/ARCHITECTURE.md says %v", p, got, want)
		}
	}
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

// The hook binary (-tags hookonly) links none of heavyForHooks.
func TestHookBinaryLinksNoHeavyModule(t *testing.T) {
	cmd := exec.Command("go", "list", "-tags", "hookonly", "-deps", "./cmd/rdma-cdi")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list gave %d packages, too few to be the binary's", len(deps))
	}
	for _, dep := range deps {
		for _, heavy := range heavyForHooks {
			if strings.HasPrefix(dep, heavy) {
				t.Errorf("the hook binary links %s", dep)
			}
		}
	}
}
