// Command fakegpu stands in for a GPU vendor's device plugin in the
// end-to-end tests of GPU nodes: it serves an extended resource
// (nvidia.com/gpu by default) to the kubelet through the device plugin API,
// one unit per GPU named on the command line, each with its NUMA node in
// TopologyInfo and Healthy, and answers Allocate with the GPUs' IDs in an
// environment variable of the container (NVIDIA_VISIBLE_DEVICES, as the
// NVIDIA plugin's envvar strategy does). There are no GPUs, so no device
// nodes or mounts.
//
//	fakegpu -gpus gpu0=0,gpu1=0,gpu2=1,gpu3=1 [-resource nvidia.com/gpu]
//	        [-env NVIDIA_VISIBLE_DEVICES] [-plugin-dir /var/lib/kubelet/device-plugins]
//
// It registers with the kubelet's kubelet.sock in -plugin-dir, and again
// (on a new socket) whenever the kubelet restarts, recreating kubelet.sock.
// SIGTERM removes its socket.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// gpu is one advertised unit.
type gpu struct {
	id   string
	numa int // -1: no topology
}

// parseGPUs reads "gpu0=0,gpu1=0,gpu2=1" (ID=NUMA node; ID alone: no topology).
func parseGPUs(s string) ([]gpu, error) {
	var out []gpu
	for _, f := range strings.Split(s, ",") {
		id, numa, hasNUMA := strings.Cut(strings.TrimSpace(f), "=")
		if id == "" {
			return nil, fmt.Errorf("-gpus %q: an empty ID", s)
		}
		g := gpu{id: id, numa: -1}
		if hasNUMA {
			n, err := strconv.Atoi(numa)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("-gpus %q: NUMA node %q of %s is not a number >= 0", s, numa, id)
			}
			g.numa = n
		}
		if slices.ContainsFunc(out, func(o gpu) bool { return o.id == id }) {
			return nil, fmt.Errorf("-gpus %q: %s twice", s, id)
		}
		out = append(out, g)
	}
	return out, nil
}

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	gpus []gpu
	env  string
}

func (p *plugin) devices() []*pluginapi.Device {
	out := make([]*pluginapi.Device, len(p.gpus))
	for i, g := range p.gpus {
		out[i] = &pluginapi.Device{ID: g.id, Health: pluginapi.Healthy}
		if g.numa >= 0 {
			out[i].Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(g.numa)}}}
		}
	}
	return out
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the GPUs once; they never change.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices()}); err != nil {
		return err
	}
	log.Printf("advertised %d GPUs", len(p.gpus))
	<-stream.Context().Done()
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		ids := slices.Clone(c.GetDevicesIds())
		for _, id := range ids {
			if !slices.ContainsFunc(p.gpus, func(g gpu) bool { return g.id == id }) {
				return nil, status.Errorf(codes.InvalidArgument, "no GPU %q", id)
			}
		}
		slices.Sort(ids)
		log.Printf("allocated %s", strings.Join(ids, ","))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{p.env: strings.Join(ids, ",")},
		})
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// fileID tells a recreated file from the old one.
type fileID struct {
	dev, ino uint64
	ctime    int64
}

func idOf(path string) (fileID, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), st.Ino, st.Ctim.Nano()}, true
}

// serveOnce serves the plugin on a fresh socket, registers it with the
// kubelet, and returns when the kubelet's socket is replaced or ours is
// gone (a kubelet restart), or ctx ends.
func serveOnce(ctx context.Context, p *plugin, dir, resource, name string) error {
	sock := filepath.Join(dir, name)
	kubelet := filepath.Join(dir, filepath.Base(pluginapi.KubeletSocket))
	kid, ok := idOf(kubelet)
	if !ok {
		return fmt.Errorf("no kubelet socket %s", kubelet)
	}
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(ln) }() // ends with Stop
	defer func() {
		srv.Stop()
		_ = os.Remove(sock)
	}()
	sid, _ := idOf(sock)

	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: name, ResourceName: resource, Options: &pluginapi.DevicePluginOptions{},
	})
	cancel()
	conn.Close()
	if err != nil {
		return fmt.Errorf("registering %s: %w", resource, err)
	}
	log.Printf("registered %s on %s", resource, sock)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if now, ok := idOf(kubelet); !ok || now != kid {
			log.Printf("the kubelet restarted")
			return nil
		}
		if now, ok := idOf(sock); !ok || now != sid {
			log.Printf("our socket %s is gone", sock)
			return nil
		}
	}
}

func main() {
	gpus := flag.String("gpus", "gpu0=0,gpu1=0,gpu2=1,gpu3=1", "the GPUs: ID=NUMA,... (ID alone: no topology)")
	resource := flag.String("resource", "nvidia.com/gpu", "the extended resource")
	env := flag.String("env", "NVIDIA_VISIBLE_DEVICES", "the container's environment variable naming its GPUs")
	dir := flag.String("plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device plugin dir")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	list, err := parseGPUs(*gpus)
	if err != nil {
		log.Fatal(err)
	}
	p := &plugin{gpus: list, env: *env}
	name := "fakegpu-" + strings.NewReplacer("/", "-", ".", "-").Replace(*resource) + ".sock"

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	for ctx.Err() == nil {
		if err := serveOnce(ctx, p, *dir, *resource, name); err != nil && !errors.Is(err, context.Canceled) {
			log.Printf("%v; again in 1 s", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	log.Printf("stopped")
}
