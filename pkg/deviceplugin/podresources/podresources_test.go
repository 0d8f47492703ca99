package podresources

import (
	"context"
	"net"
	"path/filepath"
	"reflect"
	"testing"

	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

func pod(ns, name string, containers ...*podresourcesapi.ContainerResources) *podresourcesapi.PodResources {
	return &podresourcesapi.PodResources{Namespace: ns, Name: name, Containers: containers}
}

func container(name string, devs ...*podresourcesapi.ContainerDevices) *podresourcesapi.ContainerResources {
	return &podresourcesapi.ContainerResources{Name: name, Devices: devs}
}

func devices(resource string, ids ...string) *podresourcesapi.ContainerDevices {
	return &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

var listed = []*podresourcesapi.PodResources{
	pod("train", "master-0",
		container("init", devices("rdma/hca", "hca-7")),
		container("pytorch", devices("rdma/hca", "hca-3"), devices("baidu.com/a100_80g_cgpu", "gpu-1", "gpu-0")),
		container("sidecar")),
	pod("other", "master-0", container("pytorch", devices("rdma/hca", "hca-9"))),
	pod("train", "worker-0", container("pytorch", devices("rdma/hca", "hca-3"), devices("rdma/hca", "hca-3"))),
}

func TestPodDevices(t *testing.T) {
	cases := []struct {
		ns, name string
		want     map[string][]string
	}{
		// Every container's devices, init containers included, sorted;
		// the pod of the same name in another namespace is not this one.
		{"train", "master-0", map[string][]string{"rdma/hca": {"hca-3", "hca-7"}, "baidu.com/a100_80g_cgpu": {"gpu-0", "gpu-1"}}},
		{"train", "worker-0", map[string][]string{"rdma/hca": {"hca-3"}}},
		{"train", "absent", nil},
	}
	for _, c := range cases {
		if got := PodDevices(listed, c.ns, c.name); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s/%s: %v, want %v", c.ns, c.name, got, c.want)
		}
	}
}

type fakeKubelet struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
}

func (fakeKubelet) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{PodResources: listed}, nil
}

// TestClientDevices asks a gRPC server on a unix socket, as the kubelet
// serves it; a socket with nobody behind it is an error naming the API.
func TestClientDevices(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, fakeKubelet{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	c := &Client{Socket: socket}
	defer c.Close()
	got, err := c.Devices(context.Background(), "train", "worker-0")
	if err != nil || !reflect.DeepEqual(got, map[string][]string{"rdma/hca": {"hca-3"}}) {
		t.Fatalf("Devices = %v, %v", got, err)
	}

	gone := &Client{Socket: filepath.Join(t.TempDir(), "none.sock")}
	defer gone.Close()
	if _, err := gone.Devices(context.Background(), "train", "worker-0"); err == nil {
		t.Fatal("no error from a socket nobody serves")
	}
}
