package hooks

import (
	"context"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Settings are what the state hooks take from their command line: the
// config and the roots.
type Settings struct {
	Config config.Config
	// ConfigErr is why the config file could not be used: Config then
	// holds the defaults, and every container these hooks run for, which
	// got our CDI devices, is refused with it.
	ConfigErr error
	Roots     model.Roots
}

// LDCacheStep adds opts' folders to the container's linker cache.
func LDCacheStep(opts LDCacheOptions) Step {
	return func(ctx context.Context, c *Container, log *logrus.Entry) error {
		return UpdateLDCache(ctx, c, opts, log)
	}
}

// UserSpaceStep runs the image's own RDMA user space or lends the host's
// (ProvideUserSpace), by the config's default and the container's
// override.
func (s Settings) UserSpaceStep(opts UserSpaceOptions) Step {
	return func(ctx context.Context, c *Container, log *logrus.Entry) error {
		o := opts
		o.NodeDefault = s.Config.CDI.UserSpace
		if !s.Config.CDI.InjectLibraries {
			o.Lend = nil
		}
		return ProvideUserSpace(ctx, c, o, log)
	}
}

// NCCLConfStep writes the container's NCCL defaults (WriteNCCLConf).
func (s Settings) NCCLConfStep() Step { return s.ncclConfStep(nil, nil) }

// ncclConfStep writes the NCCL defaults with, when plugins is set, the
// variables of the container's NCCL plugins decision, from scan when set.
func (s Settings) ncclConfStep(plugins PluginsDecider, scan ContainerScan) Step {
	return func(_ context.Context, c *Container, log *logrus.Entry) error {
		return WriteNCCLConf(c, NCCLConfOptions{NCCL: s.Config.NCCL, Roots: s.Roots, Plugins: plugins, Scan: scan}, log)
	}
}

// MemlockStep raises the container init's RLIMIT_MEMLOCK to the config's
// hooks.memlock (Memlock).
func (s Settings) MemlockStep() Step {
	return func(_ context.Context, c *Container, log *logrus.Entry) error {
		return Memlock(c, uint64(s.Config.Hooks.Memlock), log)
	}
}
