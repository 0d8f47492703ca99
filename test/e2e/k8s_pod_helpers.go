package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Pods the Kubernetes tests run and what they check inside them: the
// device nodes, the linker cache, nccl.conf, the pod's health.

// GrepLines returns s's lines containing sub.
func GrepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// PodProbe prints what a test checks inside an RDMA container, then keeps
// it running for later execs.
const PodProbe = `ls -l /dev/infiniband 2>/dev/null
echo "--- nccl.conf"; cat /etc/nccl.conf 2>&1
echo "--- ldconfig"; ldconfig -p 2>&1 | grep -E 'libibverbs.so.1|libmlx5.so.1|librdmacm.so.1'
echo "--- limits"; grep 'locked memory' /proc/self/limits`

// GlibcPodManifest is a glibc pod running until deleted, hostNetwork (the
// node has no CNI), with podSpec and container YAML lines added (each
// starting with a newline, indented for their place).
func GlibcPodManifest(ns, name, podSpec, container string) string {
	return PodManifest(ns, name, Glibc, podSpec, container)
}

// PodManifest is glibcPodManifest's pod with another image.
func PodManifest(ns, name string, img Image, podSpec, container string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  tolerations:
    - operator: Exists%s
  containers:
    - name: main
      image: %s
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", "exec sleep 3600"]%s
`, name, ns, podSpec, img.Ref, container)
}

// ProbePod runs podProbe in the pod's container.
func ProbePod(t *testing.T, k *KubeEnv, ns, pod string) string {
	t.Helper()
	return k.MustExecInPod(t, ns, pod, "main", "/bin/sh", "-c", PodProbe)
}

// NCCLHCA finds the NCCL_IB_HCA line of a probe's nccl.conf.
var NCCLHCA = regexp.MustCompile(`(?m)^NCCL_IB_HCA=(.*)$`)

// CheckRDMAPod checks a probe's output: exactly the HCAs' nodes and
// rdma_cm, the libraries in the linker cache, and an nccl.conf naming
// exactly the HCAs' ports with NCCL's GID index.
func CheckRDMAPod(t *testing.T, topo *FixtureNode, out string, hcas []string, gidIndex string) {
	t.Helper()
	ls, _, _ := strings.Cut(out, "--- nccl.conf")
	var names, ports []string
	for _, h := range hcas {
		names = append(names, HCANodeNames(t, topo, h)...)
		ports = append(ports, h+":1")
	}
	CheckNodes(t, "pod", ParseLsDev(t, ls), WantNodes(t, topo.Topo, append(names, "rdma_cm")...))
	conf := Section(out, "nccl.conf")
	if m := NCCLHCA.FindStringSubmatch(conf); m == nil || strings.TrimPrefix(m[1], "=") != strings.Join(ports, ",") {
		t.Errorf("/etc/nccl.conf NCCL_IB_HCA: want exactly %s:\n%s", strings.Join(ports, ","), conf)
	}
	if !strings.Contains(conf, "NCCL_IB_GID_INDEX="+gidIndex+"\n") {
		t.Errorf("/etc/nccl.conf: want NCCL_IB_GID_INDEX=%s:\n%s", gidIndex, conf)
	}
	for _, lib := range []string{"libibverbs.so.1", "libmlx5.so.1", "librdmacm.so.1"} {
		if !strings.Contains(Section(out, "ldconfig"), lib) {
			t.Errorf("ldconfig -p lacks %s:\n%s", lib, out)
		}
	}
}

// HCANodeNames are the /dev/infiniband names of an HCA of the fixture:
// its uverbs node and each port's umad and issm.
func HCANodeNames(t *testing.T, topo *FixtureNode, hca string) []string {
	t.Helper()
	full, err := topo.Topo.Complete()
	if err != nil {
		t.Fatal(err)
	}
	d, ok := full.DeviceByName(hca)
	if !ok || d.Uverbs == nil {
		t.Fatalf("fixture %s has no HCA %s with a uverbs node", full.Name, hca)
	}
	names := []string{fmt.Sprintf("uverbs%d", *d.Uverbs)}
	for _, p := range d.Ports {
		if p.Umad != nil {
			names = append(names, fmt.Sprintf("umad%d", *p.Umad), fmt.Sprintf("issm%d", *p.Umad))
		}
	}
	return names
}

// PodHealthShown reports whether the kubelet puts device health in pods'
// status (allocatedResourcesStatus): the ResourceHealthStatus gate, beta
// and on by default from 1.36, alpha and off before.
func PodHealthShown(t testing.TB) bool { return KubeMinor(t) >= 36 }

// WaitResourceHealth waits until pod's first container reports, under a
// resource status whose name has the prefix resource, the device id with
// health (and a message containing message, when not "").
func WaitResourceHealth(t testing.TB, k *KubeEnv, ns, pod, resource, id, health, message string) {
	t.Helper()
	cs := k.Clientset(t)
	var last string
	err := WaitFor(context.Background(), 90*time.Second, func() error {
		p, err := cs.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(p.Status.ContainerStatuses) == 0 {
			return fmt.Errorf("no container status yet")
		}
		b, _ := json.Marshal(p.Status.ContainerStatuses[0].AllocatedResourcesStatus)
		last = string(b)
		for _, rs := range p.Status.ContainerStatuses[0].AllocatedResourcesStatus {
			if !strings.HasPrefix(string(rs.Name), resource) {
				continue
			}
			for _, h := range rs.Resources {
				if string(h.ResourceID) == id && string(h.Health) == health && (message == "" || strings.Contains(ptr.Deref(h.Message, ""), message)) {
					return nil
				}
			}
		}
		return fmt.Errorf("no %s %s", id, health)
	})
	if err != nil {
		t.Fatalf("pod %s/%s: %v; want %s of %s* %s (message %q); allocatedResourcesStatus: %s", ns, pod, err, id, resource, health, message, last)
	}
}

// ContainerOf is the status of pod's first container.
func ContainerOf(t *testing.T, k *KubeEnv, ns, pod string) corev1.ContainerStatus {
	t.Helper()
	p, err := k.Clientset(t).CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil || len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s/%s: %+v %v", ns, pod, p, err)
	}
	return p.Status.ContainerStatuses[0]
}

// CheckSameContainer fails unless pod still runs the container it ran
// before, never restarted.
func CheckSameContainer(t *testing.T, k *KubeEnv, ns, pod string, before corev1.ContainerStatus) {
	t.Helper()
	if now := ContainerOf(t, k, ns, pod); now.ContainerID != before.ContainerID || now.RestartCount != 0 {
		t.Errorf("pod %s's container changed: %s (restarts %d), was %s", pod, now.ContainerID, now.RestartCount, before.ContainerID)
	}
}

// WaitContainerReplaced waits until pod ns/name's first container is one
// other than old (a container ID) and Ready, as after a node's reboot:
// the API shows the old container Ready until the kubelet has looked.
func WaitContainerReplaced(t *testing.T, k *KubeEnv, ns, pod, old string, timeout time.Duration) error {
	t.Helper()
	pods := k.Clientset(t).CoreV1().Pods(ns)
	return WaitFor(t.Context(), timeout, func() error {
		p, err := pods.Get(t.Context(), pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := p.Status.ContainerStatuses; len(c) == 0 || c[0].ContainerID == old || !c[0].Ready {
			return fmt.Errorf("container %+v, was %s", c, old)
		}
		return nil
	})
}
