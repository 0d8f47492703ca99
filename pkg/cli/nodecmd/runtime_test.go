package nodecmd

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// TestMain lets the test binary, linked as rdma-cdi, be the command line:
// `rdma-cdi runtime` execs the real runtime, which ends its process.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "rdma-cdi" {
		if err := testRoot(cli.NewApp("test", "test")).Execute(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runtimeEnv is a node for `rdma-cdi runtime`: a CDI spec dir holding
// fixture.TwoHCASpec, an empty sysfs, and a fake runtime that records its
// argv and the config.json it saw in rec.
type runtimeEnv struct{ dir, rec, config string }

const recordingRuntime = `#!/bin/sh
rec=%q
printf '%%s\n' "$@" > "$rec/argv"
bundle=.
prev=
for a in "$@"; do
	case "$prev" in --bundle|-b) bundle=$a ;; esac
	prev=$a
done
cp "$bundle/config.json" "$rec/seen.json"
`

func newRuntimeEnv(t *testing.T) runtimeEnv {
	t.Helper()
	dir := t.TempDir()
	e := runtimeEnv{dir: dir, rec: filepath.Join(dir, "rec"), config: filepath.Join(dir, "config.toml")}
	for _, d := range []string{"bin", "rec", "cdi", "sys", "bundle"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	runtime := filepath.Join(dir, "fake-runc")
	cfg := fmt.Sprintf("[cdi]\nspec_dir = %q\n[hooks]\nmemlock = \"8M\"\n[runtime]\npath = %q\nlog_file = %q\n",
		filepath.Join(dir, "cdi"), runtime, filepath.Join(dir, "runtime.log"))
	for path, data := range map[string]string{
		runtime:                                fmt.Sprintf(recordingRuntime, e.rec),
		filepath.Join(dir, "cdi", "rdma.yaml"): fixture.TwoHCASpec,
		e.config:                               cfg,
		filepath.Join(dir, "bundle", "config.json"): `{"ociVersion":"1.0.2","process":{"user":{"uid":1000,"gid":1000},"args":["sh"],"cwd":"/",` +
			`"env":["PATH=/bin","RDMA_VISIBLE_DEVICES=all"]},"root":{"path":"rootfs"},"linux":{}}`,
	} {
		if err := os.WriteFile(path, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func TestRuntimeSubcommand(t *testing.T) {
	e := newRuntimeEnv(t)
	b := filepath.Join(e.dir, "bundle")
	self, _ := os.Executable()
	rdmaCDI := filepath.Join(e.dir, "bin", "rdma-cdi")
	if err := os.Symlink(self, rdmaCDI); err != nil {
		t.Fatal(err)
	}
	args := []string{"--log-format", "json", "create", "-b", b, "id9"}
	cmd := exec.Command(rdmaCDI, append([]string{"--config", e.config, "--sysfs-root", filepath.Join(e.dir, "sys"), "runtime", "--"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	argv, err := os.ReadFile(filepath.Join(e.rec, "argv"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSuffix(string(argv), "\n"), "\n"); !slices.Equal(got, args) {
		t.Fatalf("runtime argv = %q, want %q", got, args)
	}
	if seen, _ := os.ReadFile(filepath.Join(e.rec, "seen.json")); !bytes.Contains(seen, []byte("CAP_IPC_LOCK")) || !bytes.Contains(seen, []byte("/dev/infiniband/uverbs1")) {
		t.Fatalf("runtime saw %s", seen)
	}
}
