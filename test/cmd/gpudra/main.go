// Command gpudra is a stand-in for NVIDIA's GPU DRA driver in the
// Kubernetes end-to-end tests: a real kubelet plugin (the same
// k8s.io/dynamic-resource-allocation helper NVIDIA's driver is built on)
// that publishes a few GPUs of driver gpu.nvidia.com in the node's
// ResourceSlice, with the attributes that driver gives a GPU's placement
// (Kubernetes' standard resource.kubernetes.io/pcieRoot, pciBusID and
// numaNode), and prepares a claim's GPUs as CDI devices of a spec it
// writes. A GPU's CDI device sets one environment variable,
// STANDIN_GPU_<index>=<name> <pcieRoot>, so that a container shows which
// GPUs it got; there is no device node to give.
//
//	gpudra -kubeconfig K -node N -gpu gpu-0=pci0000:15,0,0000:16:00.0 -gpu ...
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// gpu is one stand-in GPU: its slice device name and placement.
type gpu struct {
	Name     string
	Index    int
	PCIeRoot string
	NUMANode int
	BusID    string
}

type gpuFlags []gpu

func (g *gpuFlags) String() string { return fmt.Sprint(*g) }

// Set parses NAME=PCIEROOT,NUMA,BUSID.
func (g *gpuFlags) Set(v string) error {
	name, place, ok := strings.Cut(v, "=")
	parts := strings.Split(place, ",")
	if !ok || len(parts) != 3 {
		return fmt.Errorf("%q: want NAME=PCIEROOT,NUMA,BUSID", v)
	}
	numa, err := strconv.Atoi(parts[1])
	if err != nil {
		return fmt.Errorf("%q: NUMA node: %w", v, err)
	}
	*g = append(*g, gpu{Name: name, Index: len(*g), PCIeRoot: parts[0], NUMANode: numa, BusID: parts[2]})
	return nil
}

func main() {
	var gpus gpuFlags
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	node := flag.String("node", "", "node name")
	driver := flag.String("driver", "gpu.nvidia.com", "driver name, the CDI vendor too")
	cdiDir := flag.String("cdi-dir", "/var/run/cdi", "where the CDI spec goes")
	pluginDir := flag.String("plugin-dir", "/var/lib/kubelet/plugins", "the kubelet's plugins dir")
	registrarDir := flag.String("registrar-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registration dir")
	flag.Var(&gpus, "gpu", "a GPU, NAME=PCIEROOT,NUMA,BUSID (repeat)")
	flag.Parse()
	if err := run(*kubeconfig, *node, *driver, *cdiDir, *pluginDir, *registrarDir, gpus); err != nil {
		log.Fatal(err)
	}
}

func run(kubeconfig, node, driver, cdiDir, pluginDir, registrarDir string, gpus []gpu) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := writeSpec(cdiDir, driver, gpus); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	dataDir := filepath.Join(pluginDir, driver)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return err
	}
	plugin := &standIn{driver: driver}
	helper, err := kubeletplugin.Start(ctx, plugin,
		kubeletplugin.DriverName(driver), kubeletplugin.NodeName(node), kubeletplugin.KubeClient(client),
		kubeletplugin.PluginDataDirectoryPath(dataDir), kubeletplugin.RegistrarDirectoryPath(registrarDir))
	if err != nil {
		return err
	}
	defer helper.Stop()
	devices := make([]resourceapi.Device, len(gpus))
	for i, g := range gpus {
		devices[i] = resourceapi.Device{Name: g.Name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"index":       {IntValue: ptr(int64(g.Index))},
			"productName": {StringValue: ptr("stand-in GPU")},
			deviceattribute.StandardDeviceAttributePCIeRoot: {StringValue: ptr(g.PCIeRoot)},
			deviceattribute.StandardDeviceAttributePCIBusID: {StringValue: ptr(g.BusID)},
			deviceattribute.StandardDeviceAttributeNUMANode: {IntValue: ptr(int64(g.NUMANode))},
		}}
	}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{node: {Slices: []resourceslice.Slice{{Devices: devices}}}},
	}); err != nil {
		return err
	}
	log.Printf("%s serving %d GPUs on node %s", driver, len(gpus), node)
	<-ctx.Done()
	return nil
}

// writeSpec writes the CDI spec of the GPUs: kind DRIVER/gpu, one device
// per GPU setting its environment variable.
func writeSpec(dir, driver string, gpus []gpu) error {
	type edits struct {
		Env []string `json:"env"`
	}
	type device struct {
		Name           string `json:"name"`
		ContainerEdits edits  `json:"containerEdits"`
	}
	spec := struct {
		CDIVersion string   `json:"cdiVersion"`
		Kind       string   `json:"kind"`
		Devices    []device `json:"devices"`
	}{CDIVersion: "0.5.0", Kind: driver + "/gpu"}
	for _, g := range gpus {
		spec.Devices = append(spec.Devices, device{Name: g.Name,
			ContainerEdits: edits{Env: []string{fmt.Sprintf("STANDIN_GPU_%d=%s %s", g.Index, g.Name, g.PCIeRoot)}}})
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+driver+".json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, driver+".json"))
}

// standIn prepares a claim's GPUs of this driver as their CDI devices.
type standIn struct{ driver string }

func (s *standIn) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		var r kubeletplugin.PrepareResult
		if c.Status.Allocation == nil {
			r.Err = fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)
		} else {
			for _, res := range c.Status.Allocation.Devices.Results {
				if res.Driver != s.driver {
					continue
				}
				r.Devices = append(r.Devices, kubeletplugin.Device{
					Requests: []string{res.Request}, PoolName: res.Pool, DeviceName: res.Device,
					CDIDeviceIDs: []string{s.driver + "/gpu=" + res.Device},
				})
			}
		}
		out[c.UID] = r
	}
	return out, nil
}

func (s *standIn) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

func (s *standIn) HandleError(_ context.Context, err error, msg string) {
	log.Printf("%s: %v", msg, err)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		os.Exit(1)
	}
}

func (s *standIn) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func ptr[T any](v T) *T { return &v }
