package kube

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// efaProbe prints what an EFA pod needs: its device nodes, its nccl.conf,
// the lent libraries in its linker cache and memlock.
const efaProbe = `ls -l /dev/infiniband
echo "--- nccl.conf"; cat /etc/nccl.conf 2>&1
echo "--- ldconfig"; ldconfig -p | grep -E 'libfabric|libnccl-net'
echo "--- limits"; grep 'locked memory' /proc/self/limits`

// TestKubeDRAEFA: the aws-p5 fixture (32 EFA devices, no RDMA netdev, an
// ENA eth0 on the default route) under the chart in mode dra, with the
// EFA install's plugin and libfabric (stub ELF libraries) on the host: the
// slice lists every EFA device with its transport and PCI place and no
// NCCL GID index; a claim selecting an EFA device by transport gets exactly
// that device's uverbs node and rdma_cm, memlock raised (the kubelet's
// containers get no CAP_IPC_LOCK from CDI: docs/kubernetes.md), the
// host's aws-ofi-nccl and libfabric in its linker cache (the glibc image has
// neither) with FI_PROVIDER=efa, and no NCCL_IB_*. A claim whose config
// says ncclPlugins: none gets its device and none of the lent stack.
func TestKubeDRAEFA(t *testing.T) {
	pluginDir, fabricDir := e2e.StubEFAInstall(t)
	node := e2e.NewFixtureNode(t, "aws-p5")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{
		FeatureGates: map[string]bool{"DRAExtendedResource": true},
		Images:       []string{e2e.Glibc.DockerArchive(t)},
	})
	agent := k.InstallAgent(t, "dra", map[string]any{"config": map[string]any{
		"nccl_plugins": map[string]any{"dirs": []string{pluginDir}, "libfabric_dirs": []string{fabricDir}},
	}})
	devs := e2e.WaitSlice(t, k, func(d []resourceapi.Device) bool { return len(d) == 32 }, "32 EFA devices",
		func() string { return k.Logs(e2e.AgentNamespace, agent, "dra") })
	for _, d := range devs {
		if got := e2e.Attr(d, "transport"); got != "efa" {
			t.Errorf("%s transport %v, want efa", d.Name, got)
		}
		if root, _ := e2e.Attr(d, "resource.kubernetes.io/pcieRoot").(string); !strings.HasPrefix(root, "pci0000:") {
			t.Errorf("%s pcieRoot %q", d.Name, root)
		}
		for _, none := range []string{"ncclGidIndex", "netdev"} {
			if got := e2e.Attr(d, none); got != nil {
				t.Errorf("%s has %s %v: an EFA port has no netdev and NCCL no GID index for it", d.Name, none, got)
			}
		}
	}
	checkAttrs(t, devs, map[string]map[string]any{"rdmap79s0": {
		"ibdev": "rdmap79s0", "linkLayer": "unspecified", "pciVendor": "0x1d0f", "pciDevice": "0xefa1", "defaultRoute": false,
	}})

	ns := e2e.UniqueID("dra-efa-")
	k.Apply(t, e2e.NamespaceManifest(ns))
	// efaPod runs a pod whose claim (config: the claim config's fields, or
	// "") takes the EFA device ibdev by transport, checks it holds exactly
	// that device's nodes, and returns its efaProbe.
	efaPod := func(pod, ibdev, config string) string {
		t.Helper()
		template := e2e.ClaimTemplate(ns, pod, "hca",
			fmt.Sprintf(`'device.attributes["rdma.example.com"].transport == "efa" && device.attributes["rdma.example.com"].ibdev == %q'`, ibdev), "")
		if config != "" {
			template = e2e.WithClaimConfig(template, config)
		}
		k.Apply(t, template+"---\n"+e2e.ClaimPod(ns, pod, pod))
		k.WaitPod(t, ns, pod, "Ready", 2*time.Minute)
		out := k.MustExecInPod(t, ns, pod, "main", "/bin/sh", "-c", efaProbe)
		t.Logf("in pod %s:\n%s", pod, out)
		ls, _, _ := strings.Cut(out, "--- nccl.conf")
		e2e.CheckNodes(t, pod, e2e.ParseLsDev(t, ls), e2e.WantNodes(t, node.Topo, append(e2e.HCANodeNames(t, node, ibdev), "rdma_cm")...))
		return out
	}

	out := efaPod("trainer", "rdmap79s0", "")
	conf := e2e.Section(out, "nccl.conf")
	for _, want := range []string{"NCCL_NET_PLUGIN=ofi\n", "FI_PROVIDER=efa\n", "FI_EFA_USE_DEVICE_RDMA=1\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("nccl.conf lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "NCCL_IB_") {
		t.Errorf("an EFA pod's nccl.conf sets NCCL_IB_*:\n%s", conf)
	}
	cache := e2e.Section(out, "ldconfig")
	for _, want := range []string{"=> " + pluginDir + "/libnccl-net-ofi.so", "=> " + fabricDir + "/libfabric.so.1"} {
		if !strings.Contains(cache, want) {
			t.Errorf("the pod's linker cache lacks %q:\n%s", want, cache)
		}
	}
	memlockRaised(t, out)

	out = efaPod("own-stack", "rdmap80s0", "ncclPlugins: none")
	for _, unwanted := range []string{"libnccl-net-ofi.so", "libfabric.so.1", "FI_PROVIDER", "NCCL_NET_PLUGIN"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("a pod whose claim says ncclPlugins: none has %q:\n%s", unwanted, out)
		}
	}
}

// TestKubeDevicePluginEFA: the aws-p5 node under the chart in mode
// device-plugin: both resources count its EFA devices (the shared one its
// max_pods units, the exclusive one each of the 32), a pod with one
// exclusive unit gets exactly one EFA device's nodes and one with the
// shared unit every EFA device's, each with memlock raised and no NCCL_IB_*.
func TestKubeDevicePluginEFA(t *testing.T) {
	node := e2e.NewFixtureNode(t, "aws-p5")
	k := devicePluginNode(t, node, "1000", "32")
	ns := e2e.UniqueID("dp-efa-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+
		rdmaPodManifest(ns, "one", map[string]int{e2e.ExclusiveResource: 1}, false)+"---\n"+
		rdmaPodManifest(ns, "all", map[string]int{e2e.SharedResource: 1}, false))
	full, err := node.Topo.Complete()
	if err != nil {
		t.Fatal(err)
	}
	for pod, want := range map[string]int{"one": 1, "all": len(full.Devices)} {
		k.WaitPod(t, ns, pod, "Ready", 2*time.Minute)
		out := k.MustExecInPod(t, ns, pod, "main", "/bin/sh", "-c", efaProbe)
		ls, _, _ := strings.Cut(out, "--- nccl.conf")
		got := e2e.ParseLsDev(t, ls)
		var uverbs []string
		for name := range got {
			if strings.HasPrefix(name, "uverbs") {
				uverbs = append(uverbs, name)
			}
		}
		if len(uverbs) != want {
			t.Errorf("pod %s: %d uverbs nodes %v, want %d", pod, len(uverbs), uverbs, want)
		}
		var names []string
		for _, d := range full.Devices {
			for _, n := range e2e.HCANodeNames(t, node, d.Name) {
				if _, ok := got[n]; ok {
					names = append(names, e2e.HCANodeNames(t, node, d.Name)...)
					break
				}
			}
		}
		e2e.CheckNodes(t, pod, got, e2e.WantNodes(t, node.Topo, append(names, "rdma_cm")...))
		if conf := e2e.Section(out, "nccl.conf"); strings.Contains(conf, "NCCL_IB_") {
			t.Errorf("pod %s: an EFA pod's nccl.conf sets NCCL_IB_*:\n%s", pod, conf)
		}
		memlockRaised(t, out)
	}
}

// TestKubeDRACloudFixtures: the other cloud fixtures (GCP A3 Ultra, Azure
// ND H100 v5, GB200, AMD Pollara) under the chart in mode dra: the slice
// lists every HCA, and a claim for one by name runs a pod with exactly its
// nodes and an nccl.conf naming it with the GID index NCCL would pick in
// the pod's (the node's) network namespace.
func TestKubeDRACloudFixtures(t *testing.T) {
	for _, tc := range []struct {
		fixture, hca, gidIndex string // "" for none (InfiniBand)
	}{
		{"gcp-a3-ultra", "mlx5_3", "3"},
		{"azure-ndv5", "mlx5_ib3", ""},
		{"gb200", "mlx5_2", ""},
		{"amd-pollara", "ionic_5", "1"},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			node := e2e.NewFixtureNode(t, tc.fixture)
			full, err := node.Topo.Complete()
			if err != nil {
				t.Fatal(err)
			}
			k := e2e.DRANode(t, node, len(full.Devices))
			ns := e2e.UniqueID("dra-cloud-")
			k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+
				e2e.ClaimTemplate(ns, "one", "hca", fmt.Sprintf(`'device.attributes["rdma.example.com"].ibdev == %q'`, tc.hca), "")+
				"---\n"+e2e.ClaimPod(ns, "trainer", "one"))
			k.WaitPod(t, ns, "trainer", "Ready", 2*time.Minute)
			out := e2e.ProbePod(t, k, ns, "trainer")
			ls, _, _ := strings.Cut(out, "--- nccl.conf")
			e2e.CheckNodes(t, "pod", e2e.ParseLsDev(t, ls), e2e.WantNodes(t, node.Topo, append(e2e.HCANodeNames(t, node, tc.hca), "rdma_cm")...))
			conf := e2e.Section(out, "nccl.conf")
			if m := e2e.NCCLHCA.FindStringSubmatch(conf); m == nil || strings.TrimPrefix(m[1], "=") != tc.hca+":1" {
				t.Errorf("nccl.conf: want NCCL_IB_HCA of exactly %s:1:\n%s", tc.hca, conf)
			}
			if got := strings.Contains(conf, "NCCL_IB_GID_INDEX="); got != (tc.gidIndex != "") ||
				tc.gidIndex != "" && !strings.Contains(conf, "NCCL_IB_GID_INDEX="+tc.gidIndex+"\n") {
				t.Errorf("nccl.conf: want GID index %q:\n%s", tc.gidIndex, conf)
			}
			memlockRaised(t, out)
		})
	}
}

// TestKubeDRAGB200NUMAList: on the GB200 fixture, with list attributes
// switched on in every component (DRAListTypeAttributes, alpha), the
// driver's probe finds them kept and each HCA publishes the standard
// numaNode as its Grace's node and the GPU memory nodes that Grace reaches
// over NVLink-C2C, and a claim matching numaNode by includes() gets an HCA
// of that Grace. (The gpuDirect verdict over C2C is the unit tests': the
// agent here reads this machine's /proc, which has no NVIDIA module.)
func TestKubeDRAGB200NUMAList(t *testing.T) {
	e2e.NeedsKube(t, 36, "DRAListTypeAttributes gate")
	node := e2e.NewFixtureNode(t, "gb200")
	k := e2e.KubeNode(t, node, e2e.KubeOptions{
		FeatureGates: map[string]bool{"DRAExtendedResource": true, "DRAListTypeAttributes": true},
		Images:       []string{e2e.Glibc.DockerArchive(t)},
	})
	agent := k.InstallAgent(t, "dra", nil)
	devs := e2e.WaitSlice(t, k, func(d []resourceapi.Device) bool { return len(d) == 5 }, "5 devices",
		func() string { return k.Logs(e2e.AgentNamespace, agent, "dra") })
	if log := k.Logs(e2e.AgentNamespace, agent, "dra"); !strings.Contains(log, "list attributes on") {
		t.Errorf("the driver's probe did not find list attributes kept:\n%s", e2e.TailString(log, 3000))
	}
	for name, want := range map[string][]int64{"mlx5-0": {0, 2, 10}, "mlx5-1": {0, 2, 10}, "mlx5-2": {1, 18, 26}, "mlx5-3": {1, 18, 26}} {
		d, ok := e2e.DeviceByName(devs, name)
		if !ok {
			t.Fatalf("no %s in the slice:%s", name, e2e.DescribeDevices(devs))
		}
		if got, _ := e2e.Attr(d, "resource.kubernetes.io/numaNode").([]int64); !slices.Equal(got, want) {
			t.Errorf("%s numaNode %v, want %v", name, e2e.Attr(d, "resource.kubernetes.io/numaNode"), want)
		}
	}
	ns := e2e.UniqueID("gb200-")
	k.Apply(t, e2e.NamespaceManifest(ns)+"---\n"+
		e2e.ClaimTemplate(ns, "grace1", "hca", `'device.attributes["resource.kubernetes.io"].numaNode.includes(18)'`, "")+
		"---\n"+e2e.ClaimPod(ns, "trainer", "grace1"))
	k.WaitPod(t, ns, "trainer", "Ready", 2*time.Minute)
	conf := e2e.Section(e2e.ProbePod(t, k, ns, "trainer"), "nccl.conf")
	if m := e2e.NCCLHCA.FindStringSubmatch(conf); m == nil || !slices.Contains([]string{"mlx5_2:1", "mlx5_3:1"}, strings.TrimPrefix(m[1], "=")) {
		t.Errorf("a claim for numaNode 18 (Grace 1's GPU memory): want mlx5_2 or mlx5_3 in nccl.conf:\n%s", conf)
	}
}
