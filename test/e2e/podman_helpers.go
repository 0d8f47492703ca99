package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// PodmanEnv is an isolated podman 4.3 setup: its own containers.conf,
// storage.conf, storage root, run root and tmp dir, with runc and the
// cgroupfs manager (crun fails on these hosts), default ulimits nofile and
// nproc 1024:1024, network "none" by default, and an empty hooks dir unless
// WithHooksDir says otherwise. BB and Glibc are imported into its storage.
type PodmanEnv struct {
	Dir         string // scratch root of this setup
	Root        string // --root (graph root)
	RunRoot     string // --runroot
	ConfPath    string // CONTAINERS_CONF
	StoragePath string // CONTAINERS_STORAGE_CONF
	HooksDir    string // --hooks-dir; the only hooks dir podman reads
}

// Podman returns the podman setup of this test binary (of this test without
// Main), making it on first use. Needs root, podman and runc.
func Podman(t testing.TB) *PodmanEnv {
	t.Helper()
	RequireRoot(t)
	RequireBinary(t, "podman")
	RequireBinary(t, "runc")
	tars := map[string]string{BB.Ref: BB.RootfsTar(t), Glibc.Ref: Glibc.RootfsTar(t)}
	return GetShared(t, "podman", func(c Cleaner) (*PodmanEnv, error) {
		return newPodman(c, tars)
	})
}

// Import adds more images (rootfs tars of `make images`) to the
// environment's storage, once each.
func (p *PodmanEnv) Import(t testing.TB, images ...Image) {
	t.Helper()
	for _, img := range images {
		if _, _, err := Run(p.Command("image", "exists", img.Ref)); err == nil {
			continue
		}
		if err := p.importTar(img.RootfsTar(t), img.Ref); err != nil {
			t.Fatal(err)
		}
	}
}

func (p *PodmanEnv) importTar(tar, ref string) error {
	_, _, err := Run(p.Command("import", "--quiet", "--change", `CMD ["/bin/sh"]`, tar, ref))
	return err
}

func newPodman(c Cleaner, tars map[string]string) (*PodmanEnv, error) {
	dir, err := ScratchDir(c, "podman")
	if err != nil {
		return nil, err
	}
	p := &PodmanEnv{
		Dir:         dir,
		Root:        filepath.Join(dir, "root"),
		RunRoot:     filepath.Join(dir, "runroot"),
		ConfPath:    filepath.Join(dir, "containers.conf"),
		StoragePath: filepath.Join(dir, "storage.conf"),
		HooksDir:    filepath.Join(dir, "hooks.d"),
	}
	for _, d := range []string{p.Root, p.RunRoot, p.HooksDir, filepath.Join(dir, "tmp"), filepath.Join(dir, "volumes")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	conf := fmt.Sprintf(`[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "none"
log_driver = "k8s-file"

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
events_logfile_path = %q
hooks_dir = [%q]
tmp_dir = %q
volume_path = %q
`, filepath.Join(dir, "events.log"), p.HooksDir, filepath.Join(dir, "tmp"), filepath.Join(dir, "volumes"))
	storage := fmt.Sprintf(`[storage]
driver = "overlay"
graphroot = %q
runroot = %q
`, p.Root, p.RunRoot)
	if err := os.WriteFile(p.ConfPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.StoragePath, []byte(storage), 0o644); err != nil {
		return nil, err
	}
	// Stop whatever containers are left, then unmount storage.
	c.Cleanup(func() {
		_, _, _ = Run(p.Command("rm", "--all", "--force", "--time", "0"))
		_, _, _ = Run(p.Command("system", "reset", "--force"))
	})
	for ref, tar := range tars {
		if err := p.importTar(tar, ref); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// WithHooksDir returns a copy of p whose commands pass --hooks-dir dir, so
// podman reads OCI hooks (hooks.d JSON files) from dir only.
func (p *PodmanEnv) WithHooksDir(dir string) *PodmanEnv {
	q := *p
	q.HooksDir = dir
	return &q
}

// Command returns `podman <isolation flags> args...`, not started.
func (p *PodmanEnv) Command(args ...string) *exec.Cmd {
	full := append([]string{
		"--root", p.Root,
		"--runroot", p.RunRoot,
		"--storage-driver", "overlay",
		"--cgroup-manager", "cgroupfs",
		"--runtime", "runc",
		"--events-backend", "file",
		"--tmpdir", filepath.Join(p.Dir, "tmp"),
		"--hooks-dir", p.HooksDir,
	}, args...)
	cmd := exec.Command("podman", full...)
	cmd.Env = append(os.Environ(),
		"CONTAINERS_CONF="+p.ConfPath,
		"CONTAINERS_STORAGE_CONF="+p.StoragePath,
	)
	return cmd
}

// Podman runs `podman args...` in this setup.
func (p *PodmanEnv) Podman(args ...string) (stdout, stderr string, err error) {
	return Run(p.Command(args...))
}

// Run runs `podman run --rm args...`, e.g.
// Run("--device", vendor+"/hca=mlx5_0", e2e.BB.Ref, "ls", "/dev/infiniband").
// On a CDI error, add "--log-level=debug" before "run" via Podman to see the
// real cause.
func (p *PodmanEnv) Run(args ...string) (stdout, stderr string, err error) {
	return Run(p.Command(append([]string{"run", "--rm"}, args...)...))
}
