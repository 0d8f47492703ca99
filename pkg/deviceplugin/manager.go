package deviceplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sirupsen/logrus"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Manager runs one plugin endpoint per resource and keeps each registered
// with the kubelet: it serves and registers after the first Update (the
// spec the allocations name exists by then), serves and registers again
// whenever the kubelet restarts (it recreates kubelet.sock and removes the
// plugins' sockets), and removes its sockets when it stops.
type Manager struct {
	// Dir is the kubelet's device plugin directory (pluginapi.DevicePluginPath).
	Dir string
	// DevRoot is the host's dev root, for the annotations fallback.
	DevRoot string
	// Resources are the resources served, fixed for the manager's life.
	Resources []config.Resource
	// Recheck is how often the sockets are checked besides fsnotify events (default 5s).
	Recheck time.Duration
	// Sent, when set, is told each device list sent to the kubelet (the
	// agent's metrics).
	Sent func(resource string)
	Log  logrus.FieldLogger

	once    sync.Once
	servers map[string]*server
	ready   chan struct{} // closed by the first Update

	// mu guards the latest generation and grey conditions, which Update
	// and SetGrey (the agent's sampler) set from two goroutines.
	mu   sync.Mutex
	node *model.Node
	cfg  config.Config
	grey map[string][]health.Condition

	// Used by Run's goroutine only.
	registered map[string]endpointState
	problems   map[string]string
}

// endpointState is what a registration was made against: the kubelet's
// socket and ours, as files (device and inode).
type endpointState struct{ kubelet, own fileID }

// fileID tells a recreated file from the old one: inode numbers are
// reused, so the change time (set at creation, in nanoseconds) counts too.
type fileID struct {
	dev, ino uint64
	ctime    int64
}

func (m *Manager) init() {
	m.once.Do(func() {
		m.servers = map[string]*server{}
		for _, r := range m.Resources {
			m.servers[r.Name] = newServer(r.Name, m.Log, m.Sent)
		}
		m.ready = make(chan struct{})
		m.registered = map[string]endpointState{}
		m.problems = map[string]string{}
		if m.Recheck <= 0 {
			m.Recheck = 5 * time.Second
		}
	})
}

// Update recomputes every resource's pool from a generation of the node.
// Selectors and the CDI kind come from cfg (a reload changes them); the
// set of resources is the manager's.
func (m *Manager) Update(node model.Node, cfg config.Config) {
	m.init()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.node, m.cfg = &node, cfg
	m.apply()
	select {
	case <-m.ready:
	default:
		close(m.ready)
	}
}

// SetGrey takes the grey conditions of the node's HCAs (by HCA name, the
// agent's sampler): an Unhealthy one takes the HCA's units out as a port
// down does; a Degraded one is logged.
func (m *Manager) SetGrey(grey map[string][]health.Condition) {
	m.init()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.grey = grey
	if m.node != nil {
		m.apply()
	}
}

// apply recomputes every resource's pool from the latest generation and
// grey conditions. m.mu is held.
func (m *Manager) apply() {
	node, cfg := *m.node, m.cfg
	target := Target{Vendor: cfg.CDI.Vendor, Class: cfg.CDI.Class, DevRoot: m.DevRoot, Allocation: cfg.DevicePlugin.Allocation}
	byName := map[string]config.Resource{}
	for _, r := range cfg.DevicePlugin.ServedResources() {
		byName[r.Name] = r
	}
	for _, r := range m.Resources {
		if reloaded, ok := byName[r.Name]; ok {
			r = reloaded
		} else {
			m.Log.Warnf("the config no longer lists resource %s; it keeps its previous selectors until the plugin restarts", r.Name)
		}
		m.servers[r.Name].update(Select(node, cfg.NCCL, r).WithGrey(m.grey), target)
	}
}

// Run serves until ctx ends, then stops the endpoints and removes their sockets.
func (m *Manager) Run(ctx context.Context) error {
	m.init()
	select {
	case <-m.ready:
	case <-ctx.Done():
		return nil
	}
	if err := os.MkdirAll(m.Dir, 0o750); err != nil {
		return fmt.Errorf("device plugin directory: %w", err)
	}
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", m.Dir, err)
	}
	defer watcher.Close()
	if err := watcher.Add(m.Dir); err != nil {
		return fmt.Errorf("watching %s: %w", m.Dir, err)
	}
	for _, r := range m.Resources {
		removeDeadSockets(m.Dir, r.Name)
	}
	endpoints := map[string]*endpoint{}
	defer func() {
		for _, ep := range endpoints {
			ep.stop()
		}
	}()
	tick := time.NewTicker(m.Recheck)
	defer tick.Stop()
	for {
		m.reconcile(ctx, endpoints)
		if !m.waitForChange(ctx, watcher, tick.C, endpoints) {
			return nil
		}
	}
}

// waitForChange returns when the kubelet's socket or a served endpoint's
// changed, or at the recheck; false when ctx ends. The sockets reconcile
// makes and removes itself are no change: a registration that keeps
// failing would otherwise retry at once, forever.
func (m *Manager) waitForChange(ctx context.Context, watcher *fsnotify.Watcher, tick <-chan time.Time, endpoints map[string]*endpoint) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case ev := <-watcher.Events:
			if concernsRegistration(ev.Name, endpoints) {
				m.Log.Debugf("device plugin dir: %s", ev)
				return true
			}
		case err := <-watcher.Errors:
			m.Log.Warnf("watching %s: %v", m.Dir, err)
		case <-tick:
			return true
		}
	}
}

// concernsRegistration: path is the kubelet's socket or a served endpoint's.
func concernsRegistration(path string, endpoints map[string]*endpoint) bool {
	if filepath.Base(path) == filepath.Base(pluginapi.KubeletSocket) {
		return true
	}
	for _, ep := range endpoints {
		if path == ep.path {
			return true
		}
	}
	return false
}

// reconcile serves and registers every resource whose registration no
// longer matches the sockets on disk. Each registration is of a new
// endpoint on a new socket, and the old endpoint stops only once the new
// one is registered: the kubelet is never told of one socket twice (see
// socketName) and never lacks an endpoint it could reach.
func (m *Manager) reconcile(ctx context.Context, endpoints map[string]*endpoint) {
	kubelet := filepath.Join(m.Dir, filepath.Base(pluginapi.KubeletSocket))
	for _, r := range m.Resources {
		old := endpoints[r.Name]
		kid, kerr := socketID(kubelet)
		if old != nil && kerr == nil {
			if own, err := socketID(old.path); err == nil && m.registered[r.Name] == (endpointState{kid, own}) {
				continue
			}
		}
		delete(m.registered, r.Name)
		if kerr != nil {
			m.problem(r.Name, fmt.Sprintf("waiting for the kubelet: %v", kerr))
			continue
		}
		ep, err := serve(filepath.Join(m.Dir, socketName(r.Name)), m.servers[r.Name])
		if err != nil {
			m.problem(r.Name, err.Error())
			continue
		}
		if err := register(ctx, kubelet, r.Name, filepath.Base(ep.path)); err != nil {
			ep.stop()
			m.problem(r.Name, err.Error())
			continue
		}
		if old != nil {
			old.stop()
		}
		endpoints[r.Name] = ep
		m.registered[r.Name] = endpointState{kid, ep.id}
		delete(m.problems, r.Name)
		m.Log.Infof("registered %s with the kubelet (%s)", r.Name, ep.path)
	}
}

// problem logs why a resource is not registered, once per distinct reason.
func (m *Manager) problem(resource, msg string) {
	if m.problems[resource] == msg {
		return
	}
	m.problems[resource] = msg
	m.Log.Warnf("%s not registered: %s", resource, msg)
}
