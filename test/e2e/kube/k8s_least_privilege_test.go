package kube

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// agentProbe prints, from inside the agent's container: its PID 1's
// effective and bounding capabilities, every mount at or under /sys with
// its per-mount options, and what mkdir of a cgroup says (a new cgroup
// under the host's root one: a compromised agent's first step to moving
// or killing pods, removed at once should it ever succeed).
const agentProbe = `grep -E '^Cap(Eff|Bnd):' /proc/1/status
echo "--- mounts"
awk '$5 == "/sys" || index($5, "/sys/") == 1 { print $1, $2, $5, $6 }' /proc/1/mountinfo
echo "--- mkdir"
if mkdir /sys/fs/cgroup/rdma-cdi-probe 2>&1; then echo CREATED; rmdir /sys/fs/cgroup/rdma-cdi-probe; fi`

// TestKubeLeastPrivilege: the chart's agent, in each mode, as it runs on
// the real kubelet: no effective or bounding capability (with
// podNetwork.enabled, in modes dra and device-plugin, exactly CAP_NET_ADMIN,
// CAP_NET_RAW and CAP_SYS_ADMIN), and /sys read-only all the way down, so that it
// cannot write any cgroup file (mkdir of a cgroup: "Read-only file system").
func TestKubeLeastPrivilege(t *testing.T) {
	k := e2e.KubeNode(t, e2e.SharedFixtureNode(t, "seed002"), e2e.KubeOptions{})
	const none, podNetCaps = "0000000000000000", "0000000000203000" // CAP_NET_ADMIN (12), CAP_NET_RAW (13), CAP_SYS_ADMIN (21)
	for _, c := range []struct {
		mode string
		more map[string]any
		caps string
	}{
		{"cdi", nil, none},
		{"device-plugin", nil, none},
		{"dra", nil, none},
		{"dra", map[string]any{"podNetwork": map[string]any{"enabled": true}}, podNetCaps},
	} {
		name := c.mode
		if c.more != nil {
			name += "/podNetwork"
		}
		t.Run(name, func(t *testing.T) {
			pod := k.InstallAgent(t, c.mode, c.more)
			out := k.MustExecInPod(t, e2e.AgentNamespace, pod, c.mode, "/bin/busybox", "sh", "-c", agentProbe)
			for _, want := range []string{"CapEff:\t" + c.caps, "CapBnd:\t" + c.caps} {
				if !strings.Contains(out, want+"\n") {
					t.Errorf("the agent's PID 1: want %q:\n%s", want, out)
				}
			}
			reachable := sysMounts(t, e2e.Section(out, "mounts"))
			if !slices.ContainsFunc(reachable, func(m string) bool { return strings.HasPrefix(m, "/sys/fs/cgroup") }) {
				t.Fatalf("no cgroup mount under the agent's /sys to check:\n%s", out)
			}
			for _, m := range reachable {
				if opts := strings.Fields(m)[1]; opts != "ro" && !strings.HasPrefix(opts, "ro,") {
					t.Errorf("mount %q in the agent is not read-only", m)
				}
			}
			if mk := e2e.Section(out, "mkdir"); strings.Contains(mk, "CREATED") || !strings.Contains(mk, "Read-only file system") {
				t.Errorf("mkdir of a cgroup in the agent: %q, want Read-only file system", mk)
			}
		})
	}
}

// sysMounts are the mounts the agent reaches under /sys, each as
// "MOUNTPOINT OPTIONS", from mountinfo lines "ID PARENT MOUNTPOINT
// OPTIONS": the /sys mounted last (the chart's hostPath, over the
// runtime's own sysfs) and its descendants. The runtime's own /sys and its
// cgroup mount stay in mountinfo, hidden under it.
func sysMounts(t *testing.T, lines string) []string {
	t.Helper()
	type mount struct {
		id, parent  int
		point, opts string
	}
	var all []mount
	top := -1
	for _, l := range strings.Split(strings.TrimSpace(lines), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("mountinfo line %q", l)
		}
		id, err1 := strconv.Atoi(f[0])
		parent, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			t.Fatalf("mountinfo line %q", l)
		}
		all = append(all, mount{id, parent, f[2], f[3]})
		if f[2] == "/sys" {
			top = id
		}
	}
	reached := map[int]bool{top: true}
	var out []string
	for changed := true; changed; {
		changed = false
		for _, m := range all {
			if !reached[m.id] && reached[m.parent] {
				reached[m.id], changed = true, true
			}
		}
	}
	for _, m := range all {
		if reached[m.id] {
			out = append(out, m.point+" "+m.opts)
		}
	}
	return out
}
