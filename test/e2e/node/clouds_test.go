package node

// The cloud fixtures (AWS p5, GCP A3 Ultra, Azure ND H100 v5, GB200, AMD
// Pollara) served by each real engine: the spec generate writes for the
// node, two of its devices given to a container by podman, containerd,
// Docker 29 and CRI-O, and in each container exactly those devices' nodes
// and the nccl.conf the spec's hook wrote for them.

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// cloudEngines run probe in a busybox container given devices (fully
// qualified CDI names) by each engine, and return its output.
var cloudEngines = []struct {
	name string
	run  func(t *testing.T, devices []string, probe string) string
}{
	{"podman", func(t *testing.T, devices []string, probe string) string {
		var args []string
		for _, d := range devices {
			args = append(args, "--device", d)
		}
		return mustPodman(t, e2e.Podman(t), append(args, e2e.BB.Ref, "sh", "-c", probe)...)
	}},
	{"containerd", func(t *testing.T, devices []string, probe string) string {
		var args []string
		for _, d := range devices {
			args = append(args, "--device", d)
		}
		so, se, err := e2e.Containerd(t).Run(append(args, e2e.BB.Ref, e2e.UniqueID("cloud-"), "sh", "-c", probe)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, se)
		}
		return so
	}},
	{"docker", func(t *testing.T, devices []string, probe string) string {
		so, se, code, err := e2e.Docker29(t).RunAPI(e2e.DockerRunSpec{Image: e2e.BB.Ref, Cmd: []string{"sh", "-c", probe}, CDIDevices: devices})
		if err != nil || code != 0 {
			t.Fatalf("exit %d, %v\nstderr: %s", code, err, se)
		}
		return so
	}},
	{"cri-o", func(t *testing.T, devices []string, probe string) string {
		c := e2e.CRIO(t, e2e.CRIOOptions{})
		pod, podCfg := c.RunPod(t, e2e.UniqueID("cloud-pod-"))
		cfg := &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: e2e.UniqueID("cloud-")},
			Image:    e2e.CRIImage(e2e.BB.Ref),
			Command:  []string{"/bin/sh", "-c", probe},
		}
		for _, d := range devices {
			cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: d})
		}
		out, code := c.RunContainer(t, pod, podCfg, cfg)
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		return out
	}},
}

func TestCloudFixturesOnEngines(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		hcas    []string // given to the container, in node order
		ncclIB  bool     // NCCL's IB transport serves them (not EFA)
	}{
		{"aws-p5", []string{"rdmap79s0", "rdmap80s0"}, false},
		{"gcp-a3-ultra", []string{"mlx5_0", "mlx5_1"}, true},
		{"azure-ndv5", []string{"mlx5_ib0", "mlx5_ib1"}, true},
		{"gb200", []string{"mlx5_0", "mlx5_1"}, true},
		{"amd-pollara", []string{"ionic_0", "ionic_1"}, true},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			node := e2e.SharedFixtureNode(t, tc.fixture)
			s := node.GenerateSpec(t, e2e.SpecOptions{})
			var devices, nodes, ports []string
			for _, h := range tc.hcas {
				devices = append(devices, s.Device(h))
				nodes = append(nodes, e2e.HCANodeNames(t, node, h)...)
				ports = append(ports, h+":1")
			}
			want := e2e.WantNodes(t, node.Topo, append(nodes, "rdma_cm")...)
			for _, engine := range cloudEngines {
				t.Run(engine.name, func(t *testing.T) {
					out := engine.run(t, devices, e2e.HookProbe+"; true")
					ls, conf, _ := strings.Cut(out, "--- nccl.conf\n")
					e2e.CheckNodes(t, engine.name, e2e.ParseLsDev(t, ls), want)
					m := e2e.NCCLHCA.FindStringSubmatch(conf)
					switch {
					case !tc.ncclIB && strings.Contains(conf, "NCCL_IB_"):
						t.Errorf("nccl.conf of an EFA container sets NCCL_IB_*:\n%s", conf)
					case tc.ncclIB && (m == nil || strings.TrimPrefix(m[1], "=") != strings.Join(ports, ",")):
						t.Errorf("nccl.conf: want NCCL_IB_HCA of exactly %s:\n%s", strings.Join(ports, ","), conf)
					}
					// The engine's network namespace holds no fabric
					// address: the hook names no GID index rather than
					// one of another namespace (the RoCE fixtures' own
					// indexes are TestCloudFixtures').
					if strings.Contains(conf, "NCCL_IB_GID_INDEX=") {
						t.Errorf("nccl.conf names a GID index the container's namespace has no address for:\n%s", conf)
					}
				})
			}
		})
	}
}
