package netinfo_test

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/rdma-cdi/rdma-cdi/pkg/netinfo"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

const childEnv = "NETINFO_TEST_NETNS"

// TestMain lets the test binary act as a child that opens a namespace from
// inside a new pid namespace, as a createContainer hook does.
func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		h, err := netinfo.Open(path)
		if err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(3)
		}
		nd, found, err := h.NetDev("rdv0")
		if err != nil || !found || len(nd.Addrs) == 0 || nd.Addrs[0] != netip.MustParsePrefix("10.77.0.2/24") {
			os.Exit(4)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func prepare(t *testing.T) string {
	h, path := fixture.NewNetNS(t)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "rdv0"}, PeerName: "rdv0p"}
	if err := h.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	addr, _ := netlink.ParseAddr("10.77.0.2/24")
	if err := h.AddrAdd(veth, addr); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"rdv0", "rdv0p"} {
		l, _ := h.LinkByName(name)
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func TestOpenReadsTheNamedNamespace(t *testing.T) {
	path := prepare(t)
	h, err := netinfo.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nd, found, err := h.NetDev("rdv0")
	if err != nil || !found || nd.Addrs[0] != netip.MustParsePrefix("10.77.0.2/24") || !nd.Carrier {
		t.Fatalf("rdv0 = %+v found=%v err=%v", nd, found, err)
	}
	if _, found, _ := h.NetDev("no-such-link"); found {
		t.Fatal("a missing link must be reported as not found")
	}
}

func TestOpenFromAnotherPidNamespace(t *testing.T) {
	path := prepare(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare not installed")
	}
	// --fork without --mount-proc keeps the host's /proc, as in a hook.
	cmd := exec.Command(unshare, "--pid", "--fork", os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("Open from a new pid namespace: %v %s", err, out)
	}
}

func TestOpenMissingNamespace(t *testing.T) {
	if _, err := netinfo.Open("/run/netns/does-not-exist"); err == nil {
		t.Fatal("want an error naming the namespace")
	}
}

// TestWithinRunsInTheTarget: fn sees the target's /proc/sys/net (rdv0's
// sysctls exist only there), and the caller's thread stays where it was.
func TestWithinRunsInTheTarget(t *testing.T) {
	path := prepare(t)
	target, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	const sysctl = "/proc/sys/net/ipv4/conf/rdv0/arp_ignore"
	if err := netinfo.Within(target, func() error {
		_, err := os.ReadFile(sysctl)
		return err
	}); err != nil {
		t.Fatalf("reading %s within the target: %v", sysctl, err)
	}
	after, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if !before.Equal(after) {
		t.Error("the caller's thread changed namespace")
	}
	if _, err := os.Stat(sysctl); err == nil {
		t.Errorf("%s exists outside the target: the test cannot tell where fn ran", sysctl)
	}
	want := errors.New("fn's own error")
	if err := netinfo.Within(target, func() error { return want }); !errors.Is(err, want) {
		t.Errorf("Within returned %v, want fn's error", err)
	}
}
