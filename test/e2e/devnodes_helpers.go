package e2e

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// What a container shows of its RDMA device nodes, capabilities and
// limits (the probe run in the Glibc image), against a fixture's topology.

// TailString is the last n bytes of s.
func TailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// IBNode is one line of `ls -l /dev/infiniband` in a container.
type IBNode struct {
	perm         string
	major, minor uint32
}

var lsLine = regexp.MustCompile(`^([bcdlps-][rwxsStT-]{9})\s+\d+\s+\S+\s+\S+\s+(\d+),\s*(\d+)\s+.*\s(\S+)$`)

// ParseLsDev parses busybox's or coreutils' `ls -l` of /dev/infiniband.
func ParseLsDev(t *testing.T, out string) map[string]IBNode {
	t.Helper()
	nodes := map[string]IBNode{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "total") {
			continue
		}
		m := lsLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("ls -l line is not a device node: %q\nin:\n%s", line, out)
		}
		major, _ := strconv.ParseUint(m[2], 10, 32)
		minor, _ := strconv.ParseUint(m[3], 10, 32)
		nodes[m[4]] = IBNode{perm: m[1], major: uint32(major), minor: uint32(minor)}
	}
	return nodes
}

// WantNodes are the fixture's /dev/infiniband nodes whose names are in
// names (all of them when names is nil), with the permissions the spec's
// fileMode gives: uverbs and rdma_cm 0666, umad and issm 0600.
func WantNodes(t *testing.T, topo fixture.Topology, names ...string) map[string]IBNode {
	t.Helper()
	all, err := fixture.DevNodes(topo)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]IBNode{}
	for _, n := range all {
		if names != nil && !slices.Contains(names, n.Name) {
			continue
		}
		perm := "crw-rw-rw-"
		if strings.HasPrefix(n.Name, "umad") || strings.HasPrefix(n.Name, "issm") {
			perm = "crw-------"
		}
		want[n.Name] = IBNode{perm: perm, major: n.Dev.Major, minor: n.Dev.Minor}
	}
	if names != nil && len(want) != len(names) {
		t.Fatalf("fixture %s lacks some of %v", topo.Name, names)
	}
	return want
}

// CheckNodes compares the device nodes a container listed with those it
// should have, by name, mode and device numbers.
func CheckNodes(t *testing.T, what string, got, want map[string]IBNode) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d nodes in /dev/infiniband, want %d:\ngot  %v\nwant %v", what, len(got), len(want), got, want)
	}
	for name, w := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("%s: /dev/infiniband/%s missing", what, name)
		} else if g != w {
			t.Errorf("%s: /dev/infiniband/%s = %s %d:%d, want %s %d:%d", what, name, g.perm, g.major, g.minor, w.perm, w.major, w.minor)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: /dev/infiniband/%s should not be there", what, name)
		}
	}
}

// Section is the part of a probe's output under "--- name", up to the
// next section.
func Section(out, name string) string {
	_, after, ok := strings.Cut(out, "--- "+name+"\n")
	if !ok {
		return ""
	}
	before, _, _ := strings.Cut(after, "\n--- ")
	return before
}

// Probe is run in the Glibc image: one "key=value" per line.
const Probe = `echo "devs=$(ls /dev/infiniband 2>/dev/null | sort | tr '\n' ' ')"
[ -e /dev/infiniband/uverbs1 ] && echo "uverbs1=$(stat -c '%F %t:%T' /dev/infiniband/uverbs1)"
echo "capeff=$(grep ^CapEff /proc/self/status | cut -f2)"
echo "memlock=$(ulimit -l)"
env | grep ^NCCL_ | sort | sed 's/^/env=/'
echo "ldd=$(ldd /usr/bin/ibv_devices | grep libibverbs.so | tr -s ' \t' ' ')"
echo "mlock=$(/mlock)"
true
`

// MLX5_1Nodes are the device nodes of HCA mlx5_1 (and the shared rdma_cm).
var MLX5_1Nodes = []string{"uverbs1", "umad1", "issm1", "rdma_cm"}

// HookProbe lists the device nodes and shows the /etc/nccl.conf the spec's
// create-container hook wrote. (Its memlock step is shown under podman,
// where the test can start the engine with a low soft limit.)
const HookProbe = `ls -l /dev/infiniband; echo --- nccl.conf; cat /etc/nccl.conf`

// CheckHookProbe checks HookProbe's output of a container given mlx5_1 by
// an engine that runs the CDI spec's hooks itself (through runc).
func CheckHookProbe(t *testing.T, engine string, s *CDISpec, out string) {
	t.Helper()
	ls, conf, _ := strings.Cut(out, "--- nccl.conf\n")
	CheckNodes(t, engine+" =mlx5_1", ParseLsDev(t, ls), WantNodes(t, s.Node.Topo, MLX5_1Nodes...))
	if !regexp.MustCompile(`(?m)^NCCL_IB_HCA==?mlx5_1(:1)?$`).MatchString(conf) {
		t.Errorf("%s: the hook's nccl.conf does not name exactly mlx5_1:\n%s", engine, conf)
	}
}
