package kube

// Smoke tests of the Kubernetes harness (k8s_helpers.go): a real API server,
// scheduler, controller manager and kubelet on a fixture node.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// TestKubePlainPod: a pod made through the API server runs on the node,
// and a file written inside it is read back through the CRI exec path.
func TestKubePlainPod(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{})
	ns := "plain-" + e2e.UniqueID("")
	k.Apply(t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: Pod
metadata:
  name: bb
  namespace: %[1]s
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  tolerations:
    - operator: Exists
  containers:
    - name: main
      image: %[2]s
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", "echo hello-from-$(hostname) > /tmp/greeting; exec sleep 3600"]
`, ns, e2e.BB.Ref))
	p := k.WaitPod(t, ns, "bb", "Ready", 2*time.Minute)
	if p.Spec.NodeName != k.NodeName {
		t.Fatalf("pod on node %q, want %q", p.Spec.NodeName, k.NodeName)
	}
	var got string
	// The file is written right after the container starts.
	for deadline := time.Now().Add(10 * time.Second); ; {
		so, _, code, err := k.ExecInPod(ns, "bb", "main", "cat", "/tmp/greeting")
		if err != nil {
			t.Fatal(err)
		}
		if got = strings.TrimSpace(so); code == 0 && got != "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// hostNetwork: the pod's hostname is the node's (its UTS namespace is
	// the host's), so this also shows the pod runs in the node's namespaces.
	host, err := os.ReadFile(k.NodePath("/proc/sys/kernel/hostname"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "hello-from-" + strings.TrimSpace(string(host)); got != want {
		t.Fatalf("file in the pod: %q, want %q", got, want)
	}
	// With the fixture's IPv4 as node IP, the API server reaches the
	// kubelet: kubectl exec works too.
	if k.NodeIP != "" {
		out, se, err := k.Kubectl("exec", "-n", ns, "bb", "-c", "main", "--", "cat", "/tmp/greeting")
		if err != nil || strings.TrimSpace(out) != got {
			t.Errorf("kubectl exec: %q, %v\n%s", out, err, se)
		}
	}
	// The fixture's netdevs are the pod's host network.
	out := k.MustExecInPod(t, ns, "bb", "main", "ip", "-o", "-4", "addr", "show", "dev", "eth0")
	if k.NodeIP == "" || !strings.Contains(out, k.NodeIP+"/") {
		t.Fatalf("eth0 in the hostNetwork pod: %q, want the fixture's %s", out, k.NodeIP)
	}
}

// TestKubeChartCDIMode: the chart in mode cdi installs the binaries and the
// config through its initContainer, its pod becomes Ready, and the spec its
// main container keeps in the node's /var/run/cdi names the fixture's HCAs.
func TestKubeChartCDIMode(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{})
	pod := k.InstallAgent(t, "cdi", nil)
	ns := e2e.AgentNamespace

	// The initContainer's copy of the binary, on the node's host path.
	st, err := os.Stat(k.NodePath("/opt/rdma-cdi/bin/rdma-cdi"))
	if err != nil {
		t.Fatalf("binary not installed by the initContainer: %v\n%s", err, k.Diagnose(ns, pod))
	}
	if st.Mode().Perm() != 0o755 {
		t.Errorf("/opt/rdma-cdi/bin/rdma-cdi mode %v, want 0755", st.Mode().Perm())
	}
	if l, err := os.Readlink(k.NodePath("/opt/rdma-cdi/bin/rdma-container-runtime")); err != nil || l != "rdma-cdi" {
		t.Errorf("rdma-container-runtime link: %q, %v", l, err)
	}
	if init := k.Logs(ns, pod, "install"); !strings.Contains(init, "rdma-cdi") {
		t.Errorf("initContainer printed no version: %q", init)
	}

	spec := k.NodePath("/var/run/cdi/rdma.example.com-hca.yaml")
	var data []byte
	for deadline := time.Now().Add(30 * time.Second); ; {
		if data, err = os.ReadFile(spec); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no spec in the node's /var/run/cdi: %v\n%s", err, k.Diagnose(ns, pod))
	}
	s := string(data)
	for _, d := range node.Topo.Devices {
		if !strings.Contains(s, "name: "+d.Name) {
			t.Errorf("spec lacks device %s:\n%s", d.Name, s)
		}
	}
	if len(node.Topo.Devices) != 9 {
		t.Errorf("seed002 has %d devices, want mlx5_0..mlx5_8", len(node.Topo.Devices))
	}
	// The hooks in the spec run the binary the initContainer installed.
	if !strings.Contains(s, "/opt/rdma-cdi/bin/rdma-cdi") {
		t.Errorf("spec does not name the installed hook binary:\n%s", s)
	}
	// The spec is for the node's engine and hook, on the host: every
	// device hostPath and every host file its hook lends (--lend C=H) must
	// exist in the node's mount namespace (not only inside the
	// DaemonSet's container, e.g. under its /host mount).
	var hostPaths []string
	lines := strings.Split(s, "\n")
	for i, line := range lines {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "- "))
		if len(f) == 2 && f[0] == "hostPath:" {
			hostPaths = append(hostPaths, strings.Trim(f[1], `"'`))
		}
		if len(f) == 1 && f[0] == "--lend" && i+1 < len(lines) {
			lend := strings.TrimPrefix(strings.TrimSpace(lines[i+1]), "- ")
			if _, host, ok := strings.Cut(lend, "="); ok {
				hostPaths = append(hostPaths, host)
			}
		}
	}
	lent := 0
	for _, p := range hostPaths {
		if strings.Contains(p, "/lib") {
			lent++
		}
		if _, err := os.Lstat(k.NodePath(p)); err != nil {
			t.Errorf("spec host path %s does not exist on the node: %v", p, err)
		}
	}
	if lent == 0 {
		t.Errorf("no library the hook would lend found in the spec:\n%s", s)
	}
	// The spec is not on the host.
	if _, err := os.Stat("/opt/rdma-cdi/bin/rdma-cdi"); err == nil {
		if hs, err := os.ReadFile("/var/run/cdi/rdma.example.com-hca.yaml"); err == nil && string(hs) == s {
			t.Errorf("the node's spec leaked to the host's /var/run/cdi")
		}
	}
	// The node's engine starts a container from the spec the unprivileged
	// agent wrote: ctr in the node's mount namespace reads the node's
	// /var/run/cdi, and runc there runs the hook the initContainer
	// installed. The container gets mlx5_1's nodes and its NCCL settings.
	ctr := k.InNode(filepath.Join(e2e.EnginesBinDir(), "ctr"), "--address", k.Socket, "--namespace", e2e.CRINamespace,
		"run", "--rm", "--device", apis.Group+"/hca=mlx5_1", e2e.BB.Ref, e2e.UniqueID("cdi-mode-"), "sh", "-c", e2e.HookProbe)
	if out, se, err := e2e.Run(ctr); err != nil {
		t.Errorf("a container from the agent's spec: %v\n%s%s", err, out, se)
	} else {
		e2e.CheckHookProbe(t, "ctr on the node", &e2e.CDISpec{Node: node, Vendor: apis.Group}, out)
	}
	// The main container (its running one; the manifest names it) sees the
	// fixture's HCAs at the real sysfs path.
	ls := k.MustExecInPod(t, ns, pod, "", "/bin/busybox", "ls", "/sys/class/infiniband")
	if !strings.Contains(ls, "mlx5_0") || !strings.Contains(ls, "mlx5_8") {
		t.Errorf("/sys/class/infiniband in the DaemonSet's container: %q", ls)
	}
}

// TestKubeQuantity: the API server's canonical quantities compare by value.
func TestKubeQuantity(t *testing.T) {
	for _, c := range []struct {
		a, b string
		eq   bool
	}{
		{"1k", "1000", true}, {"8", "8", true}, {"256Mi", "268435456", true}, {"100m", "0.1", true},
		{"1e3", "1k", true}, {"0", "", false}, {"", "", true}, {"1k", "1Ki", false}, {"9", "8", false},
	} {
		if got := e2e.QuantityEqual(c.a, c.b); got != c.eq {
			t.Errorf("quantityEqual(%q, %q) = %v, want %v", c.a, c.b, got, c.eq)
		}
	}
}
