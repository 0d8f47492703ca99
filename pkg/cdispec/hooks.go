package cdispec

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/hookname"
)

// Hook stages as CDI names them.
const (
	stageCreateContainer = "createContainer"
	stageCreateRuntime   = "createRuntime"
)

// buildHooks returns at most two hooks, each one process on every container
// start (tens of milliseconds each): "rdma-cdi hook create-container"
// (createContainer) running the update-ldcache and nccl-conf steps, then
// "rdma-cdi hook memlock" (createRuntime, in the runtime's namespaces, where
// raising a hard limit is allowed). update-ldcache is a step only when
// libraries are mounted (libDirs non-empty): there is nothing new for the
// linker cache otherwise.
func buildHooks(h HookOptions, libDirs []string) ([]*specs.Hook, error) {
	var steps, extra []string
	if h.LDCache && len(libDirs) > 0 {
		steps = append(steps, string(hookname.UpdateLDCache))
		for _, d := range libDirs {
			extra = append(extra, "--folder", d)
		}
	}
	if h.NCCLConf {
		steps = append(steps, string(hookname.NCCLConf))
	}
	if len(steps) == 0 && !h.Memlock {
		return nil, nil
	}
	if err := checkBinary(h.Binary); err != nil {
		return nil, err
	}
	var hooks []*specs.Hook
	if len(steps) > 0 {
		extra = append(extra, "--steps", strings.Join(steps, ","))
		hooks = append(hooks, newHook(stageCreateContainer, h, hookname.CreateContainer, extra...))
	}
	if h.Memlock {
		hooks = append(hooks, newHook(stageCreateRuntime, h, hookname.Memlock))
	}
	return hooks, nil
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

// newHook makes "rdma-cdi hook NAME <global flags> <extra>".
func newHook(stage string, h HookOptions, name hookname.Name, extra ...string) *specs.Hook {
	args := make([]string, 0, 3+len(h.Args)+len(extra))
	args = append(args, "rdma-cdi", "hook", string(name))
	args = append(args, h.Args...)
	args = append(args, extra...)
	return &specs.Hook{
		HookName: stage,
		Path:     filepath.Clean(h.Binary),
		Args:     args,
		// Explicit, so a hook never inherits the container's env.
		Env: slices.Clone(hookname.Env),
	}
}
