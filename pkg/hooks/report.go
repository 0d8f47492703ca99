package hooks

import (
	"path"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/hookevents"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// criNames are the annotations CRI runtimes put on a Kubernetes container:
// its namespace, pod and container name (containerd's, then CRI-O's).
var criNames = [][3]string{
	{"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.container-name"},
	{"io.kubernetes.pod.namespace", "io.kubernetes.pod.name", "io.kubernetes.container.name"},
}

// Outcome describes the container for hook's report to the agent: its id,
// its init (pid and start time), its pod where a CRI runtime named one,
// the HCAs whose uverbs nodes config.json gave it (their ibdev read under
// sys), and the user space the user-space step chose.
func (c *Container) Outcome(hook string, sys sysfs.Root) hookevents.Outcome {
	o := hookevents.Outcome{Hook: hook, ContainerID: c.State.ID, Pid: c.ProcPid, UserSpace: c.UserSpace}
	if start, err := hookevents.ProcessStart(c.ProcPid); err == nil {
		o.StartTime = start
	}
	ann := c.annotations()
	for _, names := range criNames {
		if ann[names[1]] != "" {
			o.Namespace, o.Pod, o.Container = ann[names[0]], ann[names[1]], ann[names[2]]
			break
		}
	}
	if c.Spec.Linux == nil {
		return o
	}
	r := sysfs.NewReader()
	for _, d := range c.Spec.Linux.Devices {
		dir, node := path.Split(d.Path)
		if dir != "/dev/infiniband/" || !strings.HasPrefix(node, "uverbs") {
			continue
		}
		if ibdev, err := r.Read(sys.Path("class/infiniband_verbs", node, "ibdev")); err == nil {
			o.Devices = append(o.Devices, ibdev)
		}
	}
	return o
}
