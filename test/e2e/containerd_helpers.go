package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// enginesDir is where the Makefile builds and caches engines, by version.
func enginesDir() string { return fixture.EnginesDir() }

// userCacheDir is where the Makefile caches engines and images by default:
// $XDG_CACHE_HOME, else ~/.cache.
func userCacheDir() string {
	if cache, err := os.UserCacheDir(); err == nil {
		return cache
	}
	return filepath.Join(os.Getenv("HOME"), ".cache")
}

// EnginesBinDir returns the directory where `make engines-cdi` puts
// containerd, ctr, containerd-shim-runc-v2 and dockerd (Docker 29).
func EnginesBinDir() string { return filepath.Join(enginesDir(), "bin") }

// envOr is $name, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// ContainerdNamespace is the containerd namespace the helpers use.
const ContainerdNamespace = "e2e"

// ContainerdOptions tune a containerd started by ContainerdWith.
type ContainerdOptions struct {
	// CRI keeps the CRI plugins (off by default: they are slow to start and
	// want CNI).
	CRI bool
	// NRI keeps the NRI plugin (off by default: its socket,
	// /var/run/nri/nri.sock, is shared by every containerd of the host).
	NRI bool
	// ExtraConfig is TOML appended to the generated config (version 3).
	ExtraConfig string
}

// ContainerdEnv is a containerd 2.x with private root, state and sockets.
// BB and Glibc are imported into namespace ContainerdNamespace.
type ContainerdEnv struct {
	daemonFiles        // Socket: the gRPC socket (ctr -a)
	Config      string // config.toml
	BinDir      string // containerd, ctr and the shim
	Options     ContainerdOptions
}

// Containerd returns a containerd 2.x built by `make engines-cdi`, with CRI
// and NRI off. CDI is always on in containerd 2.x; `ctr run --device
// VENDOR/CLASS=NAME` resolves it on the client side from /etc/cdi and
// /var/run/cdi.
func Containerd(t testing.TB) *ContainerdEnv {
	t.Helper()
	return ContainerdWith(t, ContainerdOptions{})
}

// ContainerdWith is Containerd with options. Daemons are shared by the tests
// of a binary (under Main) that pass the same options.
func ContainerdWith(t testing.TB, opts ContainerdOptions) *ContainerdEnv {
	t.Helper()
	RequireRoot(t)
	RequireBinary(t, "runc")
	bin := EnginesBinDir()
	for _, b := range []string{"containerd", "ctr", "containerd-shim-runc-v2"} {
		RequireFile(t, filepath.Join(bin, b), "make engines-cdi")
	}
	images := []string{BB.DockerArchive(t), Glibc.DockerArchive(t), OwnStack.DockerArchive(t)}
	key := fmt.Sprintf("containerd\x00%v\x00%v\x00%s", opts.CRI, opts.NRI, opts.ExtraConfig)
	return GetShared(t, key, func(c Cleaner) (*ContainerdEnv, error) {
		return startContainerd(c, bin, opts, images)
	})
}

func startContainerd(c Cleaner, bin string, opts ContainerdOptions, images []string) (*ContainerdEnv, error) {
	files, err := newDaemonFiles(c, "containerd", "containerd")
	if err != nil {
		return nil, err
	}
	dir := files.Dir
	e := &ContainerdEnv{daemonFiles: files, Config: filepath.Join(dir, "config.toml"), BinDir: bin, Options: opts}
	var disabled []string
	if !opts.CRI {
		disabled = append(disabled, `"io.containerd.grpc.v1.cri"`, `"io.containerd.cri.v1.runtime"`, `"io.containerd.cri.v1.images"`)
	}
	if !opts.NRI {
		disabled = append(disabled, `"io.containerd.nri.v1.nri"`)
	}
	conf := containerdConfig(filepath.Join(dir, "root"), filepath.Join(dir, "state"), e.Socket, disabled, opts.ExtraConfig)
	if err := os.WriteFile(e.Config, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(bin, "containerd"), "--config", e.Config)
	cmd.Env = e.env()
	err = startDaemon(c, daemon{
		name: "containerd", cmd: cmd, log: e.Log, stopTimeout: 20 * time.Second,
		beforeStop: e.removeContainers,
		ready:      func() error { _, _, err := e.Ctr("version"); return err },
	})
	if err != nil {
		return nil, err
	}
	if err := e.ImportImages(ContainerdNamespace, images...); err != nil {
		return nil, err
	}
	return e, nil
}

// containerdConfig is a containerd 2.x config (version 3) with its own
// root, state and sockets, the plugins named disabled (quoted), no debug
// or metrics listener, and extra appended (plugin sections).
func containerdConfig(root, state, socket string, disabled []string, extra string) string {
	return fmt.Sprintf(`version = 3
root = %q
state = %q
disabled_plugins = [%s]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""
%s
`, root, state, strings.Join(disabled, ", "), socket, socket+".ttrpc", extra)
}

// ImportImages imports docker-archive tars into a containerd namespace
// (ContainerdNamespace for ctr, k8s.io for the CRI plugin).
func (e *ContainerdEnv) ImportImages(namespace string, archives ...string) error {
	for _, img := range archives {
		if _, se, err := Run(e.ctrCommandIn(namespace, "images", "import", "--all-platforms", img)); err != nil {
			return fmt.Errorf("import %s into namespace %s: %w\n%s", img, namespace, err, se)
		}
	}
	return nil
}

// env puts the engines' bin dir first in PATH (containerd finds the shim, the
// shim finds runc in /usr/bin).
func (e *ContainerdEnv) env() []string {
	return append(os.Environ(), "PATH="+e.BinDir+":"+os.Getenv("PATH"))
}

// removeContainers kills tasks and deletes containers left in the namespace.
func (e *ContainerdEnv) removeContainers() {
	out, _, err := e.Ctr("containers", "list", "--quiet")
	if err != nil {
		return
	}
	for _, id := range strings.Fields(out) {
		_, _, _ = e.Ctr("tasks", "kill", "--signal", "SIGKILL", id)
		_, _, _ = e.Ctr("tasks", "delete", "--force", id)
		_, _, _ = e.Ctr("containers", "delete", id)
	}
}

// CtrCommand returns `ctr --address SOCK --namespace e2e args...`, not started.
func (e *ContainerdEnv) CtrCommand(args ...string) *exec.Cmd {
	return e.ctrCommandIn(ContainerdNamespace, args...)
}

func (e *ContainerdEnv) ctrCommandIn(namespace string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(e.BinDir, "ctr"),
		append([]string{"--address", e.Socket, "--namespace", namespace}, args...)...)
	cmd.Env = e.env()
	return cmd
}

// Ctr runs `ctr args...` against this containerd.
func (e *ContainerdEnv) Ctr(args ...string) (stdout, stderr string, err error) {
	return Run(e.CtrCommand(args...))
}

// Run runs `ctr run --rm args...`; args hold flags, then IMAGE ID [CMD...],
// e.g. Run("--device", vendor+"/hca=mlx5_0", e2e.BB.Ref, e2e.UniqueID("c-"), "ls", "/dev").
func (e *ContainerdEnv) Run(args ...string) (stdout, stderr string, err error) {
	return e.Ctr(append([]string{"run", "--rm"}, args...)...)
}
