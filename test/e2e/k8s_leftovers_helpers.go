package e2e

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
)

// What every test must leave as it found it on a Kubernetes node, checked
// when the test ends (after its own cleanups), so that the test that leaks
// fails rather than the next one, whose failure would name the wrong cause.

// kubeSystemNamespaces hold Kubernetes' own pods, not a test's.
var kubeSystemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// leftoverWait bounds the wait for what a test's cleanup ended but the
// cluster takes a moment to finish (a pod's containers stopping, a
// sub-interface going with its sandbox).
const leftoverWait = 2 * time.Minute

// checkedAtEnd notes the (test, node) pairs whose check is registered.
var checkedAtEnd sync.Map

// checkLeftoversAtEnd registers the node-invariant check for t's end: once
// per top-level test and node (a subtest's node may hold what its parent
// made for the next subtest).
func (k *KubeEnv) checkLeftoversAtEnd(t testing.TB) {
	if strings.Contains(t.Name(), "/") {
		return
	}
	if _, dup := checkedAtEnd.LoadOrStore(t.Name()+"\x00"+k.Dir, true); dup {
		return
	}
	t.Cleanup(func() {
		checkedAtEnd.Delete(t.Name() + "\x00" + k.Dir)
		if t.Failed() || !k.running() {
			return // the failure says more; a node torn down has nothing left
		}
		start := time.Now()
		deadline := start.Add(leftoverWait)
		left := k.leftovers()
		first := left
		for len(left) > 0 && time.Now().Before(deadline) {
			time.Sleep(2 * time.Second)
			left = k.leftovers()
		}
		if len(left) > 0 {
			t.Errorf("the test left on node %s, %v after its cleanup:\n  %s", k.NodeName, leftoverWait, strings.Join(left, "\n  "))
		} else if waited := time.Since(start); waited > 5*time.Second {
			t.Logf("node %s was as the test found it %v after its cleanup; it still had:\n  %s", k.NodeName, waited.Round(time.Second), strings.Join(first, "\n  "))
		}
	})
}

// running says whether the node's API server still answers (a test may
// have torn its own node down, or rebooted it).
func (k *KubeEnv) running() bool {
	_, err := k.GetJSON("/readyz")
	return err == nil
}

// leftovers lists what breaks the node's invariants: a pod outside
// Kubernetes' own namespaces, a macvlan in the node's network namespace, a
// fixture netdev not home, a claim in the DRA driver's checkpoint, a
// tainted device in a ResourceSlice.
func (k *KubeEnv) leftovers() []string {
	var out []string
	pods, err := k.GetJSON("/api/v1/pods")
	if err != nil {
		return []string{"pods: " + err.Error()}
	}
	var list struct {
		Items []struct {
			Metadata struct{ Namespace, Name string } `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(pods, &list); err != nil {
		return []string{"pods: " + err.Error()}
	}
	for _, p := range list.Items {
		if !slices.Contains(kubeSystemNamespaces, p.Metadata.Namespace) {
			out = append(out, "pod "+p.Metadata.Namespace+"/"+p.Metadata.Name)
		}
	}
	links, se, err := Run(k.InNode("ip", "-o", "link", "show", "type", "macvlan"))
	if err != nil {
		out = append(out, "macvlans: ip link: "+err.Error()+": "+se)
	}
	for _, line := range strings.Split(strings.TrimSpace(links), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			out = append(out, "macvlan "+strings.TrimSuffix(f[1], ":"))
		}
	}
	for _, n := range k.Node.Topo.NetDevs {
		if !n.CreateInNetNS() {
			continue
		}
		if _, _, err := Run(k.InNode("ip", "link", "show", "dev", n.Name)); err != nil {
			out = append(out, "netdev "+n.Name+" not in the node's network namespace")
		}
	}
	if claims, err := k.checkpointedClaims(); err != nil {
		out = append(out, "DRA checkpoint: "+err.Error())
	} else if claims > 0 {
		out = append(out, "DRA checkpoint: claims still prepared")
	}
	return append(out, k.taintedDevices()...)
}

// checkpointedClaims counts the claims in the DRA driver's checkpoint (none
// without one).
func (k *KubeEnv) checkpointedClaims() (int, error) {
	b, err := os.ReadFile(k.NodePath(filepath.Join("/var/lib/kubelet/plugins", apis.Group, "prepared-claims.json")))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var c struct {
		Claims map[string]json.RawMessage `json:"claims"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return 0, err
	}
	return len(c.Claims), nil
}

// taintedDevices lists the devices of the node's ResourceSlices that carry
// a taint (a test that took a port down must bring it back).
func (k *KubeEnv) taintedDevices() []string {
	out, se, err := Run(k.KubectlCmd(nil, "get", "resourceslices", "-o", "json"))
	if err != nil {
		return []string{"resourceslices: kubectl: " + err.Error() + ": " + se}
	}
	var list struct {
		Items []struct {
			Spec struct {
				NodeName string `json:"nodeName"`
				Devices  []struct {
					Name   string            `json:"name"`
					Taints []json.RawMessage `json:"taints"`
				} `json:"devices"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return []string{"resourceslices: " + err.Error()}
	}
	var tainted []string
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			if s.Spec.NodeName == k.NodeName && len(d.Taints) > 0 {
				tainted = append(tainted, "device "+d.Name+" tainted: "+string(d.Taints[0]))
			}
		}
	}
	return tainted
}
