package watch

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
	"github.com/rdma-cdi/rdma-cdi/pkg/specio"
)

// Service is `rdma-cdi watch` whole: the Loop fed by netlink, uevents and
// SIGHUP, a spec generator that a reload swaps, and the removal of a spec
// that a reload moved. The device plugin runs the same Service and reads
// each generation through Observe, so one process keeps both current.
type Service struct {
	// Config is the configuration at start.
	Config config.Config
	// LoadConfig reads the configuration again (SIGHUP).
	LoadConfig func() (config.Config, error)
	// NewGenerator builds the spec generator for a configuration.
	NewGenerator func(config.Config) (*specgen.Generator, error)
	// Output is the spec file; "" is the default path in the spec dir.
	Output string
	// NetNS is the network namespace netlink events are read in ("" = this one).
	NetNS                string
	NoNetlink, NoUevents bool
	ReadyFile            string
	// RemoveOnExit removes the spec when Run ends, for an agent whose
	// uninstall must leave nothing behind (the Kubernetes DaemonSet).
	// Containers started from it keep their devices; new ones find no
	// devices until an agent writes the spec again.
	RemoveOnExit bool
	// Observe, when set, sees every good generation and the configuration
	// it was made with, on the loop's goroutine.
	Observe func(specgen.Outcome, config.Config)
	// Report, when set, sees every generation, good or failed, with the
	// configuration it was made with (the agent's metrics).
	Report func(specgen.Outcome, config.Config, error)
	Log    *logrus.Logger

	mu       sync.Mutex
	cfg      config.Config
	gen      *specgen.Generator
	lastPath string // where the last good generation put the spec
}

// Run generates at once and keeps the spec current until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	gen, err := s.NewGenerator(s.Config)
	if err != nil {
		return err
	}
	s.cfg, s.gen = s.Config, gen
	events := make(chan Event, 1024)
	if !s.NoNetlink {
		if err := Netlink(ctx, s.NetNS, events, s.Log); err != nil {
			s.Log.Warnf("no netlink events (%v); relying on the periodic rescan", err)
		}
	}
	if !s.NoUevents {
		if err := Uevents(ctx, nil, events, s.Log); err != nil {
			s.Log.Warnf("no kernel uevents (%v); relying on the periodic rescan", err)
		}
	}
	forwardSIGHUP(ctx, events)

	w := s.Config.Watch
	loop := &Loop{
		Generate: s.generate, Reload: s.reload, Events: events,
		Debounce: w.Debounce.Duration, Rescan: w.RescanInterval.Duration,
		ReadyFile: s.ReadyFile, Log: s.Log,
	}
	err = loop.Run(ctx)
	if s.RemoveOnExit {
		s.removeSpec()
	}
	return err
}

// removeSpec removes the spec the last good generation wrote.
func (s *Service) removeSpec() {
	path := s.lastPath // the loop has returned: nothing else touches it
	if path == "" || path == "-" {
		return
	}
	if err := specio.Remove(path); err != nil {
		s.Log.Warnf("removing the spec %s on exit: %v", path, err)
		return
	}
	s.Log.Infof("spec %s removed on exit", path)
}

func (s *Service) generate(context.Context) (State, error) {
	// reload swaps in a new generator and never changes this one.
	s.mu.Lock()
	g, cfg := s.gen, s.cfg
	s.mu.Unlock()
	out, err := g.Generate(s.Output)
	if s.Report != nil {
		s.Report(out, cfg, err)
	}
	if err != nil {
		return stateOf(out), err
	}
	s.retireMovedSpec(out.Path)
	if s.Observe != nil {
		s.Observe(out, cfg)
	}
	return stateOf(out), nil
}

func (s *Service) reload() error {
	cfg, err := s.LoadConfig()
	if err != nil {
		return err
	}
	next, err := s.NewGenerator(cfg)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg, s.gen = cfg, next
	return nil
}

// forwardSIGHUP turns SIGHUP into a reload event until ctx ends.
func forwardSIGHUP(ctx context.Context, events chan<- Event) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				select {
				case events <- Event{Source: "signal", Detail: "SIGHUP", Reload: true}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
}

// stateOf keeps what the loop compares between generations.
func stateOf(o specgen.Outcome) State {
	return State{Path: o.Path, Changed: o.Changed, Removed: o.Removed, Node: o.Node, Stack: o.Stack, NCCL: o.NCCL}
}

// retireMovedSpec removes the spec this service wrote before once a reload
// (spec_dir, vendor, class or format) has it write newPath: two specs of
// one kind would make every CDI lookup of it fail, and one of another kind
// would keep offering stale devices. The new spec is already in place, so
// engines are never left without one.
func (s *Service) retireMovedSpec(newPath string) {
	oldPath := s.lastPath
	s.lastPath = newPath
	if oldPath == "" || oldPath == newPath || oldPath == "-" {
		return
	}
	if err := specio.Remove(oldPath); err != nil {
		s.Log.Warnf("spec moved to %s; the previous spec %s could not be removed: %v", newPath, oldPath, err)
		return
	}
	s.Log.Infof("spec moved to %s; the previous spec %s removed", newPath, oldPath)
}
