package watch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// socketBuffer is the receive buffer of the event sockets, large enough for
// a burst of a few thousand messages before the kernel drops (ENOBUFS).
const socketBuffer = 4 << 20

// send delivers ev unless ctx is done.
func send(ctx context.Context, out chan<- Event, ev Event) {
	select {
	case out <- ev:
	case <-ctx.Done():
	}
}

// Netlink sends an Event for every link, address and default-route change
// in the network namespace nsPath ("" = the caller's) until ctx ends. A lost
// subscription (e.g. buffer overrun) is reported as an event, so the node is
// rescanned, and resubscribed.
func Netlink(ctx context.Context, nsPath string, out chan<- Event, log logrus.FieldLogger) error {
	var ns *netns.NsHandle
	if nsPath != "" {
		h, err := netns.GetFromPath(nsPath)
		if err != nil {
			return fmt.Errorf("network namespace %s: %w", nsPath, err)
		}
		ns = &h
	}
	start := func() (<-chan netlink.LinkUpdate, <-chan netlink.AddrUpdate, <-chan netlink.RouteUpdate, chan struct{}, error) {
		done := make(chan struct{})
		onErr := func(err error) {
			if ctx.Err() == nil {
				log.Debugf("netlink: %v", err)
			}
		}
		links := make(chan netlink.LinkUpdate, 64)
		addrs := make(chan netlink.AddrUpdate, 64)
		routes := make(chan netlink.RouteUpdate, 64)
		if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{
			Namespace: ns, ErrorCallback: onErr, ReceiveBufferSize: socketBuffer}); err != nil {
			close(done)
			return nil, nil, nil, nil, fmt.Errorf("netlink link subscription: %w", err)
		}
		if err := netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{
			Namespace: ns, ErrorCallback: onErr, ReceiveBufferSize: socketBuffer}); err != nil {
			close(done)
			return nil, nil, nil, nil, fmt.Errorf("netlink address subscription: %w", err)
		}
		if err := netlink.RouteSubscribeWithOptions(routes, done, netlink.RouteSubscribeOptions{
			Namespace: ns, ErrorCallback: onErr, ReceiveBufferSize: socketBuffer}); err != nil {
			close(done)
			return nil, nil, nil, nil, fmt.Errorf("netlink route subscription: %w", err)
		}
		return links, addrs, routes, done, nil
	}
	links, addrs, routes, done, err := start()
	if err != nil {
		if ns != nil {
			_ = ns.Close()
		}
		return err
	}
	go func() {
		if ns != nil {
			defer ns.Close()
		}
		for {
			lost := forward(ctx, links, addrs, routes, out)
			close(done)
			drain(links, addrs, routes)
			if !lost {
				return
			}
			for {
				send(ctx, out, Event{Source: "netlink", Detail: "subscription lost; rescanning and resubscribing"})
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				links, addrs, routes, done, err = start()
				if err == nil {
					break
				}
				log.Warnf("netlink resubscription failed: %v", err)
			}
		}
	}()
	return nil
}

// forward copies updates to out until ctx ends (false) or a subscription
// channel closes (true).
func forward(ctx context.Context, links <-chan netlink.LinkUpdate, addrs <-chan netlink.AddrUpdate,
	routes <-chan netlink.RouteUpdate, out chan<- Event) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case u, ok := <-links:
			if !ok {
				return true
			}
			send(ctx, out, Event{Source: "netlink", Detail: describeLink(u)})
		case u, ok := <-addrs:
			if !ok {
				return true
			}
			verb := "removed"
			if u.NewAddr {
				verb = "added"
			}
			send(ctx, out, Event{Source: "netlink", Detail: fmt.Sprintf("address %s %s (ifindex %d)", u.LinkAddress.String(), verb, u.LinkIndex)})
		case u, ok := <-routes:
			if !ok {
				return true
			}
			if !isDefaultRoute(u.Dst) {
				continue
			}
			verb := "removed"
			if u.Type == unix.RTM_NEWROUTE {
				verb = "added"
			}
			send(ctx, out, Event{Source: "netlink", Detail: fmt.Sprintf("default route %s (ifindex %d)", verb, u.LinkIndex)})
		}
	}
}

// drain empties the subscription channels until the library closes them,
// so its goroutines never block on a send after done.
func drain(links <-chan netlink.LinkUpdate, addrs <-chan netlink.AddrUpdate, routes <-chan netlink.RouteUpdate) {
	go func() {
		for range links {
		}
	}()
	go func() {
		for range addrs {
		}
	}()
	go func() {
		for range routes {
		}
	}()
}

func describeLink(u netlink.LinkUpdate) string {
	a := u.Link.Attrs()
	switch u.Header.Type {
	case unix.RTM_DELLINK:
		return fmt.Sprintf("link %s removed", a.Name)
	default:
		state := "down"
		if u.IfInfomsg.Flags&unix.IFF_LOWER_UP != 0 {
			state = "carrier up"
		} else if u.IfInfomsg.Flags&unix.IFF_UP != 0 {
			state = "up, no carrier"
		}
		return fmt.Sprintf("link %s %s", a.Name, state)
	}
}

func isDefaultRoute(dst *net.IPNet) bool {
	if dst == nil {
		return true
	}
	ones, _ := dst.Mask.Size()
	return ones == 0
}

// Uevents sends an Event for every kernel uevent of subsystems (nil means
// DefaultUeventSubsystems) until ctx ends. The socket lives in the caller's
// network namespace: RDMA device uevents are broadcast there.
func Uevents(ctx context.Context, subsystems []string, out chan<- Event, log logrus.FieldLogger) error {
	if subsystems == nil {
		subsystems = DefaultUeventSubsystems
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return fmt.Errorf("uevent socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("uevent socket bind: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, socketBuffer); err != nil {
		log.Debugf("uevent socket buffer: %v", err)
	}
	f := os.NewFile(uintptr(fd), "uevent")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return fmt.Errorf("uevent socket: %w", err)
	}
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			var (
				n     int
				rerr  error
				from  unix.Sockaddr
				errno error
			)
			rerr = rc.Read(func(fd uintptr) bool {
				n, _, _, from, errno = unix.Recvmsg(int(fd), buf, nil, 0)
				return !errors.Is(errno, unix.EAGAIN)
			})
			if ctx.Err() != nil {
				return
			}
			if rerr != nil {
				log.Warnf("uevent socket closed: %v", rerr)
				return
			}
			if errors.Is(errno, unix.ENOBUFS) {
				send(ctx, out, Event{Source: "uevent", Detail: "uevents lost (buffer overrun); rescanning"})
				continue
			}
			if errno != nil {
				log.Debugf("uevent receive: %v", errno)
				continue
			}
			if nl, ok := from.(*unix.SockaddrNetlink); ok && nl.Pid != 0 {
				log.Debugf("uevent from user space (port %d)", nl.Pid)
			}
			ev, ok := ParseUevent(buf[:n])
			if !ok || !ev.Relevant(subsystems) {
				continue
			}
			send(ctx, out, Event{Source: "uevent", Detail: fmt.Sprintf("%s %s %s", ev.Subsystem, ev.Name(), ev.Action)})
		}
	}()
	return nil
}
