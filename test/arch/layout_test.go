package arch

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repoFile reads a file of the repository.
func repoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// goList lists the module's packages matching patterns, relative to it.
func goList(t *testing.T, patterns ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, patterns...)...)
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		pkgs = append(pkgs, strings.TrimPrefix(p, module))
	}
	return pkgs
}

// The Mermaid picture in docs/ARCHITECTURE.md names every package under
// pkg/ and every binary under cmd/, and nothing that does not exist.
func TestArchitectureDiagramNamesEveryPackage(t *testing.T) {
	doc := repoFile(t, "docs/ARCHITECTURE.md")
	start := strings.Index(doc, "```mermaid\n")
	if start < 0 {
		t.Fatal("docs/ARCHITECTURE.md has no ```mermaid block")
	}
	diagram := doc[start : start+strings.Index(doc[start+3:], "```")+3]
	var named []string
	for _, m := range regexp.MustCompile(`\["((?:pkg|cmd)/[^"]+)"\]`).FindAllStringSubmatch(diagram, -1) {
		named = append(named, m[1])
	}
	slices.Sort(named)
	real := goList(t, "./pkg/...", "./cmd/...")
	slices.Sort(real)
	for _, p := range real {
		if !slices.Contains(named, p) {
			t.Errorf("the diagram lacks %s", p)
		}
	}
	for _, p := range named {
		if !slices.Contains(real, p) {
			t.Errorf("the diagram names %s, which does not exist", p)
		}
	}
}

// Each binary's commands are the ones README's Binaries table lists for it,
// read from the binary's own --help.
func TestEachBinaryHasTheCommandsREADMEListsForIt(t *testing.T) {
	readme := repoFile(t, "README.md")
	row := regexp.MustCompile("(?m)^\\| `(rdma-cdi[a-z-]*)` \\| ((?:`[a-z-]+`(?:, )?)+) \\|")
	want := map[string][]string{}
	for _, m := range row.FindAllStringSubmatch(readme, -1) {
		for _, c := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(m[2], -1) {
			want[m[1]] = append(want[m[1]], c[1])
		}
	}
	// The sandbox has no command: the hook starts it, nobody else.
	bins := slices.DeleteFunc(goList(t, "./cmd/..."), func(p string) bool { return filepath.Base(p) == "rdma-cdi-ldsandbox" })
	if !strings.Contains(readme, "`rdma-cdi-ldsandbox`") {
		t.Error("README does not name rdma-cdi-ldsandbox, a binary of cmd/")
	}
	if len(want) != len(bins) {
		t.Fatalf("README's Binaries table lists %v; cmd/ has %v", want, bins)
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/...")
	build.Dir = filepath.Join("..", "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/...: %v\n%s", err, out)
	}
	for _, pkg := range bins {
		name := filepath.Base(pkg)
		out, err := exec.Command(filepath.Join(dir, name), "--help").Output()
		if err != nil {
			t.Fatalf("%s --help: %v", name, err)
		}
		got := helpCommands(string(out))
		slices.Sort(got)
		w := slices.Sorted(slices.Values(want[name]))
		if !slices.Equal(got, w) {
			t.Errorf("%s has the commands %v; README lists %v", name, got, w)
		}
	}
}

// helpCommands are the commands cobra's help lists, less its own.
func helpCommands(help string) []string {
	_, list, _ := strings.Cut(help, "Available Commands:\n")
	var out []string
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(line, "  ") {
			break
		}
		if f[0] != "help" && f[0] != "completion" {
			out = append(out, f[0])
		}
	}
	return out
}
