package e2e

// CRI-O as a KubeNode's runtime (KubeOptions.Runtime "crio"), in place of
// containerd: the same node namespace, control plane and kubelet, with
// CRI-O serving the kubelet's CRI socket. What containerd's config says for
// a node, CRI-O's says too: the cgroupfs manager (the kubelet's
// cgroupDriver), runc (through test/cmd/criorunc, which does what
// containerd's restrict_oom_score_adj and disable_hugetlb_controller do,
// settings CRI-O lacks), CDI specs from the node's /etc/cdi and
// /var/run/cdi, the pod network's conflist from the node's /etc/cni/net.d
// Run with Debian's plugins, NRI at /var/run/nri/nri.sock with a pod
// network (off without), and the images KubeNode and RDMACDIImage import,
// loaded into its containers/storage (vfs, under the node's scratch dir)
// with podman, there being no registry. Everything CRI-O would keep in the host's
// /var/lib, /var/log or /etc is under the scratch dir; what a boot clears
// (its version file, runc's state, the pods' namespaces under
// /var/run/netns) is on the node's own /run.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The daemons KubeOptions.Runtime names.
const (
	runtimeContainerd = "containerd"
	RuntimeCRIO       = "crio"
)

// kubeRuntime is the daemon of KubeOptions.Runtime ("" is containerd).
func kubeRuntime(runtime string) (string, error) {
	switch runtime {
	case "", runtimeContainerd:
		return runtimeContainerd, nil
	case RuntimeCRIO:
		return RuntimeCRIO, nil
	}
	return "", fmt.Errorf("KubeOptions.Runtime %q: want \"containerd\" or \"crio\"", runtime)
}

// requireKubeRuntime skips (fails in CI) without the binaries of the
// node's runtime, and returns its daemon name.
func requireKubeRuntime(t testing.TB, runtime string) string {
	t.Helper()
	name, err := kubeRuntime(runtime)
	if err != nil {
		t.Fatal(err)
	}
	bins := []string{"containerd", "ctr", "containerd-shim-runc-v2"}
	if name == RuntimeCRIO {
		bins = []string{"crio", "pinns"}
		RequireBinary(t, "conmon")
		RequireBinary(t, "podman") // loads the images into CRI-O's storage
		if got := Binary(t, "criorunc"); got != crioRuntimePath() {
			t.Fatalf("criorunc built at %s, not %s", got, crioRuntimePath())
		}
	}
	for _, b := range bins {
		RequireFile(t, filepath.Join(EnginesBinDir(), b), "make engines-cdi")
	}
	return name
}

// crioRuntimePath is CRI-O's runc: test/cmd/criorunc, which
// requireKubeRuntime builds (Binary). It runs runc after raising a
// container's oomScoreAdj to conmon's own (root here lacks
// CAP_SYS_RESOURCE, and the kubelet asks -997 for the chart's
// node-critical agent) and dropping its hugetlb limits (the controller is
// in /proc/cgroups but mounted nowhere), as containerd's nodes are told by
// restrict_oom_score_adj and disable_hugetlb_controller.
func crioRuntimePath() string { return filepath.Join(RepoRoot(), "bin", "criorunc") }

// crioPath is a file or dir of the node's CRI-O under its scratch dir.
func (k *KubeEnv) crioPath(name string) string { return filepath.Join(k.Dir, "crio", name) }

// writeCRIOConfig writes CRI-O's config (crio/crio.conf), an empty
// drop-in dir (not the host's /etc/crio/crio.conf.d), an empty hooks dir
// (not the host's /usr/share/containers/oci/hooks.d) and the image policy.
func (k *KubeEnv) writeCRIOConfig() error {
	for _, d := range []string{"root", "runroot", "conf.d", "hooks.d", "logs", "state", "policies", "podman-tmp"} {
		if err := os.MkdirAll(k.crioPath(d), 0o755); err != nil {
			return err
		}
	}
	conmon, err := exec.LookPath("conmon")
	if err != nil {
		return err
	}
	if err := os.WriteFile(k.crioPath("policy.json"), []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), 0o644); err != nil {
		return err
	}
	// pause_command "" runs the pause image's own command (Pause traps
	// SIGTERM); CRI-O makes an infra container only for pods that share
	// their PID namespace (drop_infra_ctr, the default).
	conf := crioConf{
		Root: k.crioPath("root"), RunRoot: k.crioPath("runroot"), LogDir: k.crioPath("logs"),
		VersionFile: "/var/run/crio/version", VersionFilePersist: k.crioPath("state/version"), CleanShutdownFile: k.crioPath("state/clean.shutdown"),
		Listen: k.Socket, HooksDir: k.crioPath("hooks.d"), Pinns: filepath.Join(EnginesBinDir(), "pinns"),
		NamespacesDir: "/var/run", IRQBalanceRestoreOff: true,
		Runc: crioRuntimePath(), RuncRoot: "/run/runc", Conmon: conmon,
		PauseImage: Pause.Ref, SignaturePolicy: k.crioPath("policy.json"), SignatureDir: k.crioPath("policies"),
		NetworkDir: "/etc/cni/net.d", PluginDir: cniBinDir,
		NRI: &crioNRI{Enable: k.PodCIDR != "", Listen: nriSocket,
			PluginDir: filepath.Join(k.Dir, "nri", "plugins"), PluginConfigDir: filepath.Join(k.Dir, "nri", "conf.d")},
	}.render()
	return os.WriteFile(k.crioPath("crio.conf"), conf, 0o600)
}

// crioArgv is the node's CRI-O command line.
func (k *KubeEnv) crioArgv() []string {
	return []string{filepath.Join(EnginesBinDir(), "crio"), "--config", k.crioPath("crio.conf"),
		"--config-dir", k.crioPath("conf.d"), "--log-level", "info"}
}

// crioServes: CRI-O answers the CRI's Version on its socket.
func (k *KubeEnv) crioServes() error {
	conn, err := grpc.NewClient("unix://"+k.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
	return err
}

// crioPodman runs podman on CRI-O's storage (from the host: the storage
// is under the scratch dir, the same path in the node; containers/storage
// locks its files, so CRI-O may run meanwhile).
func (k *KubeEnv) crioPodman(args ...string) (stdout, stderr string, err error) {
	return Run(exec.Command("podman", append([]string{
		"--root", k.crioPath("root"), "--runroot", k.crioPath("runroot"), "--storage-driver", "vfs",
		"--tmpdir", k.crioPath("podman-tmp"), "--cgroup-manager", "cgroupfs", "--events-backend", "none",
	}, args...)...))
}

// crioLoad loads a docker-archive (or OCI) tar into CRI-O's storage under
// the names it carries.
func (k *KubeEnv) crioLoad(archive string) error {
	if _, se, err := k.crioPodman("load", "--quiet", "--input", archive); err != nil {
		return fmt.Errorf("podman load %s into CRI-O's storage: %w\n%s", archive, err, se)
	}
	return nil
}

// crioImageRefs are the references of the images in CRI-O's storage, one
// a line.
func (k *KubeEnv) crioImageRefs() (string, error) {
	out, se, err := k.crioPodman("images", "--format", "{{.Repository}}:{{.Tag}}")
	if err != nil {
		return "", fmt.Errorf("podman images in CRI-O's storage: %w\n%s", err, se)
	}
	return strings.TrimSpace(out), nil
}

// crioTag gives an image of CRI-O's storage a second reference.
func (k *KubeEnv) crioTag(ref, newRef string) error {
	if _, se, err := k.crioPodman("tag", ref, newRef); err != nil {
		return fmt.Errorf("podman tag %s %s in CRI-O's storage: %w\n%s", ref, newRef, err, se)
	}
	return nil
}

// runtimeVersionScheme is how the Node's containerRuntimeVersion begins
// with each runtime.
var runtimeVersionScheme = map[string]string{runtimeContainerd: "containerd://", RuntimeCRIO: "cri-o://"}

// CheckNodeRuntime checks that the kubelet reports k.Runtime as the node's runtime.
func CheckNodeRuntime(t testing.TB, k *KubeEnv) {
	t.Helper()
	got := k.MustKubectl(t, "get", "node", k.NodeName, "-o", "jsonpath={.status.nodeInfo.containerRuntimeVersion}")
	if !strings.HasPrefix(got, runtimeVersionScheme[k.Runtime]) {
		t.Fatalf("node %s runs %q, want %s", k.NodeName, got, k.Runtime)
	}
	t.Logf("node %s runs %s", k.NodeName, got)
}
