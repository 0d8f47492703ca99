package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// endpoint is one resource's gRPC server on its socket.
type endpoint struct {
	path string
	id   fileID
	srv  *grpc.Server
}

// socketPrefix starts every endpoint file of resource in the plugin dir:
// rdma/hca gives rdma-cdi-rdma-hca. The name has no dot, so the dot after
// it cannot belong to another resource's name.
func socketPrefix(resource string) string {
	return "rdma-cdi-" + strings.NewReplacer("/", "-", ".", "-").Replace(resource)
}

// socketName is a new endpoint's file: rdma-cdi-rdma-hca.<token>.sock,
// a name never registered before. The kubelet (1.37) keys its endpoints
// by socket path and answers a second registration of a path it still
// holds with "device plugin already connected", after which it has lost
// both: the resource keeps its last device list, and health changes no
// longer reach it.
func socketName(resource string) string {
	return socketPrefix(resource) + "." + strconv.FormatInt(time.Now().UnixNano(), 36) + ".sock"
}

// removeDeadSockets removes the endpoint files of resource that nobody
// serves: those of an agent that was killed, and the fixed name
// (rdma-cdi-rdma-hca.sock) of versions before endpoint names had a token.
// A socket that answers belongs to a running agent and is left alone.
func removeDeadSockets(dir, resource string) {
	prefix := socketPrefix(resource)
	paths, _ := filepath.Glob(filepath.Join(dir, prefix+".*.sock"))
	paths = append(paths, filepath.Join(dir, prefix+".sock"))
	for _, path := range paths {
		if _, err := socketID(path); err != nil {
			continue // gone, or not a socket: not ours to remove
		}
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			conn.Close()
			continue
		}
		os.Remove(path)
	}
}

// serve listens on path and serves s.
func serve(path string, s *server) (*endpoint, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	id, err := socketID(path)
	if err != nil {
		ln.Close()
		return nil, err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, s)
	go srv.Serve(ln) //nolint:errcheck // returns when stop closes the listener
	return &endpoint{path: path, id: id, srv: srv}, nil
}

// stop ends the server and removes its socket, unless the kubelet already
// replaced the file.
func (e *endpoint) stop() {
	e.srv.Stop()
	if id, err := socketID(e.path); err == nil && id == e.id {
		os.Remove(e.path)
	}
}

// socketID identifies the socket file at path; anything but a socket is
// an error that says what it is.
func socketID(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, fmt.Errorf("%s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fileID{}, fmt.Errorf("%s is not a socket (mode %#o)", path, st.Mode&unix.S_IFMT)
	}
	return fileID{dev: st.Dev, ino: st.Ino, ctime: st.Ctim.Nano()}, nil
}

// register tells the kubelet at kubeletSocket that resource is served on
// endpoint (a file name in the kubelet's plugin dir).
func register(ctx context.Context, kubeletSocket, resource, endpoint string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to the kubelet at %s: %w", kubeletSocket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     endpoint,
		ResourceName: resource,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	if err != nil {
		return fmt.Errorf("registering with the kubelet at %s: %w", kubeletSocket, err)
	}
	return nil
}
