package hooks

import (
	"errors"
	"fmt"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
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

// CheckPodSandbox refuses, with pod networking on (pn.Enabled), a
// Kubernetes container that holds an HCA, in a pod with its own network
// namespace, whose sandbox is not in the list the pod-network agent keeps
// in pn.StateDir (pkg/podnetwork/sandboxlist): the runtime started that
// sandbox while the agent's NRI plugin was away, so the pod has no
// interface on its HCAs and NCCL would find no usable GID. The kubelet
// creates the container again after a backoff; by then the agent, back
// and synchronized, has given the sandbox its interfaces.
//
// Whether pod networking is on comes from the config file the install
// wrote, never from the list: the list lives on a tmpfs, so it is missing
// after a reboot, and after an install or upgrade that turns pod
// networking on, until the agent has written it. A missing list then
// refuses too (fail closed). With pod networking off nothing is checked,
// whatever list a former agent left.
func CheckPodSandbox(c *Container, pn config.PodNetwork, sys sysfs.Root) error {
	if !pn.Enabled {
		return nil
	}
	id := c.sandboxID()
	if id == "" || hostNetwork(c.Spec) {
		return nil
	}
	if len(ContainerRDMADevices(model.Node{Devices: verbsDevices(sys)}, c.Spec)) == 0 {
		return nil
	}
	handled, err := sandboxlist.Contains(pn.StateDir, id)
	switch {
	case errors.Is(err, sandboxlist.ErrNoIndex):
		return fmt.Errorf("pod sandbox %s: %w: pod networking is on (pod_network.enabled) and the agent's list of handled sandboxes is missing (%w; is the agent running, with pod networking on?); the kubelet will retry", id, ErrSandboxNotHandled, err)
	case err != nil:
		return fmt.Errorf("pod sandbox %s: %w", id, err)
	case !handled:
		return fmt.Errorf("pod sandbox %s: %w (is its NRI plugin connected to the runtime?); the kubelet will retry", id, ErrSandboxNotHandled)
	}
	return nil
}
