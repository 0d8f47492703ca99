package networker

// The NRI relay: it tells a Handler when the container runtime starts and
// stops pod sandboxes, through the runtime's NRI socket (containerd 2.x and
// CRI-O): the one moment a pod's network namespace exists and its
// containers have not started. It keeps the NRI connection up across
// runtime restarts and hands the handler plain Sandbox values.

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"
)

// Sandbox is a pod sandbox as the runtime reports it.
type Sandbox struct {
	ID, UID, Namespace, Name string
	// NetNS is the path of its network namespace; "" for a pod on the
	// host's network.
	NetNS string
}

func (s Sandbox) String() string { return s.Namespace + "/" + s.Name }

// Handler acts on sandboxes. An error from Started fails the pod's start
// (the runtime tears the sandbox down); Stopped runs before the runtime
// destroys the network namespace. Present is called at each (re)connect
// with every sandbox the runtime has, so that the handler can let go of
// the ones that ended while it was not connected.
type Handler interface {
	Started(ctx context.Context, s Sandbox) error
	Stopped(ctx context.Context, s Sandbox) error
	Present(ctx context.Context, all []Sandbox) error
}

// Plugin is the NRI plugin that relays to a Handler.
type Plugin struct {
	Socket string
	// Name and Index register the plugin (its order among plugins).
	Name, Index string
	Handler     Handler
	Log         logrus.FieldLogger
}

// Run connects and serves until ctx ends, reconnecting (1 s, doubling to
// 30 s) whenever the runtime goes away or is not there yet.
func (p *Plugin) Run(ctx context.Context) error {
	wait := time.Second
	for {
		start := time.Now()
		err := p.serveOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > time.Minute {
			wait = time.Second // it was up for a while: a fresh outage
		}
		p.Log.Warnf("NRI %s: %v; connecting again in %v", p.Socket, err, wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

func (p *Plugin) serveOnce(ctx context.Context) error {
	s, err := stub.New(relay{p}, stub.WithPluginName(p.Name), stub.WithPluginIdx(p.Index), stub.WithSocketPath(p.Socket))
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return fmt.Errorf("registering: %w", err)
	}
	p.Log.Infof("NRI plugin %s-%s connected to %s", p.Index, p.Name, p.Socket)
	done := make(chan struct{})
	go func() { s.Wait(); close(done) }()
	select {
	case <-ctx.Done():
		s.Stop()
		return nil
	case <-done:
		return fmt.Errorf("connection closed")
	}
}

// relay is the stub's plugin: the events Handler needs, nothing else
// (no container adjustments).
type relay struct{ p *Plugin }

func (r relay) Configure(_ context.Context, _, runtime, version string) (stub.EventMask, error) {
	r.p.Log.Infof("NRI runtime %s %s", runtime, version)
	return api.ParseEventMask("RunPodSandbox,StopPodSandbox,RemovePodSandbox")
}

func (r relay) Synchronize(ctx context.Context, pods []*api.PodSandbox, _ []*api.Container) ([]*api.ContainerUpdate, error) {
	all := make([]Sandbox, 0, len(pods))
	for _, pod := range pods {
		all = append(all, sandboxOf(pod))
	}
	return nil, r.p.Handler.Present(ctx, all)
}

func (r relay) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return r.p.Handler.Started(ctx, sandboxOf(pod))
}

func (r relay) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return r.p.Handler.Stopped(ctx, sandboxOf(pod))
}

// RemovePodSandbox also lets go: a sandbox whose stop the plugin missed
// (not connected then) is removed later.
func (r relay) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return r.p.Handler.Stopped(ctx, sandboxOf(pod))
}

func sandboxOf(pod *api.PodSandbox) Sandbox {
	s := Sandbox{ID: pod.GetId(), UID: pod.GetUid(), Namespace: pod.GetNamespace(), Name: pod.GetName()}
	for _, ns := range pod.GetLinux().GetNamespaces() {
		if ns.GetType() == "network" {
			s.NetNS = ns.GetPath()
		}
	}
	return s
}
