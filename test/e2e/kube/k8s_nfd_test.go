package kube

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// TestKubeNodeFeatureDiscovery: the chart's nodeFeatureDiscovery on seed
// 002 in mode dra, with a block and a rack: the agent writes its file in
// NFD's features.d, and NFD's real worker (v0.18.2, its local source
// alone) and master turn it into the Node's labels under the driver's
// vendor: the HCA count, the rail count (seed 002's RoCE NICs each in a
// /27 of their own), the transport, the block and the rack, every line of
// the file and no other label of ours. NFD's master takes the vendor's
// namespace by its default rules (no -extra-label-ns), and the agent needs
// no right on Nodes for it.
func TestKubeNodeFeatureDiscovery(t *testing.T) {
	node := e2e.NewFixtureNode(t, "seed002")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{})
	// The chart names the file after the release's full name, which is the
	// release's own when it holds the chart's name.
	file := k.NodePath(filepath.Join(e2e.NFDFeaturesDir, e2e.AgentRelease))
	t.Cleanup(func() { os.Remove(file) })
	agent := k.InstallAgent(t, "dra", map[string]any{
		"nodeFeatureDiscovery": map[string]any{"enabled": true},
		"config":               map[string]any{"topology": map[string]any{"block": "b1", "rack": "r7"}},
	})
	e2e.WaitSlice(t, k, func(d []resourceapi.Device) bool { return len(d) == 9 }, "9 devices",
		func() string { return k.Logs(e2e.AgentNamespace, agent, "dra") })
	written := map[string]string{}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the agent's feature file: %v\n%s", err, k.Logs(e2e.AgentNamespace, agent, "dra"))
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if name, value, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			written[name] = value
		}
	}
	want := map[string]string{
		apis.Group + "/hca-count": "8", apis.Group + "/rail-count": "8", apis.Group + "/transport.roce": "true",
		apis.Group + "/block": "b1", apis.Group + "/rack": "r7",
	}
	if !maps.Equal(written, want) {
		t.Fatalf("the agent's feature file holds %v, want %v:\n%s", written, want, b)
	}

	k.StartNFD(t)
	var got map[string]string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		var n struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal([]byte(k.MustKubectl(t, "get", "node", k.NodeName, "-o", "json")), &n); err != nil {
			t.Fatal(err)
		}
		got = maps.Clone(n.Metadata.Labels)
		maps.DeleteFunc(got, func(name, _ string) bool { return !strings.HasPrefix(name, apis.Group+"/") })
		if maps.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s's labels of %s: %v, want the file's %v\nnfd-master:\n%s", k.NodeName, apis.Group, got, want, e2e.TailFile(k.Proc("nfd-master").Log, 3000))
		}
	}
}
