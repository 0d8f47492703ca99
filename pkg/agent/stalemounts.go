package agent

import (
	"context"
	"path/filepath"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/stalemount"
)

// staleMountCheckEvery is how often the agent looks for a host path that
// went stale under its mount: a replaced linker cache or a recreated
// /dev/infiniband is noticed within this, as a rescan would notice it.
const staleMountCheckEvery = 30 * time.Second

// hostMountedPaths are the host files and directories a DaemonSet mounts
// one by one (SECURITY.md, host paths): where each would be replaced or
// recreated on the host, the agent must restart to see the new one.
func hostMountedPaths(cl CommandLine) []string {
	paths := []string{
		filepath.Join(cl.Roots.Dev, "infiniband"),
		filepath.Join(cl.Roots.Host, "etc/ld.so.cache"),
		filepath.Join(cl.Roots.Host, "etc/libibverbs.d"),
		cl.Config.CDI.SpecDir,
	}
	if sock := cl.Config.Metrics.HookSocket; sock != "" {
		paths = append(paths, filepath.Dir(sock))
	}
	return paths
}

// watchStaleMounts ends the agent (an error naming the path) when one of
// its host-mounted paths went stale, so that the kubelet's restart mounts
// the current one; on a host without such mounts it never fires.
func watchStaleMounts(cl CommandLine) func(context.Context) error {
	paths := hostMountedPaths(cl)
	return func(ctx context.Context) error {
		return stalemount.Watch(ctx, staleMountCheckEvery, paths...)
	}
}
