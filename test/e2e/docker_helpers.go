package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Docker 20.10 from Debian (docker.io). It has no CDI; a runtime wrapper given
// with --add-runtime is how rdma-cdi reaches it.
const (
	docker20Daemon = "/usr/sbin/dockerd"
	docker20Client = "/usr/bin/docker" // not /usr/local/bin/docker: that is a newer client
)

// DockerEnv is a dockerd with private data root, exec root, socket and
// config, no bridge and no iptables. BB and Glibc are loaded into it.
type DockerEnv struct {
	daemonFiles
	Client string // docker client binary
}

// Docker20 returns a Docker 20.10 daemon started with extraDaemonArgs, e.g.
// "--add-runtime", "rdma=/abs/wrapper". Daemons are shared by the tests of a
// binary (under Main) that pass the same arguments.
func Docker20(t testing.TB, extraDaemonArgs ...string) *DockerEnv {
	t.Helper()
	RequireRoot(t)
	RequireBinary(t, "runc")
	RequireBinary(t, "containerd") // dockerd 20.10 starts its own from PATH
	RequireFile(t, docker20Daemon, "make deps")
	RequireFile(t, docker20Client, "make deps")
	images := []string{BB.DockerArchive(t), Glibc.DockerArchive(t)}
	key := "docker20\x00" + strings.Join(extraDaemonArgs, "\x00")
	return GetShared(t, key, func(c Cleaner) (*DockerEnv, error) {
		return startDockerd(c, docker20Daemon, docker20Client, nil, extraDaemonArgs, images)
	})
}

func startDockerd(c Cleaner, daemonPath, client string, env, extra, images []string) (*DockerEnv, error) {
	files, err := newDaemonFiles(c, "docker", "dockerd")
	if err != nil {
		return nil, err
	}
	dir := files.Dir
	d := &DockerEnv{daemonFiles: files, Client: client}
	if err := os.WriteFile(filepath.Join(dir, "daemon.json"), []byte("{}\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "client"), 0o755); err != nil {
		return nil, err
	}
	args := append([]string{
		"--config-file", filepath.Join(dir, "daemon.json"),
		"--iptables=false", "--ip6tables=false", "--bridge=none",
		"--storage-driver=overlay2",
		"--data-root", filepath.Join(dir, "data"),
		"--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "dockerd.pid"),
		"-H", "unix://" + d.Socket,
	}, extra...)
	cmd := exec.Command(daemonPath, args...)
	cmd.Env = append(os.Environ(), env...)
	err = startDaemon(c, daemon{
		name: "dockerd", cmd: cmd, log: d.Log, stopTimeout: 30 * time.Second,
		// Removing containers first lets the daemon (and its containerd) stop quickly.
		beforeStop: func() {
			if ids, _, err := Run(d.Command("ps", "--all", "--quiet")); err == nil && strings.TrimSpace(ids) != "" {
				_, _, _ = Run(d.Command(append([]string{"rm", "--force", "--volumes"}, strings.Fields(ids)...)...))
			}
		},
		ready: func() error { _, _, err := Run(d.Command("version")); return err },
	})
	if err != nil {
		return nil, err
	}
	for _, img := range images {
		if _, _, err := Run(d.Command("load", "--quiet", "--input", img)); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Command returns `docker -H unix://SOCKET args...`, not started.
func (d *DockerEnv) Command(args ...string) *exec.Cmd {
	cmd := exec.Command(d.Client, append([]string{"-H", "unix://" + d.Socket}, args...)...)
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+filepath.Join(d.Dir, "client"))
	return cmd
}

// Docker runs `docker args...` against this daemon.
func (d *DockerEnv) Docker(args ...string) (stdout, stderr string, err error) {
	return Run(d.Command(args...))
}

// Run runs `docker run --rm args...`, with --network none unless args choose
// a network, e.g. Run("--runtime", "rdma", e2e.BB.Ref, "echo", "ok").
func (d *DockerEnv) Run(args ...string) (stdout, stderr string, err error) {
	full := []string{"run", "--rm"}
	if !hasNetworkFlag(args) {
		full = append(full, "--network", "none")
	}
	return Run(d.Command(append(full, args...)...))
}

// hasNetworkFlag reports whether args set --network/--net before the image.
func hasNetworkFlag(args []string) bool {
	for _, a := range args {
		if a == "--network" || a == "--net" || strings.HasPrefix(a, "--network=") || strings.HasPrefix(a, "--net=") {
			return true
		}
	}
	return false
}

// TailFile returns the last n bytes of a file, for error messages.
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Docker29 returns a Docker 29 daemon (dockerd of `make engines-cdi`) with CDI
// on, reading specs from /etc/cdi and /var/run/cdi, running on a containerd
// 2.x of its own (Containerd). Time namespaces are off: runc 1.1.5 predates
// them. The daemon accepts API versions from 1.24, so the 20.10 client works
// for everything but CDI; `docker run --device VENDOR/CLASS=NAME` needs a
// client that knows CDI: the helper uses EnginesBinDir()/docker when present.
func Docker29(t testing.TB, extraDaemonArgs ...string) *DockerEnv {
	t.Helper()
	RequireRoot(t)
	RequireBinary(t, "runc")
	daemon := RequireFile(t, filepath.Join(EnginesBinDir(), "dockerd"), "make engines-cdi")
	client := filepath.Join(EnginesBinDir(), "docker")
	if _, err := os.Stat(client); err != nil {
		client = RequireFile(t, docker20Client, "make deps")
	}
	ctrd := Containerd(t)
	images := []string{BB.DockerArchive(t), Glibc.DockerArchive(t), OwnStack.DockerArchive(t)}
	key := "docker29\x00" + ctrd.Socket + "\x00" + strings.Join(extraDaemonArgs, "\x00")
	return GetShared(t, key, func(c Cleaner) (*DockerEnv, error) {
		args := append([]string{
			"--containerd", ctrd.Socket,
			"--feature", "cdi=true",
			"--feature", "time-namespaces=false",
			"--cdi-spec-dir", "/etc/cdi",
			"--cdi-spec-dir", CDIDir,
		}, extraDaemonArgs...)
		env := []string{"DOCKER_MIN_API_VERSION=1.24", "PATH=" + ctrd.BinDir + ":" + os.Getenv("PATH")}
		return startDockerd(c, daemon, client, env, args, images)
	})
}
