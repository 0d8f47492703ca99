package node

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// registrar is the kubelet's registration service, for a plugin run
// without a kubelet: it opens ListAndWatch on each plugin that registers
// and counts the lists it streams.
type registrar struct {
	pluginapi.UnimplementedRegistrationServer
	dir   string
	lists chan int
}

func (r *registrar) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(r.dir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	go func() {
		defer conn.Close()
		stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(context.Background(), &pluginapi.Empty{})
		for err == nil {
			var l *pluginapi.ListAndWatchResponse
			if l, err = stream.Recv(); err == nil {
				r.lists <- len(l.Devices)
			}
		}
	}()
	return &pluginapi.Empty{}, nil
}

// BenchmarkDevicePluginMemory reports the resident memory of `rdma-cdi
// device-plugin` serving both resources of a 9-HCA node at rest, and its
// peak while the node is hot-unplugged and replugged (seed002 <-> seed004,
// each swap followed by a SIGHUP-triggered regeneration) b.N times.
// Run: go test ./test/e2e/node -run XXX -bench DevicePluginMemory -benchtime 20x
func BenchmarkDevicePluginMemory(b *testing.B) {
	node := e2e.NewFixtureNode(b, "seed002")
	other, err := fixture.LoadBundled("seed004")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		b.Fatal(err)
	}
	reg := &registrar{dir: dir, lists: make(chan int, 1024)}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, reg)
	go srv.Serve(ln)
	defer srv.Stop()

	cmd := exec.Command(e2e.Binary(b, "rdma-cdi-agent"), append(node.Roots(), "--config", node.Config, "--log-level", "warn",
		"--spec-dir", filepath.Join(dir, "cdi"), "device-plugin", "--plugin-dir", dir, "--no-netlink", "--no-uevents",
		"--resource", "rdma/hca=shared", "--resource", "rdma.example.com/hca=exclusive")...)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	for range 2 { // both resources listed once
		waitList(b, reg.lists)
	}
	time.Sleep(time.Second)
	rest := statusKiB(b, cmd.Process.Pid, "VmRSS")

	topos := []fixture.Topology{other, node.Topo}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := node.Rebuild(topos[i%2]); err != nil {
			b.Fatal(err)
		}
		cmd.Process.Signal(syscall.SIGHUP)
		waitList(b, reg.lists) // the exclusive resource's units changed
	}
	b.StopTimer()
	b.ReportMetric(float64(rest), "rest-RSS-KiB")
	b.ReportMetric(float64(statusKiB(b, cmd.Process.Pid, "VmHWM")), "peak-RSS-KiB")
}

func waitList(b *testing.B, lists <-chan int) {
	b.Helper()
	select {
	case <-lists:
	case <-time.After(30 * time.Second):
		b.Fatal("no ListAndWatch update in 30s")
	}
}

// statusKiB reads a "kB" field of /proc/PID/status.
func statusKiB(b *testing.B, pid int, field string) int {
	b.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
