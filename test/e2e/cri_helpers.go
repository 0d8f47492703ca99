package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRINamespace is the containerd namespace of the CRI plugin (kubelet's).
const CRINamespace = "k8s.io"

// CRIEnv is a CRI runtime (containerd 2.x with its CRI plugin, or CRI-O),
// spoken to as kubelet does, over the CRI gRPC API on its socket.
type CRIEnv struct {
	Runtime runtimeapi.RuntimeServiceClient
	LogDir  string // pods' log directory
	Log     string // the daemon's log, shown when a call fails
}

// NewCRIEnv connects to the CRI socket of a daemon logging to daemonLog.
func NewCRIEnv(t testing.TB, socket, daemonLog string) *CRIEnv {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &CRIEnv{Runtime: runtimeapi.NewRuntimeServiceClient(conn), LogDir: t.TempDir(), Log: daemonLog}
}

// criPluginConfig keeps what the CRI plugin needs on these machines:
// cgroupfs (no systemd), oom_score_adj within what root may set here, no
// AppArmor, CDI specs from the standard dirs, and a local sandbox image.
func criPluginConfig(sandboxImage string) string {
	return fmt.Sprintf(`
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  disable_apparmor = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
    SystemdCgroup = false

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = %q
`, sandboxImage)
}

// criCNIConfig tells the CRI plugin (containerd 2.x, config version 3)
// where the CNI plugins (binDirs) and the network configs (confDir) are.
// go-cni loads the first config in confDir (max_conf_num 1), plus a
// loopback network of its own for the pod's lo.
func criCNIConfig(binDirs []string, confDir string) string {
	q := make([]string, len(binDirs))
	for i, d := range binDirs {
		q[i] = fmt.Sprintf("%q", d)
	}
	return fmt.Sprintf(`
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = [%s]
  conf_dir = %q
`, strings.Join(q, ", "), confDir)
}

// CRIConfig is the CRI plugin's config for the CRI tests' containerd.
var CRIConfig = criPluginConfig(Pause.Ref)

// CRI returns a containerd with the CRI plugin, the bb and pause images in
// its k8s.io namespace, and a CRI runtime client.
func CRI(t testing.TB) *CRIEnv {
	t.Helper()
	e := ContainerdWith(t, ContainerdOptions{CRI: true, ExtraConfig: CRIConfig})
	if err := e.ImportImages(CRINamespace, BB.DockerArchive(t), OwnStack.DockerArchive(t), Lib64.DockerArchive(t), Pause.DockerArchive(t)); err != nil {
		t.Fatalf("images for the CRI plugin: %v", err)
	}
	return NewCRIEnv(t, e.Socket, e.Log)
}

// RunPod starts a pod sandbox in the host's network namespace (no CNI
// here) and removes it at the end of the test.
func (c *CRIEnv) RunPod(t testing.TB, name string) (string, *runtimeapi.PodSandboxConfig) {
	t.Helper()
	return c.RunPodWith(t, name, "")
}

// RunPodWith is RunPod with a runtime handler (a RuntimeClass's handler;
// "" is the default runtime).
func (c *CRIEnv) RunPodWith(t testing.TB, name, handler string) (string, *runtimeapi.PodSandboxConfig) {
	t.Helper()
	return c.RunPodAnnotated(t, name, handler, nil)
}

// RunPodAnnotated is RunPodWith with the pod's own annotations, as a pod's
// metadata.annotations reach the runtime.
func (c *CRIEnv) RunPodAnnotated(t testing.TB, name, handler string, annotations map[string]string) (string, *runtimeapi.PodSandboxConfig) {
	t.Helper()
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: UniqueID("uid-"), Namespace: "e2e"},
		LogDirectory: c.LogDir,
		Annotations:  annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			// As kubelet sends for a pod without shareProcessNamespace: CRI-O
			// then runs no infra container.
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
	defer cancel()
	resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v\ndaemon log: %s", err, TailFile(c.Log, 4000))
	}
	id := resp.PodSandboxId
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
		defer cancel()
		_, _ = c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		_, _ = c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	})
	return id, cfg
}

// RunContainer creates and starts a container in the pod, waits for it to
// exit and returns what it wrote (the CRI log with its prefixes removed)
// and its exit code.
func (c *CRIEnv) RunContainer(t testing.TB, pod string, podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) (string, int32) {
	t.Helper()
	out, code, err := c.TryRunContainer(pod, podCfg, cfg)
	if err != nil {
		t.Fatalf("%v\ndaemon log: %s", err, TailFile(c.Log, 4000))
	}
	return out, code
}

// TryRunContainer is RunContainer returning a failed create or start as an
// error, for tests that expect one.
func (c *CRIEnv) TryRunContainer(pod string, podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) (string, int32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
	defer cancel()
	cfg.LogPath = cfg.Metadata.Name + ".log"
	if cfg.Linux == nil {
		// As kubelet does: the container's namespaces are the pod's.
		cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: podCfg.GetLinux().GetSecurityContext().GetNamespaceOptions(),
		}}
	}
	created, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		return "", 0, fmt.Errorf("CreateContainer: %w", err)
	}
	id := created.ContainerId
	if _, err := c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		return "", 0, fmt.Errorf("StartContainer: %w", err)
	}
	var status *runtimeapi.ContainerStatus
	for {
		resp, err := c.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return "", 0, fmt.Errorf("ContainerStatus: %w", err)
		}
		if status = resp.Status; status.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	data, err := os.ReadFile(filepath.Join(podCfg.LogDirectory, cfg.LogPath))
	if err != nil {
		return "", 0, err
	}
	return criLogText(string(data)), status.ExitCode, nil
}

// criLogText strips the CRI log prefix ("TIMESTAMP STREAM TAG ") of each line.
func criLogText(log string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(log, "\n") {
		if f := strings.SplitN(line, " ", 4); len(f) == 4 {
			b.WriteString(f[3])
		}
	}
	return b.String()
}

// CRIImage names an image as kubelet does: CRI-O verifies signatures
// against UserSpecifiedImage and refuses a container without it.
func CRIImage(ref string) *runtimeapi.ImageSpec {
	return &runtimeapi.ImageSpec{Image: ref, UserSpecifiedImage: ref}
}
