package doctor

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/hostlibs"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// EFAFacts are what an AWS EFA node offers a container besides its
// devices: the host's NCCL offer (aws-ofi-nccl, libfabric) as the hook
// finds it.
type EFAFacts struct {
	// NCCL is hostlibs.FindNCCL's answer for the config's nccl_plugins,
	// Warnings what it could not use.
	NCCL     model.HostNCCL
	Warnings []string
	// PluginsEnabled is nccl_plugins.enabled: the offer is lent at all.
	PluginsEnabled bool
}

// checkEFA judges what a container on an EFA node needs: the devices'
// uverbs nodes and RDMA read (GPUDirect), unlimited memlock, the host's
// efa verbs provider, libfabric and aws-ofi-nccl. A node without EFA
// devices gets no line.
func checkEFA(f Facts) []Result {
	var efa []model.Device
	for _, d := range f.Node.Devices {
		if d.IsEFA() {
			efa = append(efa, d)
		}
	}
	if len(efa) == 0 {
		return nil
	}
	return []Result{efaDevices(f, efa), efaMemlock(f), efaProvider(f), efaLibfabric(f), efaNCCLPlugin(f)}
}

// efaDevices: libfabric drops an EFA without its uverbs node, and turns
// GPUDirect RDMA on only on a generation with RDMA read.
func efaDevices(f Facts, efa []model.Device) Result {
	r := Result{Name: "efa-devices"}
	var noNode, noRead []string
	for _, d := range efa {
		if n, ok := f.DevNodes[verbsPath(d)]; d.Verbs == nil || !ok || !n.Exists || !n.Char {
			noNode = append(noNode, d.Name)
		}
		if !d.EFARDMARead() {
			noRead = append(noRead, fmt.Sprintf("%s (%s)", d.Name, d.PCIDevice))
		}
	}
	r.Status, r.Detail = Pass, fmt.Sprintf("%d EFA device(s), each with its uverbs node", len(efa))
	if len(noNode) > 0 {
		r.Status = Warn
		r.Detail = fmt.Sprintf("%d EFA device(s); no uverbs node for %s", len(efa), strings.Join(noNode, ", "))
		r.Fix = "modprobe efa ib_uverbs; see the uverbs-nodes line"
	}
	if len(noRead) > 0 {
		r.Detail += "; no RDMA read (first-generation EFA) on " + strings.Join(noRead, ", ") + ": containers get no FI_EFA_USE_DEVICE_RDMA, so no GPUDirect RDMA"
	} else {
		r.Detail += "; all have RDMA read: containers that get the host's libfabric get FI_EFA_USE_DEVICE_RDMA=1 (GPUDirect RDMA)"
	}
	return r
}

func verbsPath(d model.Device) string {
	if d.Verbs == nil {
		return ""
	}
	return d.Verbs.Path
}

// efaMemlock: libfabric's EFA provider pins its bounce buffers and keeps a
// cache of registered memory, and AWS asks for unlimited memlock.
func efaMemlock(f Facts) Result {
	r := Result{Name: "efa-memlock"}
	if f.WantMemlock == config.Unlimited {
		r.Status, r.Detail = Pass, "the memlock hook raises containers' memlock to unlimited (hooks.memlock), as libfabric's EFA provider wants"
		return r
	}
	r.Status = Warn
	r.Detail = fmt.Sprintf("hooks.memlock is %s: libfabric's EFA provider wants unlimited memlock and may fail to register its buffers", formatLimit(f.WantMemlock))
	r.Fix = `set hooks.memlock = "unlimited"`
	return r
}

// efaProvider: libfabric's efa provider opens the devices through
// rdma-core's efa verbs provider (libefa).
func efaProvider(f Facts) Result {
	r := Result{Name: "efa-provider"}
	i := slices.IndexFunc(f.Stack.Files, func(h model.HostFile) bool { return h.Role == model.RoleProvider && h.Provider == "efa" })
	if i < 0 {
		r.Status = Warn
		r.Detail = "the host's rdma-core has no efa provider (libefa): images without a stack of their own cannot open the EFA devices"
		r.Fix = "install AWS's EFA software (aws-efa-installer) or rdma-core's providers (ibverbs-providers, rdma-core)"
		return r
	}
	r.Status, r.Detail = Pass, "the host's rdma-core has the efa provider: "+f.Stack.Files[i].Path
	return r
}

// efaLibfabric: aws-ofi-nccl needs the libfabric it was built against,
// which the hook lends with it.
func efaLibfabric(f Facts) Result {
	r := Result{Name: "efa-libfabric"}
	if len(f.EFA.NCCL.Libfabric) == 0 {
		r.Status = Warn
		r.Detail = "no libfabric.so* in nccl_plugins.libfabric_dirs: images without a libfabric of their own get no EFA transport for NCCL"
		r.Fix = "install AWS's EFA software (aws-efa-installer), or name its directory in nccl_plugins.libfabric_dirs"
		return r
	}
	r.Status, r.Detail = Pass, "the host's libfabric: "+strings.Join(f.EFA.NCCL.Libfabric, ", ")
	r.Detail += "; lent with FI_PROVIDER=efa to containers given EFA devices whose image has neither libfabric nor an NCCL plugin"
	return notLent(r, f.EFA)
}

// efaNCCLPlugin: NCCL reaches EFA only through the aws-ofi-nccl net
// plugin (libnccl-net-ofi.so, libnccl-net.so in older installs).
func efaNCCLPlugin(f Facts) Result {
	r := Result{Name: "efa-nccl-plugin"}
	var found []string
	for _, dir := range f.EFA.NCCL.PluginDirs {
		for _, name := range dir.Net {
			if strings.Contains(dir.Path, "aws-ofi-nccl") || strings.HasPrefix(name, hostlibs.NCCLNetPrefix+"-ofi") {
				found = append(found, path.Join(dir.Path, name))
			}
		}
	}
	if len(found) == 0 {
		r.Status = Warn
		r.Detail = "no aws-ofi-nccl plugin in nccl_plugins.dirs: NCCL in an image without its own falls back to TCP sockets"
		r.Fix = "install aws-ofi-nccl (aws-efa-installer), or name its directory in nccl_plugins.dirs"
		return r
	}
	r.Status, r.Detail = Pass, "aws-ofi-nccl: "+strings.Join(found, ", ")
	return notLent(r, f.EFA)
}

// notLent turns a found offer into a warning when nothing of it is lent.
func notLent(r Result, e EFAFacts) Result {
	if !e.PluginsEnabled {
		r.Status = Warn
		r.Detail += "; never lent (nccl_plugins.enabled = false)"
		r.Fix = "set nccl_plugins.enabled = true, or ship libfabric and aws-ofi-nccl in the images"
	}
	if len(e.Warnings) > 0 {
		r.Detail += "; " + strings.Join(e.Warnings, "; ")
	}
	return r
}
