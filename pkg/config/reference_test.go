package config

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md's generated reference")

const (
	referenceDoc   = "../../docs/configuration.md"
	referenceBegin = "<!-- BEGIN generated reference: go test ./pkg/config -run TestConfigurationReference -update -->\n"
	referenceEnd   = "<!-- END generated reference -->\n"
)

// TestConfigurationReference: docs/configuration.md's reference is
// Reference(), so a key added, renamed, re-defaulted or re-documented in
// the code fails here until the page is regenerated.
func TestConfigurationReference(t *testing.T) {
	b, err := os.ReadFile(referenceDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start, end := strings.Index(doc, referenceBegin), strings.Index(doc, referenceEnd)
	if start < 0 || end < start {
		t.Fatalf("%s has no generated reference between %q and %q", referenceDoc, referenceBegin, referenceEnd)
	}
	want := Reference()
	got := doc[start+len(referenceBegin) : end]
	if got == want {
		return
	}
	if *update {
		doc = doc[:start+len(referenceBegin)] + want + doc[end:]
		if err := os.WriteFile(referenceDoc, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's reference differs from the code's; run: go test ./pkg/config -run TestConfigurationReference -update\ngot:\n%s\nwant:\n%s", referenceDoc, got, want)
}

// TestReferenceDocumentsEveryKey: every key has a help text, so the
// reference never shows an empty row.
func TestReferenceDocumentsEveryKey(t *testing.T) {
	def := Default()
	for _, f := range keys(&def) {
		if strings.TrimSpace(f.help) == "" {
			t.Errorf("config key %s has no help tag", f.key)
		}
	}
	for _, line := range strings.Split(Reference(), "\n") {
		if strings.HasSuffix(line, "|  |") {
			t.Errorf("reference row without a text: %s", line)
		}
	}
}
