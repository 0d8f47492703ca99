package deviceplugin

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sirupsen/logrus"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
)

// BenchmarkAllocate measures what the kubelet waits for at a pod start: an
// Allocate round trip over the plugin's unix socket, beside an empty RPC on
// the same connection (the gRPC floor), for both kinds of resource.
func BenchmarkAllocate(b *testing.B) {
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	cases := []struct {
		name string
		r    config.Resource
		ids  []string
	}{
		{"shared", config.DefaultResource(), []string{"hca-7"}},
		{"exclusive-2", exclusive, []string{"mlx5_2", "mlx5_3"}},
	}
	for _, c := range cases {
		s := newServer(c.r.Name, log, nil)
		s.update(Select(twoSocket(), config.Default().NCCL, c.r), Target{Vendor: "rdma.example.com", Class: "hca", Allocation: config.AllocationCDIDevices})
		dir := b.TempDir()
		ep, err := serve(filepath.Join(dir, "p.sock"), s)
		if err != nil {
			b.Fatal(err)
		}
		client := dialPlugin(b, dir, "p.sock")
		ctx := context.Background()
		req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: c.ids}}}
		b.Run(c.name+"/empty-rpc", func(b *testing.B) {
			for b.Loop() {
				if _, err := client.GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/allocate", func(b *testing.B) {
			for b.Loop() {
				if _, err := client.Allocate(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
		ep.stop()
	}
}
