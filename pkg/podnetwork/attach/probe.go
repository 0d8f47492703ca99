package attach

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/netinfo"
)

// The ARP probe of a pod's IPv4 addresses (RFC 5227's, shortened: its
// own figures, three probes 1-2 s apart and 2 s of waiting, are for links
// with hosts that sleep, and would add seconds to every pod start). A host
// on a fabric's link answers a probe within a millisecond or so; three
// probes 20 ms apart cover a lost frame, and 100 ms from the first a host
// slow to answer. The probe adds arpProbeWait to the start of a pod that
// gets IPv4 addresses, once per interface whatever their number: at 250 ms
// it was most of a sub-interface pod's added start (BENCHMARKS.md, "Pod
// networking").
const (
	arpProbes        = 3
	arpProbeInterval = 20 * time.Millisecond
	// arpProbeWait is the whole probe, from the first frame sent to the
	// last answer read.
	arpProbeWait = 100 * time.Millisecond
)

// carrierWait bounds the wait for a link just brought up to get its
// carrier back, before its addresses are probed: without one, no probe
// leaves and the kernel's DAD does not start. A veth or a macvlan of a
// live netdev has it at once; a NIC's port brought up again after a move,
// within a second or two.
const carrierWait = 5 * time.Second

// addressCheck is what configure does for the addresses the pod gets (the
// node's own, given back, get none, and keep IPv6's IFA_F_NODAD): on a
// link that was carrying (live), IPv4 ones are probed before they are
// added and IPv6 ones waited on until the kernel's DAD passes, in the
// pod's namespace ns (h, netlink there). On a link without a carrier
// nothing could answer: the kernel runs DAD once the carrier comes.
type addressCheck struct {
	h    *netlink.Handle
	ns   netns.NsHandle
	live bool
}

// dadWait bounds the wait for the kernel's duplicate address detection of
// a pod's IPv6 addresses, all at once: by default one solicitation 1 s
// after a random delay of up to 1 s (dad_transmits, retrans_time_ms,
// rtr_solicit_delay), so up to 2 s added to the start of a pod that gets
// IPv6 addresses.
const dadWait = 3 * time.Second

// awaitDAD polls addrs' IPv6 addresses on link until none is tentative,
// at most dadWait, and fails on one whose detection found it in use. An
// address of a namespace with accept_dad 0 is never tentative.
func (c addressCheck) awaitDAD(link netlink.Link, addrs []netip.Prefix) error {
	if !c.live {
		return nil
	}
	deadline := time.Now().Add(dadWait)
	for {
		tentative, err := c.tentative(link, addrs)
		if err != nil || !tentative.IsValid() {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("address %s on %s still tentative %s after it was added: duplicate address detection did not finish", tentative, link.Attrs().Name, dadWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tentative gives one of addrs that link holds and the kernel still
// tests, or the zero Addr; an error for one found in use.
func (c addressCheck) tentative(link netlink.Link, addrs []netip.Prefix) (netip.Addr, error) {
	held, err := c.h.AddrList(link, netlink.FAMILY_V6)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("addresses of %s: %w", link.Attrs().Name, err)
	}
	for _, a := range held {
		p, ok := prefixOf(a.IPNet)
		if !ok || !slices.ContainsFunc(addrs, func(want netip.Prefix) bool { return want.Addr() == p.Addr() }) {
			continue
		}
		if a.Flags&unix.IFA_F_DADFAILED != 0 {
			return netip.Addr{}, fmt.Errorf("address %s is in use on %s's link: its duplicate address detection failed", p.Addr(), link.Attrs().Name)
		}
		if a.Flags&unix.IFA_F_TENTATIVE != 0 {
			return p.Addr(), nil
		}
	}
	return netip.Addr{}, nil
}

// hasCarrier says whether link is up with a carrier.
func hasCarrier(link netlink.Link) bool { return link.Attrs().RawFlags&unix.IFF_LOWER_UP != 0 }

// waitForCarrier polls link until it has a carrier, at most carrierWait:
// it had one before it was moved or given a sub-interface.
func waitForCarrier(h *netlink.Handle, link netlink.Link) error {
	deadline := time.Now().Add(carrierWait)
	for {
		l, err := h.LinkByIndex(link.Attrs().Index)
		if err != nil {
			return err
		}
		if hasCarrier(l) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s has no carrier %s after it was brought up: its addresses cannot be checked for duplicates", link.Attrs().Name, carrierWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// probeIPv4 sends ARP probes for addrs' IPv4 addresses from link (in the
// pod's namespace) and fails, naming the address and the hardware address
// that answered, when another host uses one: it replies, announces it, or
// probes for it too. Links that do not frame Ethernet (IPoIB) are not
// probed: the ARP library builds Ethernet frames only.
func (c addressCheck) probeIPv4(link netlink.Link, addrs []netip.Prefix) error {
	var candidates []netip.Addr
	for _, p := range addrs {
		if p.Addr().Is4() {
			candidates = append(candidates, p.Addr())
		}
	}
	attrs := link.Attrs()
	if !c.live || len(candidates) == 0 || attrs.EncapType != "ether" || attrs.RawFlags&unix.IFF_NOARP != 0 || len(attrs.HardwareAddr) != 6 {
		return nil
	}
	if err := waitForCarrier(c.h, link); err != nil {
		return err
	}
	ifi := &net.Interface{Index: attrs.Index, Name: attrs.Name, HardwareAddr: attrs.HardwareAddr, MTU: attrs.MTU}
	var conn *packet.Conn
	err := netinfo.Within(c.ns, func() (err error) {
		// The socket belongs to the namespace it is made in, wherever it
		// is used from then on.
		conn, err = packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeARP), nil)
		return err
	})
	if err != nil {
		return fmt.Errorf("ARP probe on %s: %w", attrs.Name, err)
	}
	defer conn.Close()
	return arpProbe(conn, ifi, candidates)
}

// arpProbe sends arpProbes rounds of probes for candidates from ifi and
// reads what comes back in between, until arpProbeWait after the first.
func arpProbe(conn *packet.Conn, ifi *net.Interface, candidates []netip.Addr) error {
	start := time.Now()
	for round := range arpProbes {
		for _, ip := range candidates {
			if err := sendProbe(conn, ifi.HardwareAddr, ip); err != nil {
				return fmt.Errorf("ARP probe for %s on %s: %w", ip, ifi.Name, err)
			}
		}
		until := start.Add(time.Duration(round+1) * arpProbeInterval)
		if round == arpProbes-1 {
			until = start.Add(arpProbeWait)
		}
		if err := readAnswers(conn, ifi, candidates, until); err != nil {
			return err
		}
	}
	return nil
}

// sendProbe broadcasts a probe for ip: an ARP request from hw with the
// sender address 0.0.0.0, so that no host's cache learns ip from it.
func sendProbe(conn *packet.Conn, hw net.HardwareAddr, ip netip.Addr) error {
	p, err := arp.NewPacket(arp.OperationRequest, hw, netip.IPv4Unspecified(), make(net.HardwareAddr, 6), ip)
	if err != nil {
		return err
	}
	payload, err := p.MarshalBinary()
	if err != nil {
		return err
	}
	frame, err := (&ethernet.Frame{Destination: ethernet.Broadcast, Source: hw, EtherType: ethernet.EtherTypeARP, Payload: payload}).MarshalBinary()
	if err != nil {
		return err
	}
	_, err = conn.WriteTo(frame, &packet.Addr{HardwareAddr: ethernet.Broadcast})
	return err
}

// readAnswers reads ARP frames until until and fails at the first that
// says another host uses one of candidates.
func readAnswers(conn *packet.Conn, ifi *net.Interface, candidates []netip.Addr, until time.Time) error {
	if err := conn.SetReadDeadline(until); err != nil {
		return err
	}
	buf := make([]byte, ifi.MTU+14)
	for {
		n, _, err := conn.ReadFrom(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ARP probe on %s: %w", ifi.Name, err)
		}
		if ip, hw, ok := conflict(buf[:n], ifi.HardwareAddr, candidates); ok {
			return fmt.Errorf("address %s is in use on %s's link: %s answered its ARP probe", ip, ifi.Name, hw)
		}
	}
}

// conflict says whether frame, an ARP packet that another host (not own)
// sent, claims one of candidates (RFC 5227, 2.1.1): its sender address is
// the candidate (a reply or an announcement), or it probes for it too.
func conflict(frame []byte, own net.HardwareAddr, candidates []netip.Addr) (netip.Addr, net.HardwareAddr, bool) {
	var f ethernet.Frame
	var p arp.Packet
	if f.UnmarshalBinary(frame) != nil || f.EtherType != ethernet.EtherTypeARP || p.UnmarshalBinary(f.Payload) != nil {
		return netip.Addr{}, nil, false
	}
	if bytes.Equal(p.SenderHardwareAddr, own) {
		return netip.Addr{}, nil, false
	}
	for _, ip := range candidates {
		probing := p.Operation == arp.OperationRequest && p.SenderIP == netip.IPv4Unspecified() && p.TargetIP == ip
		if p.SenderIP == ip || probing {
			return ip, p.SenderHardwareAddr, true
		}
	}
	return netip.Addr{}, nil, false
}

// refuseParentAddrs fails when addrs hold an address of parent, a
// sub-interface's netdev in the node's namespace: the sub-interface's
// probes go out on the wire, never up its parent's stack, so the node's
// own address there would be taken unseen.
func refuseParentAddrs(h *netlink.Handle, parent netlink.Link, addrs []netip.Prefix) error {
	own, err := h.AddrList(parent, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", parent.Attrs().Name, err)
	}
	for _, a := range own {
		held, ok := prefixOf(a.IPNet)
		if !ok {
			continue
		}
		for _, p := range addrs {
			if p.Addr() == held.Addr() {
				return fmt.Errorf("address %s is the node's own on %s: not given to a sub-interface of it", p.Addr(), parent.Attrs().Name)
			}
		}
	}
	return nil
}
