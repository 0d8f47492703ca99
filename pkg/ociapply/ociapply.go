// Package ociapply is the one job of the precreate hook and the runtime
// wrapper: a container's config.json with its RDMA request applied, using
// this node's config, discovery and memlock limit. The editing rules are
// pkg/ociedit's; this package brings them the node.
package ociapply

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/discover"
	"github.com/rdma-cdi/rdma-cdi/pkg/hooks"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
	"github.com/rdma-cdi/rdma-cdi/pkg/ociedit"
	"github.com/rdma-cdi/rdma-cdi/pkg/rlimit"
)

// Applier applies RDMA requests for one container start.
type Applier struct {
	Config config.Config
	// ConfigErr is why the config file could not be used (Config then
	// holds the defaults): a container that asked for RDMA is refused
	// with it, any other passes.
	ConfigErr error
	// Roots are where discovery reads the node, for the NCCL settings.
	Roots model.Roots
	Log   *logrus.Logger
}

// Apply applies the RDMA request of the config in data. It returns data
// itself when nothing was asked for or nothing had to change, so the
// caller writes back the original bytes. what names the input in errors.
func (a *Applier) Apply(data []byte, what string) ([]byte, bool, error) {
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, false, fmt.Errorf("%s is not a valid OCI config, so its RDMA request (if any) cannot be read: %w", what, err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(a.Config.CDI.SpecDir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, false, err
	}
	ed := ociedit.Editor{Cache: cache, Vendor: a.Config.CDI.Vendor, Class: a.Config.CDI.Class, Policy: ociedit.Policy{
		KubernetesAcceptEnv:         a.Config.Runtime.KubernetesAcceptEnv,
		KubernetesAcceptAnnotations: a.Config.Runtime.KubernetesAcceptAnnotations,
	}}
	req, err := ed.Request(&spec)
	if msg := req.IgnoredMessage(); msg != "" {
		a.Log.Warnf("%s: %s", what, msg)
	}
	if err == nil && req.Empty() {
		a.Log.Debugf("%s: no RDMA request; passed through unchanged", what)
		return data, false, nil
	}
	// The container asked for something: an unusable config is the cause
	// to report first (it also decided where the request was looked up).
	if cerr := config.BlocksRDMA(a.ConfigErr); cerr != nil {
		return nil, false, cerr
	}
	if err != nil {
		return nil, false, err
	}
	// Only a request costs the memlock probe.
	ed.Memlock = a.applicableMemlock(what)
	changed, err := ed.Edit(&spec, req, a.ncclVars(req.Devices))
	if err != nil {
		return nil, false, err
	}
	if !changed {
		a.Log.Infof("%s: RDMA devices %s (from %s) already in place", what, strings.Join(req.Devices, ","), strings.Join(req.Sources, ", "))
		return data, false, nil
	}
	out, err := ociedit.Encode(data, &spec)
	if err != nil {
		return nil, false, err
	}
	a.Log.Infof("%s: gave RDMA devices %s (from %s), CAP_IPC_LOCK, memlock %s", what, strings.Join(req.Devices, ","), strings.Join(req.Sources, ", "), rlimit.String(ed.Memlock))
	return out, true, nil
}

// applicableMemlock is hooks.memlock, or the hard limit where the runtime
// could not set hooks.memlock (rlimit.ApplicableMemlock), logged as such.
func (a *Applier) applicableMemlock(what string) uint64 {
	memlock, why := rlimit.ApplicableMemlock(uint64(a.Config.Hooks.Memlock))
	if why != "" {
		a.Log.Warnf("%s: %s", what, why)
	}
	return memlock
}

// ncclVars computes the NCCL settings for the devices a container gets.
// Discovery trouble costs the NCCL env, not the container.
func (a *Applier) ncclVars(devices []string) []nccl.Var {
	if a.Config.NCCL.Delivery == config.DeliveryNone {
		return nil
	}
	res, err := discover.Discover(discover.Options{Roots: a.Roots})
	if err != nil {
		a.Log.Warnf("NCCL settings not added: discovery failed: %v", err)
		return nil
	}
	for _, w := range res.Warnings {
		a.Log.Warn(w)
	}
	s := nccl.Compute(res.Node, a.Config.NCCL, nccl.Scope{Devices: devices})
	for _, w := range s.Warnings {
		a.Log.Warn(w)
	}
	return s.Vars
}

// LogToFile sends log to path as well as where it goes now; a file that
// cannot be opened is a debug message, never a failure.
func LogToFile(log *logrus.Logger, path string) {
	if path == "" {
		return
	}
	f, err := hooks.OpenLogFile(path)
	if err != nil {
		log.Debugf("log file: %v", err)
		return
	}
	log.SetOutput(io.MultiWriter(log.Out, f))
}
