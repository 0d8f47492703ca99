package e2e

// Seed 002's documents: the PyTorchJob, PersistentVolume and
// PersistentVolumeClaim of ../shared/seeds/002_*.txt, as YAML a cluster
// accepts.
//
// The seed prints them as a numbered listing: each line has its line number
// glued to its front ("4 name: ...") and its indentation collapsed to one
// space, so the text as it stands has lost the documents' structure. The
// re-indenter below gives it back without changing any line's content: it
// walks the lines with the Go types of the objects in hand (k8s.io/api's
// types by reflection on their json tags; for the PyTorchJob's own levels,
// the small mirror types seedPyTorchJob*), and for each line decides which
// open mapping or list it belongs to:
//   - "key:" with no value opens a mapping or a list below it, as the
//     field's type says; "key: value" is a scalar (or a flow collection);
//   - a key that the innermost open mapping has no field for closes it (and
//     so on outwards); a map of scalars (annotations, limits) takes only keys
//     with a non-empty value;
//   - "- " starts an item of the innermost open list that can hold it (a
//     "- key: ..." item: a list of mappings with that field; any other: a
//     list of scalars), closing what is open inside;
//   - "---" ends a document.
// Comments ("#Required, ...") stay on their lines, and a line the types
// cannot place is an error, never a guess.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// seedPyTorchJob mirrors, of Kubeflow's kubeflow.org/v1 PyTorchJob, the levels
// above the pod template that seed 002 uses. The training operator's module
// is not a dependency: these few fields are all the seed needs.
type seedPyTorchJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              seedPyTorchJobSpec `json:"spec"`
}

// seedPyTorchJobSpec: replica type ("Master", "Worker") to its replicas.
type seedPyTorchJobSpec struct {
	PyTorchReplicaSpecs map[string]*seedReplicaSpec `json:"pytorchReplicaSpecs"`
}

// seedReplicaSpec is the training operator's ReplicaSpec.
type seedReplicaSpec struct {
	Replicas      *int32                 `json:"replicas,omitempty"`
	RestartPolicy string                 `json:"restartPolicy,omitempty"`
	Template      corev1.PodTemplateSpec `json:"template,omitempty"`
}

// seedKinds: the document types the re-indenter knows, by kind.
var seedKinds = map[string]reflect.Type{
	"PyTorchJob":            reflect.TypeOf(seedPyTorchJob{}),
	"PersistentVolume":      reflect.TypeOf(corev1.PersistentVolume{}),
	"PersistentVolumeClaim": reflect.TypeOf(corev1.PersistentVolumeClaim{}),
}

// SeedsDir is where the seeds are: $RDMA_CDI_SEEDS_DIR, else ../shared/seeds
// beside the repository.
func SeedsDir() string {
	if d := os.Getenv("RDMA_CDI_SEEDS_DIR"); d != "" {
		return d
	}
	return filepath.Join(filepath.Dir(RepoRoot()), "shared", "seeds")
}

// seed002ListingFile is the seed's numbered YAML listing, as the seed
// prints it, kept in the framework's testdata for machines without the
// seeds (CI's clean clone). From the repository's root: a suite runs in
// its own directory.
func seed002ListingFile() string {
	return filepath.Join(RepoRoot(), "test", "e2e", "testdata", "seed002-listing.txt")
}

// seed002Lines returns seed 002's numbered listing, numbers taken off: from
// the seed itself when it is there (the testdata copy must then equal it
// line for line), else from the copy; source names where it came from.
func seed002Lines(t testing.TB) (lines []string, source string) {
	t.Helper()
	kept, err := os.ReadFile(seed002ListingFile())
	if err != nil {
		t.Fatal(err)
	}
	fromCopy, err := numberedBlock(string(kept), "apiVersion:")
	if err != nil {
		t.Fatalf("%s: %v", seed002ListingFile(), err)
	}
	matches, _ := filepath.Glob(filepath.Join(SeedsDir(), "002_*.txt"))
	if len(matches) != 1 {
		return fromCopy, seed002ListingFile()
	}
	seed, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	fromSeed, err := numberedBlock(string(seed), "apiVersion:")
	if err != nil || !slices.Equal(fromSeed, fromCopy) {
		t.Fatalf("%s is not seed 002's listing (%s) any more: %v", seed002ListingFile(), matches[0], err)
	}
	return fromSeed, matches[0]
}

// Seed002Documents returns seed 002's PyTorchJob, PV and PVC, re-indented
// (reindentSeedListing).
func Seed002Documents(t testing.TB) (job, pv, pvc string) {
	t.Helper()
	lines, source := seed002Lines(t)
	docs, err := listingDocuments(lines)
	if err != nil {
		t.Fatalf("seed 002 (%s): %v", source, err)
	}
	for _, kind := range []string{"PyTorchJob", "PersistentVolume", "PersistentVolumeClaim"} {
		if docs[kind] == "" {
			t.Fatalf("seed 002 (%s): no %s document in its listing", source, kind)
		}
	}
	return docs["PyTorchJob"], docs["PersistentVolume"], docs["PersistentVolumeClaim"]
}

// listingDocuments re-indents a listing's lines and returns its documents
// by kind.
func listingDocuments(lines []string) (map[string]string, error) {
	out, err := reindentSeedListing(lines)
	if err != nil {
		return nil, err
	}
	docs := map[string]string{}
	for _, doc := range splitDocuments(out) {
		kind := documentKind(doc)
		if kind == "" {
			return nil, fmt.Errorf("a document without kind:\n%s", doc)
		}
		if _, dup := docs[kind]; dup {
			return nil, fmt.Errorf("two %s documents", kind)
		}
		docs[kind] = doc
	}
	return docs, nil
}

// numberedBlock returns the lines of the first block of text numbered 1, 2,
// 3, ... whose line 1 starts with first, each with its number taken off
// (what follows the number is kept as it is, the collapsed indentation's
// one space included).
func numberedBlock(text, first string) ([]string, error) {
	all := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	for i, l := range all {
		if !strings.HasPrefix(l, "1"+first) {
			continue
		}
		var block []string
		for n := 1; i+n-1 < len(all); n++ {
			l := all[i+n-1]
			num := strconv.Itoa(n)
			if !strings.HasPrefix(l, num) {
				break
			}
			block = append(block, l[len(num):])
		}
		return block, nil
	}
	return nil, fmt.Errorf("no numbered block starting with %q", "1"+first)
}

// splitDocuments splits YAML at its "---" lines; empty documents are dropped.
func splitDocuments(y string) []string {
	var docs []string
	for _, d := range regexp.MustCompile(`(?m)^---[ \t]*\n`).Split(y, -1) {
		if strings.TrimSpace(d) != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

// documentKind is the value of a document's top-level kind (unquoted), ""
// when it has none.
func documentKind(doc string) string {
	m := regexp.MustCompile(`(?m)^kind:[ \t]*(.*)$`).FindStringSubmatch(doc)
	if m == nil {
		return ""
	}
	return strings.Trim(strings.TrimSpace(stripComment(m[1])), `"'`)
}

// shape is what a Go type is in YAML: a scalar, a mapping with known fields
// (a struct), a mapping with any keys (a map) or a list.
type shape struct {
	kind   shapeKind
	fields map[string]reflect.Type // mapping of a struct: json name -> type
	elem   reflect.Type            // map's value, list's item
}

type shapeKind int

const (
	shapeScalar shapeKind = iota
	shapeStruct
	shapeMap
	shapeList
)

var jsonUnmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

// shapeOf reads t's YAML shape from its kind and json tags. A type that
// decodes itself (resource.Quantity, metav1.Time, IntOrString) is a scalar.
func shapeOf(t reflect.Type) shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return shape{kind: shapeScalar}
	}
	switch t.Kind() {
	case reflect.Struct:
		fields := map[string]reflect.Type{}
		addFields(t, fields)
		return shape{kind: shapeStruct, fields: fields}
	case reflect.Map:
		return shape{kind: shapeMap, elem: t.Elem()}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return shape{kind: shapeScalar} // []byte: base64 text
		}
		return shape{kind: shapeList, elem: t.Elem()}
	default:
		return shape{kind: shapeScalar}
	}
}

// addFields adds t's fields by json name, those of inlined (embedded,
// untagged or ",inline") structs included.
func addFields(t reflect.Type, into map[string]reflect.Type) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if name == "" && f.Anonymous {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				addFields(ft, into)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		into[name] = f.Type
	}
}

// seedLine is one line of the listing, parsed as far as placing it needs.
type seedLine struct {
	dash  bool   // starts with "- "
	rest  string // after "- " (the whole content when !dash)
	key   string // the mapping key, "" for a scalar item
	value string // the key's value, its comment taken off, trimmed
}

// parseSeedLine parses content (indentation already taken off). A key is
// what precedes the first ": " (or a final ":") outside quotes.
func parseSeedLine(content string) seedLine {
	l := seedLine{rest: content}
	if content == "-" || strings.HasPrefix(content, "- ") {
		l.dash = true
		l.rest = strings.TrimPrefix(strings.TrimPrefix(content, "-"), " ")
	}
	if k, v, ok := splitKey(l.rest); ok {
		l.key, l.value = k, strings.TrimSpace(stripComment(v))
	}
	return l
}

// splitKey splits "key: value" or "key:"; ok is false for a plain scalar.
func splitKey(s string) (key, value string, ok bool) {
	if s == "" || s[0] == '"' || s[0] == '\'' || s[0] == '[' || s[0] == '{' || s[0] == '#' {
		return "", "", false
	}
	for i := 0; i < len(s); i++ {
		if s[i] != ':' {
			continue
		}
		if i+1 == len(s) || s[i+1] == ' ' || s[i+1] == '\t' {
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}

// stripComment takes a YAML comment (" #..." outside quotes) off a value.
func stripComment(v string) string {
	var quote byte
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#' && (i == 0 || v[i-1] == ' ' || v[i-1] == '\t'):
			return v[:i]
		}
	}
	return v
}

// frame is an open mapping or list: what it may hold and the column its
// keys or dashes start at.
type frame struct {
	shape  shape
	indent int
}

func (f frame) isList() bool { return f.shape.kind == shapeList }

// accepts returns the type of key's value when the open mapping f has a
// place for key with this (comment-free) value.
func (f frame) accepts(key, value string) (reflect.Type, bool) {
	switch f.shape.kind {
	case shapeStruct:
		t, ok := f.shape.fields[key]
		return t, ok
	case shapeMap:
		if shapeOf(f.shape.elem).kind == shapeScalar {
			return f.shape.elem, value != ""
		}
		return f.shape.elem, value == "" || value[0] == '{' || value[0] == '['
	}
	return nil, false
}

// fitsList reports whether f is an open list that can hold the item l.
func fitsList(f frame, l seedLine) bool {
	if !f.isList() {
		return false
	}
	item := shapeOf(f.shape.elem)
	if l.key == "" {
		return item.kind == shapeScalar || strings.HasPrefix(l.rest, "{") || strings.HasPrefix(l.rest, "[")
	}
	if item.kind == shapeScalar {
		return false
	}
	_, ok := frame{shape: item}.accepts(l.key, l.value)
	return ok
}

// reindentSeedListing re-indents listing lines (numbers taken off, each
// line's indentation collapsed to at most one space): two spaces a level,
// list items two spaces in from their key, as kubectl's examples write
// them. Each output line is the input line's content unchanged.
func reindentSeedListing(lines []string) (string, error) {
	var (
		b     strings.Builder
		stack []frame
		doc   []string // the current document's lines, for its kind
	)
	startDoc := func(from int) error {
		doc = nil
		for _, l := range lines[from:] {
			c := strings.TrimLeft(l, " \t")
			if c == "---" {
				break
			}
			doc = append(doc, c)
		}
		kind := documentKind(strings.Join(doc, "\n") + "\n")
		t, ok := seedKinds[kind]
		if !ok {
			return fmt.Errorf("line %d: a document of kind %q, which the re-indenter has no type for", from+1, kind)
		}
		stack = []frame{{shape: shapeOf(t), indent: 0}}
		return nil
	}
	emit := func(indent int, content string) {
		b.WriteString(strings.Repeat(" ", indent))
		b.WriteString(content)
		b.WriteByte('\n')
	}
	// open pushes what a "key:" line with an empty value opens.
	open := func(t reflect.Type, value string, indent int) {
		if value != "" {
			return
		}
		if s := shapeOf(t); s.kind != shapeScalar {
			stack = append(stack, frame{shape: s, indent: indent + 2})
		}
	}
	if err := startDoc(0); err != nil {
		return "", err
	}
	for i, raw := range lines {
		content := strings.TrimLeft(raw, " \t")
		switch {
		case content == "":
			b.WriteByte('\n')
			continue
		case content == "---":
			emit(0, content)
			if err := startDoc(i + 1); err != nil {
				return "", err
			}
			continue
		case strings.HasPrefix(content, "#"):
			emit(stack[len(stack)-1].indent, content)
			continue
		}
		l := parseSeedLine(content)
		if l.dash {
			// The innermost open list whose items this one can be: a
			// "- key: ..." item is a mapping with that field, anything
			// else a scalar (or a flow collection).
			for len(stack) > 0 && !fitsList(stack[len(stack)-1], l) {
				stack = stack[:len(stack)-1]
			}
			if len(stack) == 0 {
				return "", fmt.Errorf("line %d: %q: no open list takes this item", i+1, content)
			}
			list := stack[len(stack)-1]
			emit(list.indent, content)
			if l.key == "" || shapeOf(list.shape.elem).kind == shapeScalar {
				continue
			}
			// An item that is a mapping: its first key sits after "- ".
			itemFrame := frame{shape: shapeOf(list.shape.elem), indent: list.indent + 2}
			t, _ := itemFrame.accepts(l.key, l.value)
			stack = append(stack, itemFrame)
			open(t, l.value, itemFrame.indent)
			continue
		}
		if l.key == "" {
			return "", fmt.Errorf("line %d: %q: neither a key nor a list item", i+1, content)
		}
		placed := false
		for len(stack) > 0 {
			top := stack[len(stack)-1]
			if t, ok := top.accepts(l.key, l.value); ok {
				emit(top.indent, content)
				open(t, l.value, top.indent)
				placed = true
				break
			}
			stack = stack[:len(stack)-1]
		}
		if !placed {
			return "", fmt.Errorf("line %d: %q: no open mapping has a field %q", i+1, content, l.key)
		}
	}
	return b.String(), nil
}
