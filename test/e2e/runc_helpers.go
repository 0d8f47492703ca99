package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// RuncEnv runs OCI bundles with runc (Debian's 1.1.5) and a private state
// root.
type RuncEnv struct {
	Dir  string // scratch root: bundles live here
	Root string // runc --root (state)
}

// Runc returns a runc setup removed when the test ends. Needs root and runc.
func Runc(t testing.TB) *RuncEnv {
	t.Helper()
	RequireRoot(t)
	RequireBinary(t, "runc")
	dir, err := ScratchDir(t, "runc")
	if err != nil {
		t.Fatal(err)
	}
	r := &RuncEnv{Dir: dir, Root: filepath.Join(dir, "state")}
	if err := os.MkdirAll(r.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	return r
}

// Bundle is an OCI bundle: Dir/config.json and Dir/rootfs.
type Bundle struct {
	Dir    string
	Rootfs string
	// Spec is written to config.json by Save and by RuncEnv.Run.
	Spec *specs.Spec
}

// Bundle makes a bundle from the rootfs tar of img, with the config of
// `runc spec` edited for tests: no terminal, writable rootfs, args
// ["sh", "-c", "true"]. Edit b.Spec before running it.
func (r *RuncEnv) Bundle(t testing.TB, img Image) *Bundle {
	t.Helper()
	tar := img.RootfsTar(t)
	dir := filepath.Join(r.Dir, UniqueID("bundle-"))
	b := &Bundle{Dir: dir, Rootfs: filepath.Join(dir, "rootfs")}
	if err := os.MkdirAll(b.Rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Run(exec.Command("tar", "--numeric-owner", "-C", b.Rootfs, "-xf", tar)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("runc", "spec")
	cmd.Dir = dir
	if _, _, err := Run(cmd); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	b.Spec = &specs.Spec{}
	if err := json.Unmarshal(data, b.Spec); err != nil {
		t.Fatal(err)
	}
	b.Spec.Process.Terminal = false
	b.Spec.Process.Args = []string{"sh", "-c", "true"}
	b.Spec.Root.Readonly = false
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	return b
}

// Save writes b.Spec to Dir/config.json.
func (b *Bundle) Save() error {
	data, err := json.MarshalIndent(b.Spec, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.Dir, "config.json"), data, 0o644)
}

// Command returns `runc --root ROOT args...`, not started.
func (r *RuncEnv) Command(args ...string) *exec.Cmd {
	return exec.Command("runc", append([]string{"--root", r.Root}, args...)...)
}

// Run saves b.Spec, then runs `runc run --bundle DIR ID` with stdin from
// /dev/null and deletes the container afterwards. It returns the container's
// stdout and stderr.
func (r *RuncEnv) Run(b *Bundle) (stdout, stderr string, err error) {
	if err := b.Save(); err != nil {
		return "", "", err
	}
	id := UniqueID("e2e-")
	defer func() { _, _, _ = Run(r.Command("delete", "--force", id)) }()
	return Run(r.Command("run", "--bundle", b.Dir, id))
}
