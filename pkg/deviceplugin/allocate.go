package deviceplugin

import (
	"path/filepath"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Target is where allocations point: the CDI kind of the node's spec, and
// the host's dev root for the annotations fallback.
type Target struct {
	Vendor, Class string
	DevRoot       string
	Allocation    config.Allocation
}

// annotationPlugin names rdma-cdi in the cdi.k8s.io annotation key.
const annotationPlugin = "rdma-cdi"

// Response is what one container that got units ids of pool receives. By
// default the CDI device names of its HCAs, which the runtime resolves
// against the spec, hooks included. With the annotations fallback, for a
// kubelet or runtime without CDI: the device nodes, and the same names in
// a cdi.k8s.io annotation, which rdma-cdi's runtime wrapper injects.
func (t Target) Response(pool Pool, hcas []HCA) (*pluginapi.ContainerAllocateResponse, error) {
	names := make([]string, len(hcas))
	for i, h := range hcas {
		names[i] = parser.QualifiedName(t.Vendor, t.Class, h.Name)
	}
	resp := &pluginapi.ContainerAllocateResponse{}
	if t.Allocation != config.AllocationAnnotations {
		for _, n := range names {
			resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: n})
		}
		return resp, nil
	}
	key, err := cdi.AnnotationKey(annotationPlugin, strings.ReplaceAll(pool.Resource.Name, "/", "-"))
	if err != nil {
		return nil, err
	}
	value, err := cdi.AnnotationValue(names)
	if err != nil {
		return nil, err
	}
	resp.Annotations = map[string]string{key: value}
	for _, h := range hcas {
		for _, cd := range h.CharDevices {
			resp.Devices = append(resp.Devices, t.deviceSpec(cd))
		}
	}
	if pool.RDMACM != nil {
		resp.Devices = append(resp.Devices, t.deviceSpec(*pool.RDMACM))
	}
	return resp, nil
}

// deviceSpec maps a node under the dev root to the same path in /dev.
func (t Target) deviceSpec(cd model.CharDevice) *pluginapi.DeviceSpec {
	host := filepath.Join(t.DevRoot, strings.TrimPrefix(cd.Path, "/dev/"))
	return &pluginapi.DeviceSpec{ContainerPath: cd.Path, HostPath: host, Permissions: "rw"}
}
