package e2e

// The node agent installed as operators do: `helm install` of
// deploy/helm/rdma-cdi with the image `make image` built.
//
//	k.InstallAgent(t, "dra", nil)                     // release rdma-cdi, namespace rdma-cdi
//	k.HelmInstall(t, "r2", "ns2", AgentValues(img, "device-plugin", nil))

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"net/http"

	"go.yaml.in/yaml/v3"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
	"k8s.io/client-go/transport"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	// AgentRelease and AgentNamespace are the release InstallAgent makes.
	AgentRelease   = "rdma-cdi"
	AgentNamespace = "rdma-cdi"
	// AgentSelector matches the agent's pods of every release.
	AgentSelector = "app.kubernetes.io/name=rdma-cdi"
)

// ChartDir is the shipped chart.
func ChartDir() string { return filepath.Join(RepoRoot(), "deploy", "helm", "rdma-cdi") }

// RequireHelm returns the helm `make k8s` built (skips, or fails in CI,
// without it).
func RequireHelm(t testing.TB) string {
	t.Helper()
	return RequireFile(t, HelmBinary(), "make k8s")
}

// HelmEnv keeps helm's caches and config under dir, so nothing lands in
// the host's home.
func HelmEnv(dir string) []string {
	return append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(dir, "helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(dir, "helm", "config"),
		"HELM_DATA_HOME="+filepath.Join(dir, "helm", "data"))
}

// Helm runs helm against the node's API server (in its network namespace).
func (k *KubeEnv) Helm(args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command("nsenter", append([]string{"--target", strconv.Itoa(k.pid), "--net", "--",
		HelmBinary(), "--kubeconfig", k.Kubeconfig}, args...)...)
	cmd.Env = HelmEnv(k.Dir)
	return Run(cmd)
}

// MustHelm is Helm failing the test on error.
func (k *KubeEnv) MustHelm(t testing.TB, args ...string) string {
	t.Helper()
	out, se, err := k.Helm(args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, se)
	}
	return out
}

// AgentValues are the chart's values for image ref in mode, with more
// values (nested maps) merged over them.
func AgentValues(ref, mode string, more map[string]any) map[string]any {
	repo, tag := ref, "latest"
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo, tag = ref[:i], ref[i+1:]
	}
	v := map[string]any{"mode": mode, "image": map[string]any{"repository": repo, "tag": tag}}
	for key, val := range more {
		v[key] = val
	}
	return v
}

// valuesFile writes values as YAML under the node's scratch dir.
func (k *KubeEnv) valuesFile(t testing.TB, values map[string]any) string {
	t.Helper()
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(k.Dir, "values-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// HelmInstall installs the chart as release in ns with values, and
// uninstalls it (waiting for its objects to go) at the end of the test.
func (k *KubeEnv) HelmInstall(t testing.TB, release, ns string, values map[string]any) {
	t.Helper()
	RequireHelm(t)
	k.MustHelm(t, "install", release, ChartDir(), "--namespace", ns, "--create-namespace", "--values", k.valuesFile(t, values))
	t.Cleanup(func() {
		k.HelmUninstall(t, release, ns)
		k.deleteDriverSlices(t)
	})
}

// deleteDriverSlices deletes the node's ResourceSlices of our driver once
// its release is gone, as the kubelet does 30 s after a driver
// unregisters: a slice the driver left with a taint (a grey condition not
// yet quiet long enough to clear) would hold the next test's leftover
// check for those 30 s.
func (k *KubeEnv) deleteDriverSlices(t testing.TB) {
	t.Helper()
	if _, se, err := k.Kubectl("delete", "resourceslices", "--field-selector", "spec.nodeName="+k.NodeName+",spec.driver="+apis.Group, "--ignore-not-found"); err != nil {
		t.Errorf("deleting %s's ResourceSlices: %v\n%s", k.NodeName, err, se)
	}
}

// HelmUpgrade upgrades release to values.
func (k *KubeEnv) HelmUpgrade(t testing.TB, release, ns string, values map[string]any) {
	t.Helper()
	k.MustHelm(t, "upgrade", release, ChartDir(), "--namespace", ns, "--values", k.valuesFile(t, values))
}

// HelmUninstall removes release and waits until its pods are gone; a
// release already gone is no error.
func (k *KubeEnv) HelmUninstall(t testing.TB, release, ns string) {
	t.Helper()
	if _, se, err := k.Helm("uninstall", release, "--namespace", ns, "--ignore-not-found", "--wait", "--timeout", "2m"); err != nil {
		t.Errorf("helm uninstall %s: %v\n%s", release, err, se)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for len(k.PodNames(t, ns, "app.kubernetes.io/instance="+release)) > 0 {
		if time.Now().After(deadline) {
			t.Errorf("pods of release %s still there 2 minutes after helm uninstall", release)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// InstallAgent installs the agent in mode ("cdi", "device-plugin", "dra")
// as release AgentRelease with the current image, and waits for its pod to
// be Ready; it returns the pod's name.
func (k *KubeEnv) InstallAgent(t testing.TB, mode string, more map[string]any) string {
	t.Helper()
	k.HelmInstall(t, AgentRelease, AgentNamespace, AgentValues(k.RDMACDIImage(t), mode, more))
	return k.WaitPodsOf(t, AgentNamespace, "app.kubernetes.io/instance="+AgentRelease, "Ready", 3*time.Minute)
}

// ChartModes are the agent's modes the chart deploys.
var ChartModes = []string{"cdi", "device-plugin", "dra"}

// HelmTemplate renders the chart with values (in namespace rdma-cdi).
func HelmTemplate(t *testing.T, values map[string]any) (string, error) {
	t.Helper()
	RequireHelm(t)
	dir := t.TempDir()
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	vf := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(vf, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(HelmBinary(), "template", "r", ChartDir(), "--namespace", AgentNamespace, "--values", vf)
	cmd.Env = HelmEnv(dir)
	out, se, err := Run(cmd)
	if err != nil {
		return "", errors.New(se)
	}
	return out, nil
}

// RenderedDocs are the documents of a rendering, by kind.
func RenderedDocs(t *testing.T, manifest string) map[string][]map[string]any {
	t.Helper()
	docs := map[string][]map[string]any{}
	dec := yaml.NewDecoder(strings.NewReader(manifest))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("rendered chart: %v\n%s", err, manifest)
		}
		if doc != nil {
			docs[doc["kind"].(string)] = append(docs[doc["kind"].(string)], doc)
		}
	}
}

// ShippedManifest is the file at path in the repository, as shipped.
func ShippedManifest(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(RepoRoot(), path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// AgentLogTail is the end of the logs of the agents' pods, for a failure.
func AgentLogTail(t testing.TB, k *KubeEnv) string {
	var b strings.Builder
	for _, pod := range k.PodNames(t, AgentNamespace, "") {
		for _, mode := range []string{"dra", "device-plugin", "cdi"} {
			if _, err := k.CRIContainer(AgentNamespace, pod, mode); err == nil {
				log := k.Logs(AgentNamespace, pod, mode)
				fmt.Fprintf(&b, "--- agent %s (%s):\n%s\n", pod, mode, log[max(0, len(log)-3000):])
			}
		}
	}
	return b.String()
}

// The device plugin's resources in the chart's default config: the
// shared one and the exclusive one.
const (
	SharedResource    = "rdma/hca"
	ExclusiveResource = "rdma.example.com/hca"
)

// AgentRestarts is the agent pod's name and its container's restart count.
func AgentRestarts(t *testing.T, k *KubeEnv) (string, int) {
	t.Helper()
	pod, _, restarts := agentContainer(t, k)
	return pod, restarts
}

// agentContainer is the agent's pod, its agent container (the chart's
// first, named after the mode; with pod networking a pod-network worker
// runs beside it) and that container's restart count.
func agentContainer(t *testing.T, k *KubeEnv) (pod, container string, restarts int) {
	t.Helper()
	pods := k.PodNames(t, AgentNamespace, AgentSelector)
	if len(pods) != 1 {
		t.Fatalf("agent pods %v, want one", pods)
	}
	p, err := k.GetPod(AgentNamespace, pods[0])
	if err != nil || len(p.Spec.Containers) == 0 {
		t.Fatalf("agent pod %s: %+v %v", pods[0], p, err)
	}
	container = p.Spec.Containers[0].Name
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container {
			return pods[0], container, s.RestartCount
		}
	}
	t.Fatalf("agent pod %s: no status for its container %s", pods[0], container)
	return "", "", 0
}

// KillAgent kills the agent's process with SIGKILL, as the kernel's OOM
// killer or a crash would: no graceful shutdown, no deferred cleanup. The
// kubelet restarts the container in the same pod; KillAgent returns once
// the restarted one is Ready.
func KillAgent(t *testing.T, k *KubeEnv) {
	t.Helper()
	pod, container, before := agentContainer(t, k)
	c, err := k.CRIContainer(AgentNamespace, pod, container)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
	defer cancel()
	st, err := k.CRI.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id, Verbose: true})
	if err != nil {
		t.Fatalf("agent container %s: %v", c.Id, err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid <= 1 {
		t.Fatalf("agent container %s: no process id in its status (%v): %s", c.Id, err, st.Info["info"])
	}
	if err := syscall.Kill(info.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL agent process %d: %v", info.Pid, err)
	}
	if err := WaitFor(context.Background(), 3*time.Minute, func() error {
		if _, n := AgentRestarts(t, k); n != before+1 {
			return fmt.Errorf("agent pod %s restarted %d times since the kill, want once", pod, n-before)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	k.WaitPod(t, AgentNamespace, pod, "Ready", 3*time.Minute)
}

// SetAgentEnv sets (value != "") or removes an environment variable of the
// agent's DaemonSet and waits for the rolled pod.
func SetAgentEnv(t *testing.T, k *KubeEnv, name, value string) {
	t.Helper()
	arg := name + "-"
	if value != "" {
		arg = name + "=" + value
	}
	old, _ := AgentRestarts(t, k)
	k.MustKubectl(t, "set", "env", "daemonset/"+AgentRelease, "-n", AgentNamespace, arg)
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		pods := k.PodNames(t, AgentNamespace, AgentSelector)
		if len(pods) == 1 && pods[0] != old {
			k.WaitPod(t, AgentNamespace, pods[0], "Ready", 2*time.Minute)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not roll after setting %s: pods %v", arg, pods)
		}
	}
}

// AgentScrape reads the node agent's /metrics (127.0.0.1:9477 in the node's
// network namespace, where the chart's agent listens) as an authorized
// scraper.
func AgentScrape(t *testing.T, k *KubeEnv) []metrics.Sample {
	t.Helper()
	rt := transport.NewBearerAuthRoundTripper(k.MetricsToken(t), &http.Transport{DialContext: k.DialContext})
	return ScrapeWith(t, &http.Client{Timeout: 10 * time.Second, Transport: rt}, "http://127.0.0.1:9477/metrics")
}

// AgentKeeper records the agent's pod and restart count; the function it
// returns fails the test (and says false) when either has changed since.
func AgentKeeper(t *testing.T, k *KubeEnv) (kept func(during string) bool) {
	t.Helper()
	agent, restarts := AgentRestarts(t, k)
	return func(during string) bool {
		t.Helper()
		if now, n := AgentRestarts(t, k); now != agent || n != restarts {
			t.Errorf("the agent restarted %s: pod %s (was %s), restarts %d (were %d)", during, now, agent, n, restarts)
			return false
		}
		return true
	}
}
