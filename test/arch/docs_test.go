package arch

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// readmeMaxLines keeps README a first page: the rest lives in docs/.
const readmeMaxLines = 120

// markdownLink is [text](target) where target is no URL.
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// repoRoot is the repository, from this package's directory.
func repoRoot(*testing.T) string { return filepath.Join("..", "..") }

// docPages are the Markdown pages a user reads.
func docPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md", "CONTRIBUTING.md", "SECURITY.md", "RELIABILITY.md", "BENCHMARKS.md", "deploy/README.md"}
	docs, err := filepath.Glob(filepath.Join(repoRoot(t), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		pages = append(pages, filepath.Join("docs", filepath.Base(d)))
	}
	return pages
}

// TestDocsLinks: every relative link of the docs names a file of the
// repository, and its #anchor a heading of that page.
func TestDocsLinks(t *testing.T) {
	root := repoRoot(t)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		b, _ := os.ReadFile(filepath.Join(root, page))
		anchors[page] = headingAnchors(string(b))
		return anchors[page]
	}
	for _, page := range docPages(t) {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Errorf("%s: %v", page, err)
			continue
		}
		for _, m := range markdownLink.FindAllStringSubmatch(withoutCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			linked := page
			if file != "" {
				linked = filepath.Clean(filepath.Join(filepath.Dir(page), file))
				if _, err := os.Stat(filepath.Join(root, linked)); err != nil {
					t.Errorf("%s links %s: no such file", page, target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(linked, ".md") && !anchorsOf(linked)[anchor] {
				t.Errorf("%s links %s: %s has no heading #%s", page, target, linked, anchor)
			}
		}
	}
}

func TestReadmeIsAFirstPage(t *testing.T) {
	if n := strings.Count(repoFile(t, "README.md"), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines; keep it under %d and move the rest into docs/", n, readmeMaxLines)
	}
}

// withoutCode drops fenced code blocks, whose brackets are no links.
func withoutCode(md string) string {
	var out strings.Builder
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out.WriteString(line + "\n")
		}
	}
	return out.String()
}

// headingAnchors are the anchors GitHub gives a page's headings: lower
// case, punctuation but "-" and "_" dropped, spaces made "-", a repeated
// one suffixed -1, -2, ...
func headingAnchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(withoutCode(md), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var slug strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				slug.WriteRune(r)
			case r == ' ':
				slug.WriteRune('-')
			}
		}
		a := slug.String()
		if n := seen[a]; n > 0 {
			a = fmt.Sprintf("%s-%d", a, n)
		}
		seen[slug.String()]++
		out[a] = true
	}
	return out
}
