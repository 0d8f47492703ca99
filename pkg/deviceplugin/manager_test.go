package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
)

// fakeKubelet is the kubelet's registration service on a real socket: it
// records each registration, as the kubelet's device manager does first,
// and refuses an endpoint it was given before, as 1.37's does for one it
// still holds ("device plugin already connected").
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	srv  *grpc.Server
	regs chan *pluginapi.RegisterRequest

	mu   sync.Mutex
	seen map[string]bool
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.seen[r.Endpoint] {
		return nil, fmt.Errorf("device plugin already connected: %s", r.Endpoint)
	}
	k.seen[r.Endpoint] = true
	k.regs <- r
	return &pluginapi.Empty{}, nil
}

// startKubelet serves kubelet.sock in dir, as a (re)started kubelet does:
// it first empties the directory of the plugins' sockets.
func startKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		os.Remove(filepath.Join(dir, e.Name()))
	}
	return startKubeletKeeping(t, dir)
}

// startKubeletKeeping serves kubelet.sock in dir and leaves the rest: a
// kubelet already running when the plugin starts.
func startKubeletKeeping(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{srv: grpc.NewServer(), regs: make(chan *pluginapi.RegisterRequest, 8), seen: map[string]bool{}}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go k.srv.Serve(ln)
	t.Cleanup(k.srv.Stop)
	return k
}

func (k *fakeKubelet) registration(t *testing.T) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case r := <-k.regs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin did not register")
		return nil
	}
}

func dialPlugin(t testing.TB, dir, endpoint string) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

func startManager(t *testing.T, dir string, resources ...config.Resource) (*Manager, *logtest.Hook, func()) {
	t.Helper()
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	m := &Manager{Dir: dir, DevRoot: "/dev", Resources: resources, Recheck: 100 * time.Millisecond, Log: log}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	return m, hook, stop
}

func TestManagerRegistersServesAndReregisters(t *testing.T) {
	dir := t.TempDir()
	kubelet := startKubelet(t, dir)
	m, hook, stop := startManager(t, dir, exclusive)
	select {
	case r := <-kubelet.regs:
		t.Fatalf("registered %v before the first generation (the spec may not exist yet)", r)
	case <-time.After(300 * time.Millisecond):
	}
	cfg := config.Default()
	cfg.DevicePlugin.Resources = []config.Resource{exclusive}
	m.Update(twoSocket(), cfg)
	reg := kubelet.registration(t)
	if reg.ResourceName != exclusive.Name || reg.Version != pluginapi.Version || !reg.Options.GetGetPreferredAllocationAvailable() {
		t.Fatalf("registration %v", reg)
	}
	plugin := dialPlugin(t, dir, reg.Endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := plugin.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || len(first.Devices) != 4 {
		t.Fatalf("first list %v, %v", first, err)
	}
	down := twoSocket()
	down.Devices[2].Ports[0].State = "DOWN"
	m.Update(down, cfg)
	next, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range next.Devices {
		if (d.ID == "mlx5_2") != (d.Health == pluginapi.Unhealthy) {
			t.Errorf("after mlx5_2's port went down: %s %s", d.ID, d.Health)
		}
	}

	resp, err := plugin.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"mlx5_3", "mlx5_4"}}}})
	if err != nil || len(resp.ContainerResponses[0].CdiDevices) != 2 {
		t.Fatalf("allocate %v, %v", resp, err)
	}
	for _, bad := range []*pluginapi.AllocateRequest{
		{},
		{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{}}},
		{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"mlx5_3"}}, {DevicesIds: []string{"../../etc"}}}},
		{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"mlx5_2"}}}},
	} {
		if _, err := plugin.Allocate(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("allocate %v: %v, want InvalidArgument", bad, err)
		}
	}
	pref, err := plugin.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: []string{"mlx5_1", "mlx5_3", "mlx5_4"}, AllocationSize: 2}}})
	if err != nil || strings.Join(pref.ContainerResponses[0].DeviceIDs, ",") != "mlx5_3,mlx5_4" {
		t.Errorf("preferred %v, %v", pref, err)
	}

	// A kubelet restart empties the directory and makes a new kubelet.sock.
	kubelet.srv.Stop()
	kubelet = startKubelet(t, dir)
	defer func() {
		if t.Failed() {
			for _, e := range hook.AllEntries() {
				t.Log(e.Message)
			}
		}
	}()
	again := kubelet.registration(t)
	if _, err := dialPlugin(t, dir, again.Endpoint).GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
		t.Errorf("the plugin's socket after the kubelet restart: %v", err)
	}

	// The same kubelet's socket, changed in place (its ctime): the plugin
	// registers again, on a new endpoint (the kubelet refuses one it holds),
	// and the endpoint it replaces stops only after.
	if err := os.Chmod(filepath.Join(dir, "kubelet.sock"), 0o700); err != nil {
		t.Fatal(err)
	}
	third := kubelet.registration(t)
	if third.Endpoint == again.Endpoint || logged(hook, "already connected") {
		t.Errorf("re-registered %s after %s", third.Endpoint, again.Endpoint)
	}
	waitFor(t, func() bool { _, err := os.Stat(filepath.Join(dir, again.Endpoint)); return os.IsNotExist(err) })
	if _, err := dialPlugin(t, dir, third.Endpoint).GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
		t.Errorf("the new endpoint: %v", err)
	}
	select {
	case r := <-kubelet.regs:
		t.Errorf("registered again (%s) with nothing changed", r.Endpoint)
	case <-time.After(300 * time.Millisecond):
	}
	stop()
	if _, err := os.Stat(filepath.Join(dir, third.Endpoint)); !os.IsNotExist(err) {
		t.Errorf("the plugin's socket is left after stop: %v", err)
	}
}

// TestManagerRemovesDeadSockets: at start the plugin removes its
// resource's sockets that nobody serves (a killed agent's, the fixed name
// of older versions) and leaves a served one and anything not a socket.
func TestManagerRemovesDeadSockets(t *testing.T) {
	dir := t.TempDir()
	dead := func(name string) string {
		ln, err := net.Listen("unix", filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
		return name
	}
	killed, legacy := dead("rdma-cdi-rdma-example-com-hca.k1.sock"), dead("rdma-cdi-rdma-example-com-hca.sock")
	other := dead("rdma-cdi-rdma-example-com-hca-x.k2.sock") // another resource's
	live, err := net.Listen("unix", filepath.Join(dir, "rdma-cdi-rdma-example-com-hca.k3.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if err := os.WriteFile(filepath.Join(dir, "rdma-cdi-rdma-example-com-hca.k4.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	kubelet := startKubeletKeeping(t, dir)
	m, _, stop := startManager(t, dir, exclusive)
	defer stop()
	cfg := config.Default()
	cfg.DevicePlugin.Resources = []config.Resource{exclusive}
	m.Update(twoSocket(), cfg)
	kubelet.registration(t)
	for name, want := range map[string]bool{killed: false, legacy: false, other: true,
		"rdma-cdi-rdma-example-com-hca.k3.sock": true, "rdma-cdi-rdma-example-com-hca.k4.sock": true} {
		if _, err := os.Lstat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s: kept %v, want %v", name, err == nil, want)
		}
	}
}

func TestManagerWaitsForAKubeletSocket(t *testing.T) {
	dir := t.TempDir()
	kubelet := filepath.Join(dir, "kubelet.sock")
	if err := os.WriteFile(kubelet, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m, hook, stop := startManager(t, dir, config.DefaultResource())
	defer stop()
	m.Update(twoSocket(), config.Default())
	waitFor(t, func() bool { return logged(hook, "is not a socket") })
	os.Remove(kubelet)
	waitFor(t, func() bool { return logged(hook, "no such file or directory") })
	k := startKubelet(t, dir)
	if r := k.registration(t); r.ResourceName != "rdma/hca" {
		t.Errorf("registered %v", r)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met in 10s")
}

func logged(hook *logtest.Hook, text string) bool {
	for _, e := range hook.AllEntries() {
		if strings.Contains(e.Message, text) {
			return true
		}
	}
	return false
}
