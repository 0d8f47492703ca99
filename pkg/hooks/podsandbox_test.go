package hooks

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/sandboxlist"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// TestCheckPodSandbox: with pod networking on, only a Kubernetes container
// with an HCA, in a pod of its own network namespace that the agent's
// index does not list, is refused; a missing index refuses it too (it
// used to check nothing, which let a sandbox started after a reboot or an
// install, before the agent had synchronized, run without its interface);
// a broken one is named. With pod networking off nothing is checked,
// whatever index is there.
func TestCheckPodSandbox(t *testing.T) {
	sys := sysfs.Root(roceSysfs(t))
	indexed := t.TempDir()
	must(t, sandboxlist.Write(indexed, []string{"sb-known"}))
	broken := t.TempDir()
	must(t, os.WriteFile(filepath.Join(broken, sandboxlist.File), []byte("{"), 0o644))
	fifo := t.TempDir()
	must(t, syscallMkfifo(filepath.Join(fifo, sandboxlist.File)))
	containerd := func(id string) map[string]string { return map[string]string{"io.kubernetes.cri.sandbox-id": id} }
	crio := func(id string) map[string]string {
		// CRI-O copies the pod's annotations in: containerd's key here is
		// the pod's, not the runtime's.
		return map[string]string{"io.container.manager": "cri-o", "io.kubernetes.cri-o.SandboxID": id, "io.kubernetes.cri.sandbox-id": "sb-known"}
	}
	ownNet := []specs.LinuxNamespace{{Type: specs.NetworkNamespace, Path: "/var/run/netns/cni-1"}}
	cases := []struct {
		name       string
		ann        map[string]string
		namespaces []specs.LinuxNamespace
		devices    []specs.LinuxDevice
		stateDir   string
		off        bool  // pod_network.enabled = false
		want       error // nil, ErrSandboxNotHandled, or errAny
	}{
		{"containerd, sandbox handled", containerd("sb-known"), ownNet, []specs.LinuxDevice{uverbs(1)}, indexed, false, nil},
		{"containerd, sandbox started while the agent was away", containerd("sb-new"), ownNet, []specs.LinuxDevice{uverbs(1)}, indexed, false, ErrSandboxNotHandled},
		{"CRI-O, its own key decides", crio("sb-new"), ownNet, []specs.LinuxDevice{uverbs(1)}, indexed, false, ErrSandboxNotHandled},
		{"host network", containerd("sb-new"), nil, []specs.LinuxDevice{uverbs(1)}, indexed, false, nil},
		{"no HCA", containerd("sb-new"), ownNet, []specs.LinuxDevice{{Path: "/dev/null", Type: "c", Major: 1, Minor: 3}}, indexed, false, nil},
		{"not Kubernetes", nil, ownNet, []specs.LinuxDevice{uverbs(1)}, indexed, false, nil},
		// The agent has not written its index yet (a reboot emptied the
		// tmpfs, or an install just turned pod networking on): refused.
		{"no index, pod networking on", containerd("sb-new"), ownNet, []specs.LinuxDevice{uverbs(1)}, t.TempDir(), false, ErrSandboxNotHandled},
		{"no index, pod networking on, host network", containerd("sb-new"), nil, []specs.LinuxDevice{uverbs(1)}, t.TempDir(), false, nil},
		{"no index, pod networking on, no HCA", containerd("sb-new"), ownNet, []specs.LinuxDevice{{Path: "/dev/null", Type: "c", Major: 1, Minor: 3}}, t.TempDir(), false, nil},
		{"no index, pod networking on, not Kubernetes", nil, ownNet, []specs.LinuxDevice{uverbs(1)}, t.TempDir(), false, nil},
		{"no index, pod networking off", containerd("sb-new"), ownNet, []specs.LinuxDevice{uverbs(1)}, t.TempDir(), true, nil},
		{"stale index, pod networking off", containerd("sb-new"), ownNet, []specs.LinuxDevice{uverbs(1)}, indexed, true, nil},
		{"broken index, pod networking off", containerd("sb-known"), ownNet, []specs.LinuxDevice{uverbs(1)}, broken, true, nil},
		{"broken index", containerd("sb-known"), ownNet, []specs.LinuxDevice{uverbs(1)}, broken, false, errAny},
		{"a FIFO for an index", containerd("sb-known"), ownNet, []specs.LinuxDevice{uverbs(1)}, fifo, false, errAny},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBundle(t)
			b.Spec.Annotations = tc.ann
			b.Spec.Linux.Namespaces = tc.namespaces
			b.Spec.Linux.Devices = tc.devices
			b.save(t)
			err := CheckPodSandbox(b.load(t), config.PodNetwork{Enabled: !tc.off, StateDir: tc.stateDir}, sys)
			switch {
			case tc.want == nil && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want == errAny && (err == nil || !strings.Contains(err.Error(), sandboxlist.File)):
				t.Errorf("got %v, want an error naming %s", err, sandboxlist.File)
			case tc.want == ErrSandboxNotHandled && !errors.Is(err, ErrSandboxNotHandled):
				t.Errorf("got %v, want %v", err, ErrSandboxNotHandled)
			case errors.Is(err, sandboxlist.ErrNoIndex) && (!strings.Contains(err.Error(), "missing") || !strings.Contains(err.Error(), "the kubelet will retry")):
				t.Errorf("%v: want it to say that the list is missing and that the kubelet retries", err)
			}
		})
	}
}

var errAny = errors.New("any error")

// TestStepsHookTakesPodNetworkFromTheConfig: the steps hook knows whether
// pod networking is on from its config (pod_network.enabled, which the
// install writes to the node), not from the agent's list. On with no list
// yet (a reboot emptied the tmpfs, or the install has just turned it on
// and the agent has not synchronized), a pod's container with an HCA is
// refused; off, a list a former agent left is not looked at.
func TestStepsHookTakesPodNetworkFromTheConfig(t *testing.T) {
	sysRoot := roceSysfs(t)
	stale := t.TempDir()
	must(t, sandboxlist.Write(stale, []string{"sb-other"}))
	for _, tc := range []struct {
		name     string
		enabled  bool
		stateDir string
		refused  bool
	}{
		{"on, no list", true, t.TempDir(), true},
		{"on, not listed", true, stale, true},
		{"off, stale list", false, stale, false},
		{"off, no list", false, t.TempDir(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBundle(t)
			b.Spec.Annotations = map[string]string{"io.kubernetes.cri.sandbox-id": "sb-new"}
			b.Spec.Linux.Namespaces = []specs.LinuxNamespace{{Type: specs.NetworkNamespace, Path: "/var/run/netns/cni-1"}}
			b.Spec.Linux.Devices = []specs.LinuxDevice{uverbs(1)}
			b.save(t)
			s := Settings{Config: config.Default()}
			s.Roots.Sysfs = sysRoot
			s.Config.PodNetwork.Enabled = tc.enabled
			s.Config.PodNetwork.StateDir = tc.stateDir
			err := s.StepsHook(UserSpaceOptions{}, nil)(context.Background(), b.load(t), logrus.NewEntry(logrus.New()))
			if tc.refused && !errors.Is(err, ErrSandboxNotHandled) {
				t.Errorf("got %v, want %v", err, ErrSandboxNotHandled)
			}
			if !tc.refused && err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
}
