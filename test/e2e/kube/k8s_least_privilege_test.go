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

// workerProbe prints, from inside the pod-network container: its PID 1's
// effective and bounding capabilities, what it has of a service account
// token, each socket its PID 1 holds, by inode, with the kind of the
// network namespace's socket table that lists it (the pod is on the
// host's network: /proc/1/net is the node's, every TCP or UDP socket of
// it listed there), and its command line.
const workerProbe = `grep -E '^Cap(Eff|Bnd):' /proc/1/status
echo "--- token"
ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1 || true
echo "--- sockets"
for f in /proc/1/fd/*; do
  l=$(readlink "$f") || continue
  case "$l" in socket:*) ;; *) continue ;; esac
  i=${l#socket:[}; i=${i%]}
  kind=other
  for t in unix:7 tcp:10 tcp6:10 udp:10 udp6:10 raw:10 raw6:10 packet:9 netlink:10; do
    if awk -v i="$i" -v c="${t#*:}" 'NR > 1 && $c == i { found = 1 } END { exit !found }' "/proc/1/net/${t%:*}" 2>/dev/null; then
      kind=${t%:*}; break
    fi
  done
  echo "$i $kind"
done
echo "--- cmdline"
tr '\0' ' ' < /proc/1/cmdline; echo`

// TestKubeLeastPrivilege: the chart's containers, in each mode, as they
// run on the real kubelet. The agent's (cdi, device-plugin, dra, and the
// latter two with podNetwork.enabled) has no effective or bounding
// capability, and /sys read-only all the way down, so that it cannot
// write any cgroup file (mkdir of a cgroup: "Read-only file system").
// With podNetwork.enabled the pod-network container holds exactly
// CAP_NET_ADMIN, CAP_NET_RAW and CAP_SYS_ADMIN, runs the worker, has no
// service account token (the agent's container has one, which shows the
// look works), and its process holds unix sockets alone: no TCP or UDP
// socket, none listening on the node's network.
func TestKubeLeastPrivilege(t *testing.T) {
	k := e2e.KubeNode(t, e2e.SharedFixtureNode(t, "seed002"), e2e.KubeOptions{})
	const none, podNetCaps = "0000000000000000", "0000000000203000" // CAP_NET_ADMIN (12), CAP_NET_RAW (13), CAP_SYS_ADMIN (21)
	podNetwork := map[string]any{"podNetwork": map[string]any{"enabled": true}}
	for _, c := range []struct {
		mode string
		more map[string]any
	}{
		{"cdi", nil},
		{"device-plugin", nil},
		{"dra", nil},
		{"dra", podNetwork},
		{"device-plugin", podNetwork},
	} {
		name := c.mode
		if c.more != nil {
			name += "/podNetwork"
		}
		t.Run(name, func(t *testing.T) {
			pod := k.InstallAgent(t, c.mode, c.more)
			out := k.MustExecInPod(t, e2e.AgentNamespace, pod, c.mode, "/bin/busybox", "sh", "-c", agentProbe)
			for _, want := range []string{"CapEff:\t" + none, "CapBnd:\t" + none} {
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
			if c.more == nil {
				return
			}
			// The agent's own token, which the look below must not find
			// in the worker.
			agentToken := k.MustExecInPod(t, e2e.AgentNamespace, pod, c.mode, "/bin/busybox", "ls", "/var/run/secrets/kubernetes.io/serviceaccount")
			if !strings.Contains(agentToken, "token") {
				t.Errorf("the agent's container has no service account token to look for: %q", agentToken)
			}
			w := k.MustExecInPod(t, e2e.AgentNamespace, pod, "pod-network", "/bin/busybox", "sh", "-c", workerProbe)
			t.Logf("the pod-network container:\n%s", w)
			for _, want := range []string{"CapEff:\t" + podNetCaps, "CapBnd:\t" + podNetCaps} {
				if !strings.Contains(w, want+"\n") {
					t.Errorf("the pod-network container's PID 1: want %q:\n%s", want, w)
				}
			}
			if tok := e2e.Section(w, "token"); strings.Contains(tok, "token") || !strings.Contains(tok, "No such file or directory") {
				t.Errorf("the pod-network container's service account directory: %q, want none", tok)
			}
			if cmd := e2e.Section(w, "cmdline"); !strings.Contains(cmd, "rdma-cdi-agent") || !strings.Contains(cmd, " pod-network-worker ") || strings.Contains(cmd, "metrics") {
				t.Errorf("the pod-network container runs %q, want rdma-cdi-agent pod-network-worker alone", cmd)
			}
			socks := strings.Fields(e2e.Section(w, "sockets"))
			if len(socks) == 0 || len(socks)%2 != 0 {
				t.Fatalf("the worker's sockets: %q, want at least its unix listener", e2e.Section(w, "sockets"))
			}
			for i := 0; i < len(socks); i += 2 {
				if socks[i+1] != "unix" {
					t.Errorf("the worker holds socket %s of kind %s, want unix sockets alone:\n%s", socks[i], socks[i+1], w)
				}
			}
			// Its liveness probe's command, as the kubelet runs it: the
			// worker answers on its socket.
			k.MustExecInPod(t, e2e.AgentNamespace, pod, "pod-network", "/usr/local/bin/rdma-cdi-agent", "pod-network-worker",
				"--socket=/run/rdma-cdi-netns/worker.sock", "--ping=5s")
			if p, err := k.GetPod(e2e.AgentNamespace, pod); err != nil {
				t.Error(err)
			} else {
				for _, st := range p.Status.ContainerStatuses {
					if st.Name == "pod-network" && st.RestartCount != 0 {
						t.Errorf("the pod-network container restarted %d times", st.RestartCount)
					}
				}
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
