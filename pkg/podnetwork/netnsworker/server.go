// Package netnsworker is pod networking's privileged half: a worker that
// alone holds CAP_NET_ADMIN, CAP_NET_RAW and CAP_SYS_ADMIN and does the
// netlink work in the node's and the pods' network namespaces (netdev
// moves, sub-interfaces, addresses, routes, ARP probes), for the agent
// that runs the NRI plugin, the kubelet's gRPC, the metrics listener and
// the API client with no capability at all. They talk net/rpc (JSON-RPC)
// over a unix socket in a directory only the two containers share.
//
// The agent is the network-facing piece, so the worker trusts no request:
// a pod's namespace must be a file directly under the configured netns
// directory, reached without a symbolic link, a network namespace, and not
// the worker's own (the node's); a move is planned again in the worker,
// where attach refuses a netdev that is not a device's or carries the
// default route; only a root peer (SO_PEERCRED) is served.
package netnsworker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/rpc"
	"net/rpc/jsonrpc"
	"os"
	"path/filepath"
	"sync"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/attach"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/networker"
)

// serviceName is the RPC service's name: methods are "PodNetwork.Plan"...
const serviceName = "PodNetwork"

// nsGetNSType is NS_GET_NSTYPE, _IO(0xb7, 0x3): the kind of namespace a
// descriptor of nsfs is (Linux 4.11).
const nsGetNSType = 0xb703

// Server is the worker. Its methods serve one request each.
type Server struct {
	// NetNSDir is where the runtime pins pods' network namespaces (as
	// mounted in the worker's container): the only place a request may
	// name one.
	NetNSDir string
	// NodeNetNS is the node's network namespace: "" for the worker's own
	// (the chart's pod is on the host's network); tests give another.
	NodeNetNS string
	// PeerUID is the only uid served (0: root, the agent's).
	PeerUID int
	Log     logrus.FieldLogger

	mu   sync.Mutex
	held map[string]netns.NsHandle
}

// Listen makes the socket at path, mode 0600 in a directory made 0700,
// replacing a socket a previous worker left there.
func Listen(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	old := unix.Umask(0o177)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Serve answers the connections l accepts until l is closed, then closes
// them; each connection's requests are served in order.
func (s *Server) Serve(l *net.UnixListener) error {
	srv := rpc.NewServer()
	if err := srv.RegisterName(serviceName, &Service{s: s}); err != nil {
		return err
	}
	var mu sync.Mutex
	open := map[*net.UnixConn]bool{}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for c := range open {
			c.Close()
		}
	}()
	for {
		conn, err := l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if err := CheckPeer(conn, s.PeerUID); err != nil {
			s.Log.Warnf("pod-network worker: %v", err)
			conn.Close()
			continue
		}
		mu.Lock()
		open[conn] = true
		mu.Unlock()
		go func() {
			srv.ServeCodec(jsonrpc.NewServerCodec(conn))
			mu.Lock()
			delete(open, conn)
			mu.Unlock()
		}()
	}
}

// CheckPeer refuses a connection whose peer's uid (SO_PEERCRED) is not uid.
func CheckPeer(conn *net.UnixConn, uid int) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return fmt.Errorf("refused a connection: its peer's credentials: %w", credErr)
	}
	if int(cred.Uid) != uid {
		return fmt.Errorf("refused a connection from uid %d (pid %d): only uid %d is served", cred.Uid, cred.Pid, uid)
	}
	return nil
}

// Close lets go of every namespace held.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, h := range s.held {
		h.Close()
		delete(s.held, id)
	}
}

// podPath checks that path names a file directly under s.NetNSDir, and
// gives its name there.
func (s *Server) podPath(path string) (string, error) {
	dir := filepath.Clean(s.NetNSDir)
	base := filepath.Base(path)
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || filepath.Dir(path) != dir ||
		base == "." || base == ".." || base == "/" {
		return "", fmt.Errorf("pod network namespace %q is not a file directly under %s: refused", path, dir)
	}
	return base, nil
}

// openPod opens the pod's network namespace at path: a file directly
// under s.NetNSDir (podPath), not a symbolic link, a network namespace,
// not the worker's own. An error wrapping fs.ErrNotExist: nothing there.
func (s *Server) openPod(path string) (netns.NsHandle, error) {
	base, err := s.podPath(path)
	if err != nil {
		return netns.None(), err
	}
	dir, err := unix.Open(filepath.Clean(s.NetNSDir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return netns.None(), fmt.Errorf("netns directory %s: %w", s.NetNSDir, err)
	}
	defer unix.Close(dir)
	// One component, and O_NOFOLLOW: a symbolic link there is refused,
	// wherever it points.
	fd, err := unix.Openat(dir, base, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return netns.None(), fmt.Errorf("pod network namespace %s is a symbolic link: refused", path)
	case err != nil:
		return netns.None(), fmt.Errorf("pod network namespace %s: %w", path, err)
	}
	h := netns.NsHandle(fd)
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil || st.Type != unix.NSFS_MAGIC {
		h.Close()
		return netns.None(), fmt.Errorf("pod network namespace %s is not a namespace (nsfs): refused", path)
	}
	if kind, err := unix.IoctlRetInt(fd, nsGetNSType); err != nil || kind != unix.CLONE_NEWNET {
		h.Close()
		return netns.None(), fmt.Errorf("pod network namespace %s is not a network namespace: refused", path)
	}
	for _, node := range []string{"", s.NodeNetNS} {
		own, err := attach.OpenNode(node)
		if err != nil {
			h.Close()
			return netns.None(), err
		}
		same := h.Equal(own.Node)
		own.Close()
		if same {
			h.Close()
			return netns.None(), fmt.Errorf("pod network namespace %s is the node's own: refused", path)
		}
	}
	return h, nil
}

// open opens the node's namespace (the worker's) and the pod's at path.
func (s *Server) open(path string) (attach.Namespaces, error) {
	pod, err := s.openPod(path)
	if err != nil {
		return attach.Namespaces{}, err
	}
	ns, err := attach.OpenNode(s.NodeNetNS)
	if err != nil {
		pod.Close()
		return ns, err
	}
	ns.Pod = pod
	return ns, nil
}

// Service is the RPC receiver (net/rpc wants exported argument types).
type Service struct{ s *Server }

// PodArgs name a pod's namespace, and the sandbox it is held for.
type PodArgs struct {
	Sandbox string `json:"sandbox,omitempty"`
	NetNS   string `json:"netns"`
}

// LinkNames are the names of a pod namespace's links.
type LinkNames struct {
	Names map[string]bool `json:"names"`
}

// PlanArgs are attachments to plan in a pod's namespace.
type PlanArgs struct {
	PodArgs
	Attachments []podnetwork.Attachment `json:"attachments"`
}

// RecordsArgs are records to apply or give back.
type RecordsArgs struct {
	PodArgs
	Records []attach.Record `json:"records"`
}

// Records are records as planned or applied.
type Records struct {
	Records []attach.Record `json:"records"`
}

// Released are the records a give-back could not undo, and why.
type Released struct {
	Left  []attach.Record `json:"left,omitempty"`
	Error string          `json:"error,omitempty"`
}

// GoneReply says whether a sandbox's namespace is gone.
type GoneReply struct {
	Gone bool `json:"gone"`
}

func (v *Service) PodLinkNames(args *PodArgs, reply *LinkNames) error {
	ns, err := v.s.open(args.NetNS)
	if err != nil {
		return err
	}
	defer ns.Close()
	reply.Names, err = attach.PodLinkNames(ns)
	return err
}

func (v *Service) Plan(args *PlanArgs, reply *Records) error {
	ns, err := v.s.open(args.NetNS)
	if err != nil {
		return err
	}
	defer ns.Close()
	reply.Records, err = networker.PlanIn(ns, args.Attachments)
	return err
}

// Apply applies the records in the pod's namespace and holds it for the
// sandbox. A move's record is planned again first: the netdev must still
// be the one recorded (its hardware address and kind), and attach refuses
// then what it refuses at Plan (not a device's netdev, the default
// route's); the state to restore is the worker's own reading.
func (v *Service) Apply(args *RecordsArgs, reply *Records) error {
	if args.Sandbox == "" {
		return errors.New("no sandbox id")
	}
	ns, err := v.s.open(args.NetNS)
	if err != nil {
		return err
	}
	defer ns.Close()
	records := args.Records
	for i, r := range records {
		if r.Mode != v1alpha1.ModeMove {
			continue
		}
		now, err := attach.Plan(ns, r.Attachment)
		if err != nil {
			return err
		}
		if now.HWAddr != r.HWAddr || now.Kind != r.Kind {
			return fmt.Errorf("%s: netdev %s is %s (%s), the record says %s (%s): not moved",
				r.Device, r.HostNetDev, now.HWAddr, now.Kind, r.HWAddr, r.Kind)
		}
		records[i].Saved = now.Saved
	}
	if err := networker.ApplyIn(ns, records); err != nil {
		return err
	}
	v.s.hold(args.Sandbox, ns.Pod)
	reply.Records = records
	return nil
}

// Release gives back the records: in the namespace held for the sandbox,
// else the one at the path, else, when nothing is there any more, in the
// node's alone (a moved netdev fallen back is restored). A path that is
// refused (not under the netns directory, a link, the node's) is an
// error, not a namespace gone.
func (v *Service) Release(args *RecordsArgs, reply *Released) error {
	ns, err := v.s.openHeld(args.Sandbox, args.NetNS)
	if errors.Is(err, fs.ErrNotExist) {
		ns, err = attach.OpenNode(v.s.NodeNetNS)
	}
	if err != nil {
		reply.Left, reply.Error = args.Records, err.Error()
		return nil
	}
	defer ns.Close()
	left, err := networker.ReleaseIn(ns, args.Records)
	if len(left) == 0 {
		v.s.letGo(args.Sandbox)
	}
	reply.Left = left
	if err != nil {
		reply.Error = err.Error()
	}
	return nil
}

// Empty is the argument and the answer of Ping.
type Empty struct{}

// Ping answers once the worker's state is free to be taken: a worker
// whose requests wait forever on it answers no ping (its liveness probe).
func (v *Service) Ping(_ *Empty, _ *Empty) error {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	return nil
}

func (v *Service) Gone(args *PodArgs, reply *GoneReply) error {
	v.s.mu.Lock()
	_, held := v.s.held[args.Sandbox]
	v.s.mu.Unlock()
	if held {
		return nil
	}
	base, err := v.s.podPath(args.NetNS)
	if err != nil {
		return err
	}
	_, err = os.Lstat(filepath.Join(filepath.Clean(v.s.NetNSDir), base))
	reply.Gone = errors.Is(err, fs.ErrNotExist)
	return nil
}

// hold keeps a duplicate of pod for sandbox id until its records are
// given back (the runtime may unpin the namespace before it says the
// sandbox stopped).
func (s *Server) hold(id string, pod netns.NsHandle) {
	h, err := networker.DupHandle(pod)
	if err != nil {
		s.Log.Warnf("pod-network worker: holding sandbox %s's namespace: %v", id, err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.held[id]; ok {
		old.Close()
	}
	if s.held == nil {
		s.held = map[string]netns.NsHandle{}
	}
	s.held[id] = h
}

func (s *Server) letGo(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.held[id]; ok {
		h.Close()
		delete(s.held, id)
	}
}

// openHeld opens the node's namespace and sandbox id's: the one held,
// else the one at path (checked as openPod does).
func (s *Server) openHeld(id, path string) (attach.Namespaces, error) {
	s.mu.Lock()
	h, ok := s.held[id]
	var dup netns.NsHandle
	var err error
	if ok {
		dup, err = networker.DupHandle(h)
	}
	s.mu.Unlock()
	if !ok {
		return s.open(path)
	}
	if err != nil {
		return attach.Namespaces{}, fmt.Errorf("pod network namespace %s: %w", path, err)
	}
	ns, err := attach.OpenNode(s.NodeNetNS)
	if err != nil {
		dup.Close()
		return ns, err
	}
	ns.Pod = dup
	return ns, nil
}

// Run serves at socket until ctx ends, then removes the socket and lets
// go of the namespaces held.
func (s *Server) Run(ctx context.Context, socket string) error {
	l, err := Listen(socket)
	if err != nil {
		return fmt.Errorf("pod-network worker socket: %w", err)
	}
	l.SetUnlinkOnClose(true)
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	s.Log.Infof("pod-network worker: serving %s (pods' namespaces under %s)", socket, s.NetNSDir)
	return s.Serve(l)
}
