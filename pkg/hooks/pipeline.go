package hooks

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
	"github.com/rdma-cdi/rdma-cdi/pkg/userspace"
)

// Step is one job a state hook does for a container.
type Step func(ctx context.Context, c *Container, log *logrus.Entry) error

// StepOrder is the steps of a steps hook, in the order they run.
var StepOrder = []apis.HookName{apis.HookMemlock, apis.HookUserSpace, apis.HookUpdateLDCache, apis.HookNCCLConf}

// StepNames are StepOrder's names, for help and warnings.
func StepNames() []string {
	names := make([]string, len(StepOrder))
	for i, n := range StepOrder {
		names[i] = string(n)
	}
	return names
}

// StepsHook is the work of the hook that runs the steps named in steps in
// one process, which is what generated specs ask for: each hook process
// costs a container start several milliseconds. Specs name it
// create-runtime and give it the createRuntime stage, in the runtime's
// namespaces, the one stage where all three steps work: memlock may raise
// a hard limit only from outside a user-namespaced container, and the hook
// reaches the container's mount and network namespaces through its process
// (Container). create-container is the same hook under the name older
// specs give their createContainer hook, with update-ldcache and nccl-conf
// as steps.
//
// With pod networking on, a container of a pod the pod-network agent has
// not handled yet is refused before any step (CheckPodSandbox). A failing step stops the rest
// of the chain, as a failing hook stops the later hooks (nccl-conf, which
// runs beside it, finishes), and its error is the hook's last line
// (engines show only that); a step this binary does not know (from a newer
// spec) is a warning.
func (s Settings) StepsHook(us UserSpaceOptions, steps []string) Step {
	return func(ctx context.Context, c *Container, log *logrus.Entry) error {
		// One scan of the node serves both steps that read it; where
		// nccl-conf writes, it reads what nccl-conf needs.
		var ncclConf *config.NCCL
		if slices.Contains(steps, string(apis.HookNCCLConf)) && s.Config.NCCL.Delivery == config.DeliveryNCCLConf {
			ncclConf = &s.Config.NCCL
		}
		scan := NewContainerScan(c, s.Roots, ncclConf, log)
		// The host's NCCL plugins ride with the user-space step, which
		// lends; without it, nccl.conf names none.
		var plugins PluginsDecider
		if slices.Contains(steps, string(apis.HookUserSpace)) {
			plugins = sync.OnceValues(func() (userspace.PluginsDecision, error) {
				return NCCLPlugins(c, s.Config.NCCLPlugins, s.Roots, scan, log.WithField("step", string(apis.HookUserSpace)))
			})
		}
		withPlugins := us
		withPlugins.Plugins, withPlugins.HostRoot = plugins, s.Roots.Host
		known := map[apis.HookName]Step{
			apis.HookMemlock:       s.MemlockStep(),
			apis.HookUserSpace:     s.UserSpaceStep(withPlugins),
			apis.HookUpdateLDCache: LDCacheStep(us.LDCache),
			apis.HookNCCLConf:      s.ncclConfStep(plugins, scan),
		}
		if err := CheckPodSandbox(c, s.Config.PodNetwork, sysfs.Root(s.Roots.Sysfs)); err != nil {
			return err
		}
		return runSteps(ctx, steps, known, c, log)
	}
}

// besideTheOthers are the steps that share nothing with the rest:
// nccl-conf reads sysfs and the container's network namespace and writes a
// file of its own. It runs on a goroutine of its own, so a container start
// waits for the longer of it and the user-space step, not for both.
var besideTheOthers = []apis.HookName{apis.HookNCCLConf}

// runSteps runs the requested steps in StepOrder, whatever order the
// request names them in, up to the first that fails; besideTheOthers run
// alongside that chain, whatever it meets. The error is the first failing
// step's in StepOrder, as if they had run one after the other.
func runSteps(ctx context.Context, requested []string, known map[apis.HookName]Step, c *Container, log *logrus.Entry) error {
	for _, name := range requested {
		if known[apis.HookName(name)] == nil {
			log.Warnf("unknown step %q ignored (known: %s)", name, strings.Join(StepNames(), ", "))
		}
	}
	wanted := func(name apis.HookName) bool { return slices.Contains(requested, string(name)) && known[name] != nil }
	run := func(name apis.HookName) error {
		began, log := time.Now(), log.WithField("step", string(name))
		defer logTook(log, began, "step done")
		if err := known[name](ctx, c, log); err != nil {
			return &stepError{step: name, err: err}
		}
		return nil
	}
	errs := make([]error, len(StepOrder)) // each written by one goroutine
	var wg sync.WaitGroup
	for i, name := range StepOrder {
		if wanted(name) && slices.Contains(besideTheOthers, name) {
			wg.Go(func() { errs[i] = run(name) })
		}
	}
	for i, name := range StepOrder {
		if !wanted(name) || slices.Contains(besideTheOthers, name) {
			continue
		}
		if errs[i] = run(name); errs[i] != nil {
			break
		}
	}
	wg.Wait()
	var first error
	for _, err := range errs {
		switch {
		case err == nil:
		case first == nil:
			first = err
		default: // a step beside the chain failed too: logged, not lost
			log.Errorf("also failed: %v", err)
		}
	}
	return first
}

// stepError is a steps hook's failure in one step.
type stepError struct {
	step apis.HookName
	err  error
}

func (e *stepError) Error() string { return fmt.Sprintf("%s: %v", e.step, e.err) }
func (e *stepError) Unwrap() error { return e.err }
