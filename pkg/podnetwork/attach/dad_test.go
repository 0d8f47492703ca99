package attach

import (
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// An IPv6 address another host on the link holds fails the kernel's
// duplicate address detection, which the attachment waits for.
func TestAttachRefusesAnIPv6AddressANeighborHolds(t *testing.T) {
	for _, mode := range bothModes {
		t.Run(string(mode), func(t *testing.T) {
			node := refusedWhatANeighborHolds(t, mode, "fd00:63::77/64")
			if _, err := node.LinkByName("eth3"); err != nil {
				t.Errorf("the node's eth3: %v", err)
			}
		})
	}
}

// A free IPv6 address went through duplicate address detection (no
// IFA_F_NODAD) and is usable, no longer tentative, once Attach returns.
func TestAttachGivesAFreeIPv6AddressUsable(t *testing.T) {
	for _, mode := range bothModes {
		t.Run(string(mode), func(t *testing.T) {
			ns, node, pod := nodeAndPod(t)
			neighborHolding(t, node, "fd00:63::77/64")
			r, err := attachWith(ns, mode, "fd00:63::78/64")
			must(t, err)
			addrs, err := pod.AddrList(linkNamed(t, pod, "roce0"), netlink.FAMILY_V6)
			must(t, err)
			found := false
			for _, a := range addrs {
				if a.IP.String() != "fd00:63::78" {
					continue
				}
				found = true
				if a.Flags&(unix.IFA_F_NODAD|unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
					t.Errorf("fd00:63::78 has flags %#x: not detected, still tentative or failed", a.Flags)
				}
			}
			if !found {
				t.Errorf("fd00:63::78 not on roce0: %v", addrs)
			}
			must(t, Detach(ns, r))
		})
	}
}
