// Package userspace decides, per container, whose RDMA user space it runs:
// the image's own (NGC images carry MOFED/DOCA-OFED or rdma-core) or the
// host's matched set, lent only to an image without one. Mixing the two
// breaks the set's promise: libibverbs and its providers must come from
// one build, and a newer image mounted over by an older host library loses
// symbol versions (MLX5_1.25) or silently turns NCCL features off.
//
// The package is pure except for Probe, which reads the image through an
// ImageFS that resolves every path inside the container root.
package userspace

import (
	"fmt"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Per-container overrides of the node's default mode: apis.AnnotationUserSpace
// is what engines pass from `podman --annotation`, runtime handlers and
// allow-listed pod annotations; apis.EnvUserSpace is what a Kubernetes pod
// spec's env puts in the container's config.json (pod annotations reach
// the runtime only where containerd and CRI-O allow-list them). The
// annotation wins: an image's own ENV lands in the same process env as the
// pod's, and must not outvote the one who runs it.

// Choice is the mode in force for one container and where it came from.
type Choice struct {
	Mode   model.UserSpaceMode
	Source string
}

// Choose applies a container's overrides to the node default: its
// annotations first, then its config.json process env (apis.EnvUserSpace=...). A
// value that does not parse is an error naming where it was set: the
// container asked for something this node cannot tell apart, and guessing
// could shadow its own stack.
func Choose(nodeDefault model.UserSpaceMode, annotations map[string]string, env []string) (Choice, error) {
	if v, source, ok := override(annotations, env, apis.AnnotationUserSpace, apis.EnvUserSpace); ok {
		m, err := model.ParseUserSpaceMode(v)
		if err != nil {
			return Choice{}, fmt.Errorf("%s: %w", source, err)
		}
		return Choice{m, source}, nil
	}
	if nodeDefault == "" {
		nodeDefault = model.UserSpaceAuto
	}
	return Choice{nodeDefault, "node config cdi.user_space"}, nil
}

// override is a container's own setting: the annotation's value, else the
// last assignment of the variable in its process env (as in execve), and
// where it was found.
func override(annotations map[string]string, env []string, annotation, variable string) (value, source string, ok bool) {
	if v, ok := annotations[annotation]; ok {
		return v, "annotation " + annotation, true
	}
	if v, ok := envValue(env, variable); ok {
		return v, "container env " + variable, true
	}
	return "", "", false
}

// envValue is the last value env gives name: the one a process sees.
func envValue(env []string, name string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v, true
		}
	}
	return "", false
}
