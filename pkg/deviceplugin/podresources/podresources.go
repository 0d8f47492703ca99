// Package podresources reads which devices the kubelet allocated to a pod,
// through its PodResources API (the local socket, read-only). The device
// plugin's Allocate is told device IDs but never the pod; this is how the
// agent learns, when a pod's sandbox starts, which HCAs that pod holds.
package podresources

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where the kubelet serves the API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// maxMessage bounds a List answer: a node of 110 pods, each with a few
// containers and devices, answers in a few KiB; the default 4 MiB would
// also do, but a kubelet with thousands of pods must not be cut off.
const maxMessage = 16 << 20

// Client asks the kubelet at Socket. The zero value uses DefaultSocket.
type Client struct {
	Socket string
	// Timeout bounds one call (default 2 s, NRI's own budget per event).
	Timeout time.Duration

	once sync.Once
	conn *grpc.ClientConn
	err  error
}

func (c *Client) lister() (podresourcesapi.PodResourcesListerClient, error) {
	c.once.Do(func() {
		socket := c.Socket
		if socket == "" {
			socket = DefaultSocket
		}
		// NewClient connects lazily, and again after the kubelet restarts.
		c.conn, c.err = grpc.NewClient("unix://"+socket,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage)))
	})
	if c.err != nil {
		return nil, c.err
	}
	return podresourcesapi.NewPodResourcesListerClient(c.conn), nil
}

// Devices are the device IDs the kubelet allocated to pod namespace/name,
// by resource name, over all its containers (init containers included).
func (c *Client) Devices(ctx context.Context, namespace, name string) (map[string][]string, error) {
	lister, err := c.lister()
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources: %w", err)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := lister.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources List: %w", err)
	}
	return PodDevices(resp.GetPodResources(), namespace, name), nil
}

// Close ends the connection.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// PodDevices picks pod namespace/name's devices out of a List answer: its
// device IDs by resource name, each list sorted and without repeats; nil
// when the pod holds none or is not listed.
func PodDevices(pods []*podresourcesapi.PodResources, namespace, name string) map[string][]string {
	var out map[string][]string
	for _, p := range pods {
		if p.GetNamespace() != namespace || p.GetName() != name {
			continue
		}
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				if len(d.GetDeviceIds()) == 0 {
					continue
				}
				if out == nil {
					out = map[string][]string{}
				}
				out[d.GetResourceName()] = append(out[d.GetResourceName()], d.GetDeviceIds()...)
			}
		}
	}
	for r, ids := range out {
		slices.Sort(ids)
		out[r] = slices.Compact(ids)
	}
	return out
}
