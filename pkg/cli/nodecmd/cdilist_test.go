package nodecmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cdiListArgs runs `cdi list` with an empty config (vendor rdma.example.com)
// over the given spec dirs.
func cdiList(t *testing.T, dirs []string, extra ...string) (stdout, stderr string, err error) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", cfg, "cdi", "list"}
	for _, d := range dirs {
		args = append(args, "--spec-dir", d)
	}
	return runCLI(t, append(args, extra...)...)
}

func writeSpec(t *testing.T, dir, name, text string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const goodOurs = `cdiVersion: 0.5.0
kind: rdma.example.com/hca
devices:
- name: mlx5_0
  containerEdits:
    env: [A=1]
- name: all
  containerEdits:
    env: [A=2]
`

const goodForeign = `{"cdiVersion":"0.3.0","kind":"other.example.org/gpu","devices":[{"name":"gpu0","containerEdits":{"env":["B=1"]}}]}`

func lines(s string) []string { return strings.Fields(s) }

func TestCDIListGoodSpecs(t *testing.T) {
	etc, run := filepath.Join(t.TempDir(), "etc"), filepath.Join(t.TempDir(), "run")
	writeSpec(t, etc, "other.json", goodForeign)
	writeSpec(t, run, "rdma.example.com-hca.yaml", goodOurs)
	so, se, err := cdiList(t, []string{etc, run})
	if err != nil {
		t.Fatalf("%v\n%s", err, se)
	}
	want := []string{"other.example.org/gpu=gpu0", "rdma.example.com/hca=all", "rdma.example.com/hca=mlx5_0"}
	if got := lines(so); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("devices = %v, want %v", got, want)
	}
	if strings.Contains(se, "error") || strings.Contains(se, "warning") {
		t.Errorf("stderr on good specs: %s", se)
	}
}

func TestCDIListLong(t *testing.T) {
	dir := t.TempDir()
	p := writeSpec(t, dir, "rdma.example.com-hca.yaml", goodOurs)
	so, _, err := cdiList(t, []string{dir}, "--long")
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(so), "\n")
	if len(rows) != 3 || strings.Join(strings.Fields(rows[0]), " ") != "DEVICE CDI SPEC" {
		t.Fatalf("long output:\n%s", so)
	}
	if got := strings.Join(strings.Fields(rows[2]), " "); got != "rdma.example.com/hca=mlx5_0 0.5.0 "+p {
		t.Errorf("row = %q", got)
	}
}

// A broken spec of our vendor: the library rejects the whole file, so its
// devices are gone for every engine; the command says why and fails.
func TestCDIListBrokenOwnSpecFails(t *testing.T) {
	cases := map[string]struct{ name, text, why string }{
		"unknown field": {"mine.json",
			`{"cdiVersion":"0.5.0","kind":"rdma.example.com/hca","devices":[{"name":"mlx5_0","containerEdits":{"additionalGidz":[5]}}]}`,
			"additionalGidz"},
		"too new a version": {"mine.yaml",
			"cdiVersion: 9.9.9\nkind: rdma.example.com/hca\ndevices:\n- name: mlx5_0\n  containerEdits:\n    env: [A=1]\n",
			"9.9.9"},
		"bad device name": {"mine.yaml",
			"cdiVersion: 0.5.0\nkind: rdma.example.com/hca\ndevices:\n- name: 'mlx5 0'\n  containerEdits:\n    env: [A=1]\n",
			"mlx5 0"},
		// Not YAML at all: the kind cannot be read, the generate file name tells the vendor.
		"truncated": {"rdma.example.com-hca.yaml", "cdiVersion: 0.5.0\nkind: [rdma.example.com/hca\n", "failed to load CDI Spec"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeSpec(t, dir, "other.json", goodForeign)
			bad := writeSpec(t, dir, tc.name, tc.text)
			so, se, err := cdiList(t, []string{dir})
			if err == nil {
				t.Fatalf("want a failure, got devices %q, stderr %s", so, se)
			}
			if !strings.Contains(err.Error(), "vendor rdma.example.com") || !strings.Contains(err.Error(), bad) {
				t.Errorf("error does not name the vendor and file: %v", err)
			}
			if !strings.Contains(se, "error: "+bad+": ") || !strings.Contains(se, tc.why) {
				t.Errorf("stderr lacks the library's reason (%q) for %s:\n%s", tc.why, bad, se)
			}
			// The good foreign spec is still listed; ours is not.
			if got := lines(so); len(got) != 1 || got[0] != "other.example.org/gpu=gpu0" {
				t.Errorf("devices = %v", got)
			}
		})
	}
}

func TestCDIListBrokenForeignSpecIsReportedNotFatal(t *testing.T) {
	dir := t.TempDir()
	writeSpec(t, dir, "rdma.example.com-hca.yaml", goodOurs)
	bad := writeSpec(t, dir, "gpu.json", `{"cdiVersion":"0.5.0","kind":"other.example.org/gpu","devices":[],"bogus":1}`)
	so, se, err := cdiList(t, []string{dir})
	if err != nil {
		t.Fatalf("a foreign broken spec failed the command: %v", err)
	}
	if !strings.Contains(se, "error: "+bad+": ") {
		t.Errorf("foreign spec error not printed:\n%s", se)
	}
	if got := lines(so); len(got) != 2 {
		t.Errorf("devices = %v", got)
	}
}

// The same device at the same priority in two files is dropped by the
// library: no engine can use it.
func TestCDIListConflictFails(t *testing.T) {
	dir := t.TempDir()
	a := writeSpec(t, dir, "a.yaml", goodOurs)
	b := writeSpec(t, dir, "b.yaml", strings.Replace(goodOurs, "- name: all\n  containerEdits:\n    env: [A=2]\n", "", 1))
	so, se, err := cdiList(t, []string{dir})
	if err == nil {
		t.Fatalf("conflict not reported: %s %s", so, se)
	}
	if !strings.Contains(se, `conflicting device "rdma.example.com/hca=mlx5_0"`) || !strings.Contains(se, a) || !strings.Contains(se, b) {
		t.Errorf("stderr:\n%s", se)
	}
	if got := lines(so); len(got) != 1 || got[0] != "rdma.example.com/hca=all" {
		t.Errorf("devices = %v, want only the unconflicted all", got)
	}
}

// A device in the higher priority dir (the last --spec-dir) wins without a
// conflict, as /var/run/cdi beats /etc/cdi.
func TestCDIListLaterDirWins(t *testing.T) {
	etc, run := t.TempDir(), t.TempDir()
	writeSpec(t, etc, "rdma.example.com-hca.yaml", goodOurs)
	p := writeSpec(t, run, "rdma.example.com-hca.yaml", goodOurs)
	so, se, err := cdiList(t, []string{etc, run}, "-l")
	if err != nil || strings.Contains(se, "error") {
		t.Fatalf("%v\n%s", err, se)
	}
	if !strings.Contains(so, "rdma.example.com/hca=mlx5_0  0.5.0  "+p) {
		t.Errorf("the higher priority spec should provide mlx5_0:\n%s", so)
	}
}

func TestCDIListNoSpecsWarns(t *testing.T) {
	so, se, err := cdiList(t, []string{filepath.Join(t.TempDir(), "missing")})
	if err != nil || so != "" {
		t.Fatalf("%q %v", so, err)
	}
	if !strings.Contains(se, "no CDI devices of vendor rdma.example.com") || !strings.Contains(se, "rdma-cdi generate") {
		t.Errorf("stderr: %s", se)
	}
}

// What generate writes for the 9-HCA fixture is read back by the library
// as one device per HCA plus all.
func TestCDIListReadsGeneratedSpec(t *testing.T) {
	roots := fixtureRoots(t, "seed002")
	dir := t.TempDir()
	if _, se, err := runCLI(t, append(roots, "--log-level=error", "generate", "--output", filepath.Join(dir, "x.yaml"))...); err != nil {
		t.Fatalf("%v\n%s", err, se)
	}
	so, se, err := runCLI(t, append(roots, "cdi", "list", "--spec-dir", dir)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, se)
	}
	want := []string{"rdma.example.com/hca=all"}
	for i := 0; i < 9; i++ {
		want = append(want, "rdma.example.com/hca=mlx5_"+string(rune('0'+i)))
	}
	if got := lines(so); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("devices = %v\nwant %v", got, want)
	}
}

func TestCDIWithoutSubcommandPrintsHelp(t *testing.T) {
	so, _, err := runCLI(t, "cdi")
	if err != nil || !strings.Contains(so, "list") {
		t.Fatalf("%q %v", so, err)
	}
}
