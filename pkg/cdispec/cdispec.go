// Package cdispec renders a CDI spec from a node's RDMA devices and the
// host's RDMA user-space stack. It is pure: no file or device is touched, so
// the same inputs always give byte-identical output and a caller can skip
// rewriting a spec that did not change.
//
// Layout of the spec:
//   - one CDI device per RDMA device (mlx5_1, mlx5_bond_0, ...) carrying its
//     uverbs node and the umad/issm nodes of every port;
//   - a device "all" carrying the nodes of every selected device;
//   - spec-wide edits, applied whenever any device of the spec is requested:
//     the rdma_cm node and the rdma-cdi hook. The host's user-space
//     libraries are not mounts of the spec: the hook lends them to images
//     that carry no RDMA stack of their own (--lend args), and leaves an
//     image's own stack untouched.
//
// The cdiVersion is the lowest one that covers the spec, so that old engines
// (podman 4.3 reads up to 0.5.0, CRI-O 1.24 only 0.3.0) can load it.
package cdispec

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// ErrNoDevices is returned when nothing is left to put in a spec: a spec
// without devices is invalid for every CDI reader.
var ErrNoDevices = errors.New("no RDMA devices to put in a CDI spec")

// Options control Render. The zero value renders every device under the
// default kind, without libraries or hooks.
type Options struct {
	// Vendor and Class form the kind vendor/class ("" = the defaults).
	Vendor string
	Class  string
	// Devices selects RDMA devices by name; empty (or "all") selects every one.
	Devices []string
	// DevRoot is where the char devices are on the machine running the
	// engine ("" = /dev). It becomes the device nodes' hostPath.
	DevRoot string
	// InjectLibraries lets the hook lend the host's user-space stack to
	// containers without their own.
	InjectLibraries bool
	// MaxVersion caps the cdiVersion ("" = no cap), e.g. "0.5.0" for podman 4.3.
	MaxVersion string
	// Env is NAME=VALUE variables every container with a device gets (the
	// cdi-env delivery of the NCCL settings), validated with the rest.
	Env   []string
	Hooks HookOptions
}

// HookOptions choose the rdma-cdi hooks that the spec asks engines to run.
type HookOptions struct {
	// Binary is the absolute path of rdma-cdi on the host.
	Binary string
	// Args are global flags passed through to every hook
	// (e.g. --sysfs-root X --config Y).
	Args []string
	// UserSpace, NCCLConf and Memlock are the hook's steps: the
	// container's RDMA user space (its own, or the host's lent and added
	// to its linker cache), its NCCL defaults, and RLIMIT_MEMLOCK.
	UserSpace, NCCLConf, Memlock bool
}

// Render builds the CDI spec. Warnings are things the caller should show
// but that do not stop the spec (e.g. an incomplete user-space stack).
func Render(node model.Node, stack model.UserStack, opts Options) (*specs.Spec, []string, error) {
	opts = opts.withDefaults()
	kind, err := kindOf(opts.Vendor, opts.Class)
	if err != nil {
		return nil, nil, err
	}
	devices, warnings, err := selectDevices(node, opts.Devices)
	if err != nil {
		return nil, nil, err
	}
	nodes := nodeBuilder{devRoot: opts.DevRoot}

	spec := &specs.Spec{Kind: kind}
	if spec.Devices, err = cdiDevices(devices, nodes); err != nil {
		return nil, nil, err
	}
	common, commonWarnings, err := commonEdits(node, stack, opts, nodes)
	if err != nil {
		return nil, nil, err
	}
	spec.ContainerEdits = common
	warnings = append(warnings, commonWarnings...)

	if spec.Version, err = pickVersion(spec, opts); err != nil {
		return nil, nil, err
	}
	if err := validate(spec); err != nil {
		return nil, nil, fmt.Errorf("rendered CDI spec is invalid: %w", err)
	}
	return spec, warnings, nil
}

func (o Options) withDefaults() Options {
	if o.Vendor == "" {
		o.Vendor = apis.Group
	}
	if o.Class == "" {
		o.Class = apis.Class
	}
	if o.DevRoot == "" {
		o.DevRoot = model.DefaultDevRoot
	}
	return o
}

// kindOf checks vendor and class with the CDI parser, so a bad --vendor is
// reported here rather than as an unloadable spec in the engine.
func kindOf(vendor, class string) (string, error) {
	if err := parser.ValidateVendorName(vendor); err != nil {
		return "", fmt.Errorf("CDI vendor %q: %w", vendor, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return "", fmt.Errorf("CDI class %q: %w", class, err)
	}
	return vendor + "/" + class, nil
}

// cdiDevices makes one CDI device per RDMA device plus "all". devices is
// already sorted.
func cdiDevices(devices []model.Device, nodes nodeBuilder) ([]specs.Device, error) {
	out := make([]specs.Device, 0, len(devices)+1)
	var all []*specs.DeviceNode
	for _, d := range devices {
		own, err := nodes.build(d.CharDevices())
		if err != nil {
			return nil, fmt.Errorf("RDMA device %s: %w", d.Name, err)
		}
		out = append(out, specs.Device{
			Name:           d.Name,
			ContainerEdits: specs.ContainerEdits{DeviceNodes: own},
		})
		// "all" gets its own copies: engines fill in missing fields of the
		// nodes they apply, and two devices must not share that state.
		for _, n := range own {
			c := *n
			all = append(all, &c)
		}
	}
	out = append(out, specs.Device{
		Name:           apis.AllDevices,
		ContainerEdits: specs.ContainerEdits{DeviceNodes: all},
	})
	return out, nil
}

// commonEdits are the spec-wide edits: rdma_cm, libraries, hooks.
func commonEdits(node model.Node, stack model.UserStack, opts Options, nodes nodeBuilder) (specs.ContainerEdits, []string, error) {
	var edits specs.ContainerEdits
	var warnings []string
	if node.RDMACM != nil {
		cm, err := nodes.build([]model.CharDevice{*node.RDMACM})
		if err != nil {
			return edits, nil, fmt.Errorf("rdma_cm: %w", err)
		}
		edits.DeviceNodes = cm
	}

	lib := libraries{providers: NodeProviders(node.Devices)}
	inject := opts.InjectLibraries
	if inject {
		var libWarnings []string
		inject, libWarnings = StackUsable(stack)
		warnings = append(warnings, libWarnings...)
	}
	if inject {
		files, lendWarnings, err := lentFiles(forNodeProviders(stack.Files, node.Devices))
		if err != nil {
			return edits, nil, err
		}
		lib.lend = files
		lib.dirs = sortedUnique(stack.LibraryDirs)
		warnings = append(warnings, lendWarnings...)
	}
	hooks, err := buildHooks(opts.Hooks, lib)
	if err != nil {
		return edits, nil, err
	}
	edits.Hooks = hooks
	edits.Env = slices.Clone(opts.Env)
	return edits, warnings, nil
}

// StackUsable says whether the user-space stack may be lent (the spec and
// doctor ask). A stack with problems (e.g. providers of another ABI than
// libibverbs) would give a container libraries that fail at run time, so
// nothing is lent and each problem becomes a warning.
func StackUsable(stack model.UserStack) (bool, []string) {
	if len(stack.Problems) > 0 {
		warnings := make([]string, 0, len(stack.Problems))
		for _, p := range stack.Problems {
			warnings = append(warnings, "RDMA libraries not lent to containers: "+p)
		}
		return false, warnings
	}
	if len(stack.Files) == 0 {
		return false, []string{"RDMA libraries not lent to containers: no RDMA user-space stack found on the host"}
	}
	return true, nil
}

// hostPathUnder maps a container path under /dev to the same path under
// devRoot.
func hostPathUnder(devRoot, path string) (string, error) {
	rel, ok := strings.CutPrefix(filepath.Clean(path), "/dev/")
	if !ok || rel == "" {
		return "", fmt.Errorf("char device path %q is not under /dev", path)
	}
	return filepath.Join(devRoot, rel), nil
}
