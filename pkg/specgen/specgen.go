// Package specgen is the whole of `rdma-cdi generate` as one call:
// discover the node and its user-space stack, render the CDI spec, and write
// it atomically when its bytes change. `watch` calls it on every event.
package specgen

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/cdispec"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/hostlibs"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
	"github.com/rdma-cdi/rdma-cdi/pkg/specio"
)

// Generator holds what one node's spec depends on.
type Generator struct {
	Config config.Config
	// Roots are where the node and its user-space stack are read.
	Roots model.Roots
	// SpecHostRoot is Roots.Host as the engines reading the spec see it;
	// "" means the same path.
	SpecHostRoot string
	// HookBinary is rdma-cdi's path on the host, for the spec's hooks.
	HookBinary string
	// HookArgs are global flags the hooks get (roots, config file).
	HookArgs []string
	// GPUDirect reads the GPUDirect RDMA facts into the node (the DRA
	// driver's attributes); the spec does not depend on them.
	GPUDirect bool
	// RemoveStale removes the spec when the node has no RDMA device.
	RemoveStale bool
	Log         *logrus.Logger

	// warned keeps `watch` from repeating the same warning every generation;
	// a repeat is logged at debug level.
	warned map[string]bool
}

func (g *Generator) warn(msg string) {
	if g.warned == nil {
		g.warned = map[string]bool{}
	}
	if g.warned[msg] {
		g.Log.Debug(msg)
		return
	}
	g.warned[msg] = true
	g.Log.Warn(msg)
}

// Outcome is what one generation saw and did.
type Outcome struct {
	Path    string
	Changed bool
	Removed bool
	Spec    *specs.Spec // nil when the node has no RDMA device
	Data    []byte
	Node    model.Node
	Stack   model.UserStack
	NCCL    nccl.Settings
}

// Generate runs one generation. output is a file, "-" for no write (the
// caller prints Outcome.Data), or "" for the default path in the spec dir.
func (g *Generator) Generate(output string) (Outcome, error) {
	out := Outcome{Path: g.path(output)}
	res, err := discover.Discover(discover.Options{Roots: g.Roots, GPUDirect: g.GPUDirect})
	if err != nil {
		return out, err
	}
	for _, w := range res.Warnings {
		g.warn(w)
	}
	out.Node = res.Node
	out.NCCL = nccl.Compute(res.Node, g.Config.NCCL, nccl.Scope{})
	if out.Stack, err = g.userStack(); err != nil {
		return out, err
	}
	out.Spec, err = g.render(out)
	if errors.Is(err, cdispec.ErrNoDevices) {
		return g.noDevices(out)
	}
	if err != nil {
		return out, err
	}
	if out.Data, err = cdispec.Marshal(out.Spec, g.Config.CDI.Format); err != nil {
		return out, err
	}
	if out.Path == "-" {
		return out, nil
	}
	out.Changed, err = specio.WriteIfChanged(out.Path, out.Data, 0o644)
	return out, asWriteError(err)
}

// ErrWrite matches (errors.Is) an error of writing or removing the spec,
// as opposed to one of discovering the node.
var ErrWrite = errors.New("writing the CDI spec")

// writeError is an error of the spec file; its message is the cause's.
type writeError struct{ err error }

func (e writeError) Error() string   { return e.err.Error() }
func (e writeError) Unwrap() []error { return []error{e.err, ErrWrite} }

func asWriteError(err error) error {
	if err == nil {
		return nil
	}
	return writeError{err}
}

func (g *Generator) path(output string) string {
	if output != "" {
		return output
	}
	c := g.Config.CDI
	return specio.DefaultPath(c.SpecDir, c.Vendor, c.Class, c.Format)
}

func (g *Generator) userStack() (model.UserStack, error) {
	c := g.Config.CDI
	stack, err := hostlibs.Discover(hostlibs.Options{HostRoot: g.Roots.Host, ExtraPaths: c.ExtraLibraries, Disabled: !c.InjectLibraries})
	if err != nil || g.SpecHostRoot == "" {
		return stack, err
	}
	return stack.Rehomed(g.SpecHostRoot), nil
}

func (g *Generator) noDevices(out Outcome) (Outcome, error) {
	g.Log.Infof("no RDMA devices under %s: no spec written", filepath.Join(g.Roots.Sysfs, "class/infiniband"))
	if g.RemoveStale && out.Path != "-" {
		_, statErr := os.Stat(out.Path)
		out.Removed = statErr == nil
		return out, asWriteError(specio.Remove(out.Path))
	}
	return out, nil
}

func (g *Generator) render(out Outcome) (*specs.Spec, error) {
	c := g.Config.CDI
	if g.HookBinary == "" {
		return nil, fmt.Errorf("no hook binary: the spec's hooks need rdma-cdi's path on the host")
	}
	delivery := g.Config.NCCL.Delivery
	opts := cdispec.Options{
		Vendor: c.Vendor, Class: c.Class, DevRoot: g.Roots.Dev,
		InjectLibraries: c.InjectLibraries, MaxVersion: c.MaxVersion,
		Hooks: cdispec.HookOptions{
			Binary:    g.HookBinary,
			Args:      g.HookArgs,
			UserSpace: true,
			NCCLConf:  delivery == config.DeliveryNCCLConf,
			Memlock:   true,
		},
	}
	if delivery == config.DeliveryCDIEnv {
		// CDI env beats the user's own env in every engine (documented).
		for _, v := range out.NCCL.Vars {
			opts.Env = append(opts.Env, v.Name+"="+v.Value)
		}
	}
	spec, warnings, err := cdispec.Render(out.Node, out.Stack, opts)
	for _, w := range warnings {
		g.warn(w)
	}
	if err != nil {
		return nil, err
	}
	return spec, nil
}
