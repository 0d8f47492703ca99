package cdispec

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
)

// stageCreateRuntime is the CDI hook stage of the one hook: runc runs it
// in the runtime's namespaces once the container's mounts exist, before
// pivot_root.
const stageCreateRuntime = "createRuntime"

// libraries is what the user-space step may lend and check.
type libraries struct {
	lend      []lentFile
	dirs      []string // the lent libraries' directories, for the linker cache
	providers []string // the node's providers, checked in an image's own stack
}

// buildHooks returns at most one hook, one process on every container
// start: "rdma-cdi hook create-runtime --steps ..." running memlock (where
// a hard limit may be raised even for a user-namespaced container),
// user-space and nccl-conf (in the container's mount and network
// namespaces, which the hook reaches through the container's process).
// user-space decides per container whether the host's files (--lend) are
// lent, then adds their directories (--folder) to its linker cache.
func buildHooks(h HookOptions, lib libraries) ([]*specs.Hook, error) {
	var steps, extra []string
	if h.Memlock {
		steps = append(steps, string(apis.HookMemlock))
	}
	if h.UserSpace {
		steps = append(steps, string(apis.HookUserSpace))
		for _, f := range lib.lend {
			extra = append(extra, "--lend", f.arg())
		}
		for _, d := range lib.dirs {
			extra = append(extra, "--folder", d)
		}
		if len(lib.providers) > 0 {
			extra = append(extra, "--provider", strings.Join(lib.providers, ","))
		}
	}
	if h.NCCLConf {
		steps = append(steps, string(apis.HookNCCLConf))
	}
	if len(steps) == 0 {
		return nil, nil
	}
	if err := checkBinary(h.Binary); err != nil {
		return nil, err
	}
	extra = append(extra, "--steps", strings.Join(steps, ","))
	return []*specs.Hook{newHook(stageCreateRuntime, h, apis.HookCreateRuntime, extra...)}, nil
}

// checkBinary insists on an absolute path: engines run hooks from their own
// cwd and PATH, and a relative path would name a different file there.
func checkBinary(binary string) error {
	if binary == "" {
		return fmt.Errorf("hooks requested but no rdma-cdi binary path given")
	}
	if !filepath.IsAbs(binary) {
		return fmt.Errorf("hook binary %q is not an absolute path", binary)
	}
	return nil
}

// newHook makes "BINARY hook NAME <global flags> <extra>", argv[0] the
// binary's own name (rdma-cdi-hook or rdma-cdi).
func newHook(stage string, h HookOptions, name apis.HookName, extra ...string) *specs.Hook {
	args := make([]string, 0, 3+len(h.Args)+len(extra))
	args = append(args, filepath.Base(h.Binary), "hook", string(name))
	args = append(args, h.Args...)
	args = append(args, extra...)
	return &specs.Hook{
		HookName: stage,
		Path:     filepath.Clean(h.Binary),
		Args:     args,
		// Explicit, so a hook never inherits the container's env.
		Env: slices.Clone(apis.HookEnv),
	}
}
