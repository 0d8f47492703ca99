package hooks

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/hookevents"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/userspace"
)

// UserSpaceOptions steer ProvideUserSpace.
type UserSpaceOptions struct {
	// Lend are the host's files ("CONTAINERPATH=HOSTPATH", the spec's
	// --lend args): the matched set this node lends.
	Lend []string
	// Providers are the providers the node's HCAs use, checked in an image
	// that brings its own stack (empty: unknown).
	Providers []string
	// NodeDefault is the config's cdi.user_space.
	NodeDefault model.UserSpaceMode
	// LDCache refreshes the linker cache after lending (its Folders are
	// the lent libraries' directories).
	LDCache LDCacheOptions
	// Plugins, when set, is the container's NCCL plugins decision: its
	// dirs and files are lent too, the dirs added to the linker cache.
	Plugins PluginsDecider
	// HostRoot is where the host's paths of Plugins' decision lie.
	HostRoot string
}

// ProvideUserSpace gives the container its RDMA user space: the image's
// own when it carries one (nothing is mounted, no ldconfig runs), else the
// host's matched set, lent and added to the linker cache. The decision and
// its reason go to the hook log with the container's id; what will not
// work in the container is a warning there, never a patch with host files.
func ProvideUserSpace(ctx context.Context, c *Container, opts UserSpaceOptions, log *logrus.Entry) error {
	files := make([]LentFile, 0, len(opts.Lend))
	for _, arg := range opts.Lend {
		f, err := ParseLentFile(arg)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	env := c.processEnv()
	choice, err := userspace.Choose(opts.NodeDefault, c.annotations(), env)
	if err != nil {
		return err
	}
	image := userspace.Probe(c.ImageView(), env)
	d := userspace.Decide(choice, image, opts.Providers, len(files) > 0)
	for _, note := range image.Unreadable {
		log.Debugf("reading the image: %s", note)
	}
	stack := hookevents.UserSpaceImage
	if d.Lend {
		stack = hookevents.UserSpaceHost
	}
	c.UserSpace = stack
	log = log.WithFields(logrus.Fields{"user-space": stack, "user-space-mode": string(d.Mode)})
	log.Info(d.Reason)
	for _, p := range d.Problems {
		log.Warn(p)
	}
	var lend []LentFile
	ldcache := opts.LDCache
	if d.Lend {
		lend = files
	} else {
		ldcache.Folders = nil
	}
	var plugins []LentFile
	if opts.Plugins != nil {
		pd, err := opts.Plugins()
		if err != nil {
			return err
		}
		plugins = pluginLends(pd, opts.HostRoot)
		ldcache.Folders = append(slices.Clone(ldcache.Folders), pd.Dirs...)
	}
	if len(lend)+len(plugins) == 0 {
		return nil
	}
	// The ldconfig sandbox starts now and waits: its process start
	// overlaps the mounts.
	began := time.Now()
	update, err := startLDCacheUpdate(ctx, c, ldcache, log)
	if err != nil {
		return err
	}
	logTook(log, began, "linker cache update prepared")
	began = time.Now()
	n, err := Lend(c, lend, d.Replace, log)
	if err == nil && len(plugins) > 0 {
		var m int
		m, err = Lend(c, plugins, false, log)
		if m > 0 {
			log.Infof("lent %d of the host's NCCL plugin and topology files", m)
		}
		n += m
	}
	if err != nil || n == 0 {
		update.abort()
		return err
	}
	log.Infof("lent %d host files", n)
	logTook(log, began, "lent")
	began = time.Now()
	defer logTook(log, began, "linker cache updated")
	return update.finish()
}

func (c *Container) processEnv() []string {
	if c.Spec.Process == nil {
		return nil
	}
	return c.Spec.Process.Env
}

// annotations are config.json's, which the OCI state repeats; either may
// be missing depending on the engine.
func (c *Container) annotations() map[string]string {
	out := maps.Clone(c.State.Annotations)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, c.Spec.Annotations)
	return out
}
