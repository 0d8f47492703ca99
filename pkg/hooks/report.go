package hooks

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/hookevents"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// criNames are the annotations a CRI runtime writes on a Kubernetes
// container: its namespace, pod and container name. CRI-O also copies the
// pod's own annotations into the container's, so a pod could set
// containerd's keys: for CRI-O (io.container.manager) only CRI-O's keys,
// which it writes last, are read.
var (
	containerdNames = [3]string{"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.container-name"}
	crioNames       = [3]string{"io.kubernetes.pod.namespace", "io.kubernetes.pod.name", "io.kubernetes.container.name"}
)

// Outcome describes the container for hook's report to the agent: its id,
// its init (pid, start time, and cgroup: see initCgroup), its pod where a
// CRI runtime named one, the HCAs whose uverbs char devices config.json
// gave it (matched as nccl-conf matches them: by device number, whatever
// path the container sees them at; looked up under sys), and the user
// space the user-space step chose. A name that the agent would refuse
// is left out rather than losing the report.
func (c *Container) Outcome(hook string, sys sysfs.Root) hookevents.Outcome {
	o := hookevents.Outcome{Hook: hook, ContainerID: c.State.ID, Pid: c.ProcPid, UserSpace: c.UserSpace}
	if start, err := hookevents.ProcessStart("/proc", c.ProcPid); err == nil {
		o.StartTime = start
	}
	o.Cgroup = c.initCgroup(sys)
	ann := c.annotations()
	names := containerdNames
	if ann["io.container.manager"] == "cri-o" {
		names = crioNames
	}
	if ann[names[1]] != "" {
		o.Namespace, o.Pod, o.Container = nameOrNone(ann[names[0]]), nameOrNone(ann[names[1]]), nameOrNone(ann[names[2]])
	}
	if !hookevents.IsName(o.ContainerID) {
		o.ContainerID = "unknown"
	}
	o.Devices = ContainerRDMADevices(model.Node{Devices: verbsDevices(sys)}, c.Spec)
	return o
}

// initCgroup is the cgroup of the container's init, as a path under the
// cgroup mount root (see hookevents.ProcCgroups), which the agent, without
// the host's /proc, checks the container's liveness by, at the same path
// under its own sysfs root. The paths in /proc/PID/cgroup are relative to
// the reader's cgroup namespace, so the first is reported that names,
// under sys, a cgroup listing the init: "" where none does (a
// createContainer hook in the container's own cgroup namespace), and for
// a hierarchy's root, which every process outside a container shares. The
// agent then falls back to pid and start time where it has the host's
// /proc.
func (c *Container) initCgroup(sys sysfs.Root) string {
	f, err := c.openProc("cgroup", unix.O_RDONLY)
	if err != nil {
		return ""
	}
	defer f.Close()
	own, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return ""
	}
	pid := strconv.Itoa(c.Pid)
	for _, cgroup := range hookevents.ProcCgroups(own, hookevents.CgroupLayoutAt(sys.Path("fs/cgroup"))) {
		procs, err := os.ReadFile(sys.Path("fs/cgroup", cgroup, "cgroup.procs"))
		if err == nil && slices.Contains(strings.Fields(string(procs)), pid) {
			return cgroup
		}
	}
	return ""
}

func nameOrNone(s string) string {
	if hookevents.IsName(s) {
		return s
	}
	return ""
}

// verbsDevices are the HCAs with their uverbs char devices alone, from
// class/infiniband_verbs under sys: what ContainerRDMADevices matches a
// container's devices against, without a discovery on every start.
func verbsDevices(sys sysfs.Root) []model.Device {
	dirs, _ := filepath.Glob(sys.Path("class/infiniband_verbs", "uverbs*"))
	r := sysfs.NewReader()
	out := make([]model.Device, 0, len(dirs))
	for _, dir := range dirs {
		devPath := filepath.Join(dir, "dev")
		dev, err := r.Read(devPath)
		if err != nil {
			continue
		}
		major, minor, err := sysfs.ParseDevNumbers(devPath, dev)
		if err != nil {
			continue
		}
		if ibdev, err := r.Read(filepath.Join(dir, "ibdev")); err == nil && hookevents.IsName(ibdev) {
			out = append(out, model.Device{Name: ibdev,
				Verbs: &model.CharDevice{Path: "/dev/infiniband/" + filepath.Base(dir), Major: major, Minor: minor}})
		}
	}
	return out
}
