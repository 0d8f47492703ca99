package hooks

import (
	"errors"
	"fmt"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/sandboxlist"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// sandboxID is the id of the container's pod sandbox, as its CRI runtime
// wrote it ("" outside Kubernetes): the id NRI reports the sandbox by.
func (c *Container) sandboxID() string {
	ann := c.annotations()
	if ann["io.container.manager"] == "cri-o" {
		return ann["io.kubernetes.cri-o.SandboxID"]
	}
	return ann["io.kubernetes.cri.sandbox-id"]
}

// ErrSandboxNotHandled is CheckPodSandbox's error for a container whose pod
// the pod-network agent has not looked at yet.
var ErrSandboxNotHandled = errors.New("the rdma-cdi agent has not given this pod its RoCE interfaces yet")

// CheckPodSandbox refuses a Kubernetes container that holds an HCA, in a
// pod with its own network namespace, whose sandbox is not in the index
// the pod-network agent keeps in stateDir (pkg/podnetwork/sandboxlist): the runtime
// started that sandbox while the agent's NRI plugin was away, so the pod
// has no interface on its HCAs and NCCL would find no usable GID. The
// kubelet creates the container again after a backoff; by then the agent,
// back and synchronized, has given the sandbox its interfaces. With no
// index (pod networking off, or no agent ever ran) nothing is checked.
func CheckPodSandbox(c *Container, stateDir string, sys sysfs.Root) error {
	id := c.sandboxID()
	if id == "" || hostNetwork(c.Spec) {
		return nil
	}
	if len(ContainerRDMADevices(model.Node{Devices: verbsDevices(sys)}, c.Spec)) == 0 {
		return nil
	}
	handled, err := sandboxlist.Contains(stateDir, id)
	switch {
	case errors.Is(err, sandboxlist.ErrNoIndex):
		return nil
	case err != nil:
		return fmt.Errorf("pod sandbox %s: %w", id, err)
	case !handled:
		return fmt.Errorf("pod sandbox %s: %w (is its NRI plugin connected to the runtime?); the kubelet will retry", id, ErrSandboxNotHandled)
	}
	return nil
}
