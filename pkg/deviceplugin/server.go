package deviceplugin

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// server answers the kubelet for one resource. Its pool and target are
// swapped by update; ListAndWatch streams hear of every change in what
// they advertise.
type server struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	log      logrus.FieldLogger
	notify   func(resource string) // may be nil

	mu     sync.Mutex
	pool   Pool
	target Target
	sent   string // fingerprint of the advertised units
	// degraded is the Degraded reason last logged, by HCA.
	degraded map[string]string
	changed  chan struct{} // closed and replaced when the units change
	// held is what the kubelet's last GetPreferredAllocation showed as
	// held by other containers, and when: the kubelet calls Allocate right
	// after it, so Allocate can refuse a PF or VF whose VF or PF is held.
	held   []string
	heldAt time.Time
	now    func() time.Time
}

// heldFresh is how long the held units a GetPreferredAllocation showed
// are trusted by the Allocate that follows it. The kubelet does not call
// GetPreferredAllocation when its Topology Manager leaves exactly as many
// units as needed; an older picture could refuse a unit whose relative
// was freed since, so Allocate then does without one.
const heldFresh = 10 * time.Second

func newServer(resource string, log logrus.FieldLogger, sent func(string)) *server {
	return &server{resource: resource, log: log.WithField("resource", resource), notify: sent, changed: make(chan struct{}), now: time.Now}
}

// update installs a new pool; streams are told only when the units they
// advertise (IDs, health, topology) changed.
func (s *server) update(pool Pool, target Target) {
	fp := fingerprint(pool.Devices())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pool, s.target = pool, target
	s.logDegraded(pool)
	if fp == s.sent {
		return
	}
	for _, h := range pool.HCAs {
		if !h.Healthy() {
			s.log.Warnf("%s is unhealthy: %s", h.Name, h.Unhealthy)
		}
	}
	s.sent = fp
	close(s.changed)
	s.changed = make(chan struct{})
}

// logDegraded logs each HCA that turned degraded, or is no longer, once.
// s.mu is held.
func (s *server) logDegraded(pool Pool) {
	now := map[string]string{}
	for _, h := range pool.HCAs {
		if h.Degraded != "" {
			now[h.Name] = h.Degraded
			if s.degraded[h.Name] != h.Degraded {
				s.log.Warnf("%s is degraded: %s (still offered)", h.Name, h.Degraded)
			}
		}
	}
	for name := range s.degraded {
		if _, still := now[name]; !still {
			s.log.Infof("%s is no longer degraded", name)
		}
	}
	s.degraded = now
}

func (s *server) snapshot() (Pool, Target, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pool, s.target, s.changed
}

func fingerprint(devs []*pluginapi.Device) string {
	var b strings.Builder
	for _, d := range devs {
		fmt.Fprintf(&b, "%s %s %v\n", d.ID, d.Health, d.Topology.GetNodes())
	}
	return b.String()
}

func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the units now and after every change, until the
// kubelet goes away or the server stops.
func (s *server) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		pool, _, changed := s.snapshot()
		devs := pool.Devices()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		s.log.Debugf("advertised %d units", len(devs))
		if s.notify != nil {
			s.notify(s.resource)
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

func (s *server) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	pool, _, _ := s.snapshot()
	resp := &pluginapi.PreferredAllocationResponse{}
	var held []string
	for _, c := range req.GetContainerRequests() {
		ids := pool.Preferred(c.GetAvailableDeviceIDs(), c.GetMustIncludeDeviceIDs(), int(c.GetAllocationSize()))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
		held = append(held, pool.Held(c.GetAvailableDeviceIDs(), c.GetMustIncludeDeviceIDs())...)
	}
	s.mu.Lock()
	s.held, s.heldAt = held, s.now()
	s.mu.Unlock()
	return resp, nil
}

// sharingRefusal names a requested unit whose PF or VF another container
// holds, by the kubelet's latest picture; "" when there is none.
func (s *server) sharingRefusal(pool Pool, ids []string) string {
	s.mu.Lock()
	held, fresh := s.held, s.now().Sub(s.heldAt) <= heldFresh
	s.mu.Unlock()
	if !fresh {
		return ""
	}
	blocked := pool.Blocked(held)
	for _, id := range ids {
		if by, ok := blocked[id]; ok {
			return fmt.Sprintf("%s: %s shares its port with %s, which another container holds for its exclusive use", s.resource, id, by)
		}
	}
	return ""
}

// Allocate answers for every container of the request, or refuses the
// whole request: a container never starts with part of what it asked for.
func (s *server) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	pool, target, _ := s.snapshot()
	if len(req.GetContainerRequests()) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "%s: allocate request without containers", s.resource)
	}
	resp := &pluginapi.AllocateResponse{}
	var given []string
	for _, c := range req.GetContainerRequests() {
		if why := s.sharingRefusal(pool, c.GetDevicesIds()); why != "" {
			s.log.Warnf("allocate refused: %s", why)
			return nil, status.Error(codes.FailedPrecondition, why)
		}
		hcas, err := pool.HCAsFor(c.GetDevicesIds())
		if err != nil {
			s.log.Warnf("allocate refused: %v", err)
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		cr, err := target.Response(pool, hcas)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "%s: %v", s.resource, err)
		}
		given = append(given, strings.Join(hcaNames(hcas), ","))
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	s.log.Infof("allocated %s", strings.Join(given, " and "))
	return resp, nil
}

func (s *server) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func hcaNames(hcas []HCA) []string {
	out := make([]string, len(hcas))
	for i, h := range hcas {
		out[i] = h.Name
	}
	return out
}
