package e2e

// What a test asks of a running KubeNode, as kubectl and the kubelet's
// CRI would answer it: apply and delete manifests, pods and their
// conditions, exec and logs through CRI, the node's allocatable resources.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Kubectl runs the built kubectl as cluster admin (in the node's network
// namespace, where the API server listens).
func (k *KubeEnv) Kubectl(args ...string) (stdout, stderr string, err error) {
	return Run(k.KubectlCmd(nil, args...))
}

// KubectlCmd is kubectl with the node's admin kubeconfig, in the node's
// namespaces, reading stdin when it is not nil.
func (k *KubeEnv) KubectlCmd(stdin []byte, args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"--target", strconv.Itoa(k.pid), "--net", "--",
		filepath.Join(k.BinDir, "kubectl"), "--kubeconfig", k.Kubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	return cmd
}

// MustKubectl is Kubectl failing the test on error.
func (k *KubeEnv) MustKubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, _, err := k.Kubectl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Apply runs `kubectl apply -f -` with manifest, and at the end of the test
// deletes what it made (foreground: a DaemonSet's pods are gone before the
// next test on the shared node). It retries while a new namespace has no
// default ServiceAccount yet.
func (k *KubeEnv) Apply(t testing.TB, manifest string) {
	t.Helper()
	var err error
	var se string
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, se, err = Run(k.KubectlCmd([]byte(manifest), "apply", "-f", "-"))
		if err == nil || !strings.Contains(se, "serviceaccount") || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("kubectl apply: %v\nmanifest:\n%s", err, manifest)
	}
	t.Cleanup(func() { k.Delete(t, manifest) })
}

// Delete runs `kubectl delete -f -` with manifest and waits (foreground
// cascade) until its objects and their dependents are gone.
func (k *KubeEnv) Delete(t testing.TB, manifest string) {
	t.Helper()
	if _, _, err := Run(k.KubectlCmd([]byte(manifest), "delete", "-f", "-", "--ignore-not-found",
		"--cascade=foreground", "--wait=true", "--timeout=120s")); err != nil {
		t.Errorf("kubectl delete: %v", err)
	}
}

// Pod is what the helpers read of a pod.
type Pod struct {
	Metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		NodeName   string `json:"nodeName"`
		Containers []struct {
			Name string `json:"name"`
		} `json:"containers"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase"`
		Reason     string `json:"reason"`
		Message    string `json:"message"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
		ContainerStatuses []struct {
			Name         string          `json:"name"`
			Ready        bool            `json:"ready"`
			RestartCount int             `json:"restartCount"`
			State        json.RawMessage `json:"state"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

// GetPod returns the pod, or an error when it does not exist.
func (k *KubeEnv) GetPod(ns, name string) (*Pod, error) {
	out, err := k.GetJSON("/api/v1/namespaces/" + ns + "/pods/" + name)
	if err != nil {
		return nil, err
	}
	var p Pod
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// PodNames lists the pods of namespace ns matching a label selector ("" for all).
func (k *KubeEnv) PodNames(t testing.TB, ns, selector string) []string {
	t.Helper()
	out, err := k.GetJSON("/api/v1/namespaces/"+ns+"/pods", "labelSelector", selector)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("pods of %s: %v", ns, err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Metadata.Name)
	}
	return names
}

// WaitPod waits until pod ns/name has phase cond (Running, Succeeded,
// Failed, Pending) or condition cond is True (Ready, PodScheduled,
// Initialized, ContainersReady). It fails the test with the pod's
// description, events and the kubelet's log when the time runs out, or at
// once when the pod ended in a phase that cannot reach cond.
func (k *KubeEnv) WaitPod(t testing.TB, ns, name, cond string, timeout time.Duration) *Pod {
	t.Helper()
	var last *Pod
	var lastErr error
	deadline := time.Now().Add(timeout)
	for {
		p, err := k.GetPod(ns, name)
		last, lastErr = p, err
		if err == nil {
			if p.Status.Phase == cond {
				return p
			}
			for _, c := range p.Status.Conditions {
				if c.Type == cond && c.Status == "True" {
					return p
				}
			}
			if (p.Status.Phase == "Failed" || p.Status.Phase == "Succeeded") && cond != "Failed" && cond != "Succeeded" {
				break
			}
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	phase := ""
	if last != nil {
		phase = last.Status.Phase
	}
	t.Fatalf("pod %s/%s: not %s after %v (phase %q, last error %v)\n%s", ns, name, cond, timeout, phase, lastErr, k.Diagnose(ns, name))
	return nil
}

// WaitPodsOf waits for the first pod matching selector in ns, then for cond
// (as WaitPod), and returns its name.
func (k *KubeEnv) WaitPodsOf(t testing.TB, ns, selector, cond string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var names []string
	for {
		names = k.PodNames(t, ns, selector)
		if len(names) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if len(names) == 0 {
		out, _, _ := k.Kubectl("get", "all,events", "-n", ns, "-o", "wide")
		t.Fatalf("no pod %q in namespace %s after %v:\n%s\n%s", selector, ns, timeout, out, k.logTails(3000))
	}
	k.WaitPod(t, ns, names[0], cond, time.Until(deadline))
	return names[0]
}

// Describe returns `kubectl describe KIND NAME -n NS` (or the error).
func (k *KubeEnv) Describe(ns, kind, name string) string {
	out, se, err := k.Kubectl("describe", kind, name, "-n", ns)
	if err != nil {
		return fmt.Sprintf("kubectl describe %s %s: %v\n%s", kind, name, err, se)
	}
	return out
}

// PodEvents returns the events of pod ns/name.
func (k *KubeEnv) PodEvents(ns, name string) string {
	out, se, err := k.Kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.name="+name)
	if err != nil {
		return fmt.Sprintf("kubectl get events: %v\n%s", err, se)
	}
	return out
}

// Diagnose is what a failing test should show about pod ns/name: its
// description, the container logs (CRI) and the ends of the kubelet's and
// the runtime's logs.
func (k *KubeEnv) Diagnose(ns, name string) string {
	var b strings.Builder
	b.WriteString(k.Describe(ns, "pod", name))
	if p, err := k.GetPod(ns, name); err == nil {
		for _, c := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "---- container %s log:\n%s\n", c.Name, k.Logs(ns, name, c.Name))
		}
	}
	for _, d := range []string{"kubelet", k.Runtime} {
		fmt.Fprintf(&b, "---- %s log:\n%s\n", d, TailFile(k.procs[d].Log, 4000))
	}
	return b.String()
}

// CRIContainer finds the newest container of pod ns/name named container
// ("" for the pod's only/first one), running ones first.
func (k *KubeEnv) CRIContainer(ns, pod, container string) (*runtimeapi.Container, error) {
	labels := map[string]string{"io.kubernetes.pod.namespace": ns, "io.kubernetes.pod.name": pod}
	if container != "" {
		labels["io.kubernetes.container.name"] = container
	}
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
	defer cancel()
	resp, err := k.CRI.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: labels}})
	if err != nil {
		return nil, err
	}
	cs := resp.Containers
	if len(cs) == 0 {
		return nil, fmt.Errorf("no container %q of pod %s/%s in the CRI runtime", container, ns, pod)
	}
	sort.Slice(cs, func(i, j int) bool {
		ri, rj := cs[i].State == runtimeapi.ContainerState_CONTAINER_RUNNING, cs[j].State == runtimeapi.ContainerState_CONTAINER_RUNNING
		if ri != rj {
			return ri
		}
		return cs[i].CreatedAt > cs[j].CreatedAt
	})
	return cs[0], nil
}

// ExecInPod runs cmd in a running container of pod ns/name (CRI ExecSync,
// as the kubelet does; kubectl exec needs a non-loopback node IP). It returns
// stdout, stderr and the exit code; err is a failure to run at all.
func (k *KubeEnv) ExecInPod(ns, pod, container string, cmd ...string) (stdout, stderr string, code int, err error) {
	c, err := k.CRIContainer(ns, pod, container)
	if err != nil {
		return "", "", 0, err
	}
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return "", "", 0, fmt.Errorf("container %s of pod %s/%s is %v", container, ns, pod, c.State)
	}
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
	defer cancel()
	resp, err := k.CRI.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: c.Id, Cmd: cmd, Timeout: int64(CommandTimeout / time.Second)})
	if err != nil {
		return "", "", 0, fmt.Errorf("ExecSync %v in %s/%s/%s: %w", cmd, ns, pod, container, err)
	}
	return string(resp.Stdout), string(resp.Stderr), int(resp.ExitCode), nil
}

// MustExecInPod is ExecInPod failing the test unless cmd exits 0; it
// returns stdout.
func (k *KubeEnv) MustExecInPod(t testing.TB, ns, pod, container string, cmd ...string) string {
	t.Helper()
	so, se, code, err := k.ExecInPod(ns, pod, container, cmd...)
	if err != nil {
		t.Fatalf("%v\n%s", err, k.Diagnose(ns, pod))
	}
	if code != 0 {
		t.Fatalf("%v in %s/%s/%s: exit %d\nstdout: %s\nstderr: %s", cmd, ns, pod, container, code, so, se)
	}
	return so
}

// Logs returns the output of the newest container named container of pod
// ns/name, read from its CRI log file (kubectl logs needs a routable
// kubelet), without the CRI prefixes.
func (k *KubeEnv) Logs(ns, pod, container string) string {
	c, err := k.CRIContainer(ns, pod, container)
	if err != nil {
		return err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
	defer cancel()
	st, err := k.CRI.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
	if err != nil {
		return err.Error()
	}
	b, err := os.ReadFile(k.NodePath(st.Status.LogPath))
	if err != nil {
		return err.Error()
	}
	return criLogText(string(b))
}

// Node is what the helpers read of the Node object.
type Node struct {
	Metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Status struct {
		Capacity    map[string]string `json:"capacity"`
		Allocatable map[string]string `json:"allocatable"`
		Addresses   []struct {
			Type    string `json:"type"`
			Address string `json:"address"`
		} `json:"addresses"`
	} `json:"status"`
}

// GetNode returns the Node object of this node.
func (k *KubeEnv) GetNode(t testing.TB) *Node {
	t.Helper()
	out, err := k.GetJSON("/api/v1/nodes/" + k.NodeName)
	if err != nil {
		t.Fatal(err)
	}
	var n Node
	if err := json.Unmarshal(out, &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

// NodeAllocatable returns the node's allocatable amount of resource (e.g.
// "rdma/hca"), "" when the node has none, in the API server's canonical
// quantity form (1000 is "1k"; compare with quantityEqual or
// NodeAllocatableValue).
func (k *KubeEnv) NodeAllocatable(t testing.TB, resource string) string {
	t.Helper()
	return k.GetNode(t).Status.Allocatable[resource]
}

// WaitNodeAllocatable waits until NodeAllocatable(resource) equals want as
// a quantity: the API server writes 1000 as "1k".
func (k *KubeEnv) WaitNodeAllocatable(t testing.TB, resource, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := k.NodeAllocatable(t, resource)
		if QuantityEqual(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: allocatable %s is %q, want %q after %v\n%s", k.NodeName, resource, got, want, timeout,
				TailFile(k.procs["kubelet"].Log, 4000))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// NodeAllocatableValue is NodeAllocatable as a number (-1 when the node has
// none of resource or it is not a whole number).
func (k *KubeEnv) NodeAllocatableValue(t testing.TB, resource string) int64 {
	t.Helper()
	r, ok := parseQuantity(k.NodeAllocatable(t, resource))
	if !ok || !r.IsInt() {
		return -1
	}
	return r.Num().Int64()
}

// quantitySuffixes are the Kubernetes quantity suffixes and their factors.
var quantitySuffixes = map[string]*big.Rat{
	"": big.NewRat(1, 1), "m": big.NewRat(1, 1000),
	"k": big.NewRat(1e3, 1), "M": big.NewRat(1e6, 1), "G": big.NewRat(1e9, 1), "T": big.NewRat(1e12, 1),
	"P": big.NewRat(1e15, 1), "E": big.NewRat(1e18, 1),
	"Ki": big.NewRat(1<<10, 1), "Mi": big.NewRat(1<<20, 1), "Gi": big.NewRat(1<<30, 1), "Ti": big.NewRat(1<<40, 1),
	"Pi": big.NewRat(1<<50, 1), "Ei": big.NewRat(1<<60, 1),
}

// parseQuantity reads a Kubernetes quantity such as "1k", "8", "256Mi",
// "100m" or "1e3" (decimal exponent).
func parseQuantity(q string) (*big.Rat, bool) {
	q = strings.TrimSpace(q)
	i := strings.IndexFunc(q, func(r rune) bool { return (r < '0' || r > '9') && r != '.' && r != '-' && r != '+' })
	num, suf := q, ""
	if i >= 0 {
		num, suf = q[:i], q[i:]
	}
	if num == "" {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return nil, false
	}
	if f, ok := quantitySuffixes[suf]; ok {
		return r.Mul(r, f), true
	}
	if len(suf) > 1 && (suf[0] == 'e' || suf[0] == 'E') {
		exp, err := strconv.Atoi(suf[1:])
		if err != nil || exp < -18 || exp > 18 {
			return nil, false
		}
		f := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(max(exp, -exp))), nil))
		if exp < 0 {
			f.Inv(f)
		}
		return r.Mul(r, f), true
	}
	return nil, false
}

// QuantityEqual compares two quantities by value ("1k" == "1000"); strings
// that are not quantities (e.g. "") compare as strings.
func QuantityEqual(a, b string) bool {
	ra, oka := parseQuantity(a)
	rb, okb := parseQuantity(b)
	if !oka || !okb {
		return a == b
	}
	return ra.Cmp(rb) == 0
}

// NamespaceManifest is a Namespace named ns, to Apply before what goes in it.
func NamespaceManifest(ns string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", ns)
}

// WaitPodEvent waits for an event of the pod whose message holds want.
func WaitPodEvent(t *testing.T, k *KubeEnv, ns, pod, want string) {
	t.Helper()
	var out string
	err := WaitFor(context.Background(), 2*time.Minute, func() error {
		b, err := k.GetJSON("/api/v1/namespaces/"+ns+"/events", "fieldSelector", "involvedObject.name="+pod)
		if err != nil {
			return err
		}
		if out = string(b); !strings.Contains(out, want) {
			return fmt.Errorf("no event with %s", want)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: no event with %q:\n%s", ns, pod, want, out)
	}
}

// InNamespace puts every document of a manifest in namespace ns.
func InNamespace(t *testing.T, manifest, ns string) string {
	t.Helper()
	docs := strings.Split(manifest, "\n---\n")
	for i, d := range docs {
		if !strings.Contains(d, "\nmetadata:\n  name: ") {
			t.Fatalf("document %d has no metadata.name to put a namespace beside:\n%s", i, d)
		}
		docs[i] = strings.Replace(d, "\nmetadata:\n", "\nmetadata:\n  namespace: "+ns+"\n", 1)
	}
	return strings.Join(docs, "\n---\n")
}
