package hooks

import (
	"path/filepath"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/hostlibs"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
	"github.com/rdma-cdi/rdma-cdi/pkg/userspace"
)

// PluginsDecider gives one container's NCCL plugins decision, made once
// per hook and shared: the user-space step lends what it names and the
// nccl-conf step, which runs beside it, writes its variables. Made once,
// before anything is lent, so that neither step sees the other's mounts.
type PluginsDecider func() (userspace.PluginsDecision, error)

// NCCLPlugins decides what of the host's NCCL offer (config
// nccl_plugins, read under roots.Host at this container's start) the
// container gets, and logs why. Where the host has a libfabric, the EFA
// devices the container gets are taken from scan (nil: a scan of
// roots.Sysfs of its own): they decide whether it comes with the plugins,
// and GPUDirect RDMA.
func NCCLPlugins(c *Container, cfg config.NCCLPlugins, roots model.Roots, scan ContainerScan, log *logrus.Entry) (userspace.PluginsDecision, error) {
	if !cfg.Enabled {
		return userspace.PluginsDecision{}, nil
	}
	env := c.processEnv()
	choice, source, err := userspace.ChoosePlugins(c.annotations(), env)
	if err != nil {
		return userspace.PluginsDecision{}, err
	}
	var host model.HostNCCL
	if choice != userspace.NCCLPluginsNone {
		var warnings []string
		host, warnings = hostlibs.FindNCCL(hostlibs.NCCLOptions{
			HostRoot: roots.Host, Dirs: cfg.Dirs, ConfFile: cfg.ConfFile, CarryKeys: cfg.CarryKeys, LibfabricDirs: cfg.LibfabricDirs,
		})
		for _, w := range warnings {
			log.Warn(w)
		}
		if host.Empty() {
			log.Debug("the host offers no NCCL plugins or nccl.conf keys")
			return userspace.PluginsDecision{}, nil
		}
	}
	var image userspace.ImagePlugins
	var efa []model.Device
	if len(host.PluginDirs) > 0 {
		image = userspace.ProbeNCCLPlugins(c.ImageView(), env)
		if len(host.Libfabric) > 0 && image.Path == "" {
			if scan == nil {
				scan = NewContainerScan(c, roots, nil, log)
			}
			if efa, err = containerEFADevices(scan); err != nil {
				return userspace.PluginsDecision{}, err
			}
		}
		if len(efa) > 0 {
			image.Libfabric = userspace.ProbeLibfabric(c.ImageView(), env, cfg.LibfabricDirs)
		}
	}
	d := userspace.DecidePlugins(host, choice, source, image, efa)
	log.WithField("nccl-plugins", choice).Info(d.Reason)
	return d, nil
}

// containerEFADevices are the EFA devices among the container's, with
// their PCI ids.
func containerEFADevices(scan ContainerScan) ([]model.Device, error) {
	sc, err := scan()
	if err != nil {
		return nil, err
	}
	var efa []model.Device
	for _, d := range sc.Devices {
		if d.IsEFA() {
			efa = append(efa, d)
		}
	}
	return efa, nil
}

// pluginLends are the decision's files as lent files: the host's path
// under hostRoot, the container's the same as the host's own.
func pluginLends(d userspace.PluginsDecision, hostRoot string) []LentFile {
	var out []LentFile
	for _, f := range d.Files {
		out = append(out, LentFile{Path: f, HostPath: filepath.Join(hostRoot, f)})
	}
	return out
}

// pluginVars are the decision's nccl.conf lines.
func pluginVars(d userspace.PluginsDecision) []nccl.Var {
	out := make([]nccl.Var, len(d.Vars))
	for i, v := range d.Vars {
		out[i] = nccl.Var{Name: v.Name, Value: v.Value}
	}
	return out
}
