package agent

import (
	"context"
	"errors"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
	"github.com/rdma-cdi/rdma-cdi/pkg/watch"
)

// WatchFlags are the flags of every command that keeps the spec current
// (watch, device-plugin, dra-driver).
type WatchFlags struct {
	output, hookBinary, readyFile string
	removeStale, removeOnExit     bool
	noNetlink, noUevents          bool
}

func (w *WatchFlags) Register(f *pflag.FlagSet) {
	f.StringVarP(&w.output, "output", "o", "", "spec file to keep current (default: <spec-dir>/<vendor>-<class>.<format>)")
	f.StringVar(&w.hookBinary, "hook-binary", "", "the hook binary's path on the host, for the spec's hooks (default: rdma-cdi-hook beside this executable, else this executable)")
	f.StringVar(&w.readyFile, "ready-file", "", "file created after the first good write and removed on exit (readiness probe)")
	f.BoolVar(&w.removeStale, "remove-stale", true, "remove the spec when the node has no RDMA device left")
	f.BoolVar(&w.removeOnExit, "remove-on-exit", false, "remove the spec on SIGTERM/SIGINT (an uninstalled agent leaves none behind; new containers get no devices until an agent runs again)")
	f.BoolVar(&w.noNetlink, "no-netlink", false, "do not listen to netlink link/address/route events")
	f.BoolVar(&w.noUevents, "no-uevents", false, "do not listen to kernel uevents")
}

// service builds the watch service for the command line cl; a reload
// reads the config file again under the same flags.
func (w *WatchFlags) service(cl CommandLine) *watch.Service {
	return &watch.Service{
		Config: cl.Config,
		LoadConfig: func() (config.Config, error) {
			cfg, err := config.Load(cl.ConfigPath)
			if err != nil {
				return cfg, err
			}
			return cfg, config.ApplyFlags(cl.Flags, &cfg)
		},
		NewGenerator: func(cfg config.Config) (*specgen.Generator, error) {
			gen, err := cl.Generator(w.hookBinary)
			if err != nil {
				return nil, err
			}
			gen.Config, gen.RemoveStale = cfg, w.removeStale
			return gen, nil
		},
		Output: w.output, NetNS: cl.Roots.NetNS, NoNetlink: w.noNetlink, NoUevents: w.noUevents,
		ReadyFile: w.readyFile, RemoveOnExit: w.removeOnExit, Log: cl.Log,
	}
}

// RunBesideWatch runs the watch service and servers fed by its
// generations (svc.Observe) until SIGTERM or SIGINT, or until one fails,
// which stops the others.
func RunBesideWatch(ctx context.Context, svc *watch.Service, servers ...func(context.Context) error) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var wg sync.WaitGroup
	serveErrs := make([]error, len(servers))
	for i, serve := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if serveErrs[i] = serve(ctx); serveErrs[i] != nil {
				stop()
			}
		}()
	}
	err := svc.Run(ctx)
	stop()
	wg.Wait()
	if err == nil {
		err = errors.Join(serveErrs...)
	}
	return err
}
