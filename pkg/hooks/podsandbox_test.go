package hooks

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/sandboxlist"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// TestCheckPodSandbox: only a Kubernetes container with an HCA, in a pod of
// its own network namespace that the agent's index does not list, is
// refused; a missing index checks nothing, a broken one is named.
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
		want       error // nil, ErrSandboxNotHandled, or errAny
	}{
		{"containerd, sandbox handled", containerd("sb-known"), ownNet, []specs.LinuxDevice{uverbs(1)}, indexed, nil},
		{"containerd, sandbox started while the agent was away", containerd("sb-new"), ownNet, []specs.LinuxDevice{uverbs(1)}, indexed, ErrSandboxNotHandled},
		{"CRI-O, its own key decides", crio("sb-new"), ownNet, []specs.LinuxDevice{uverbs(1)}, indexed, ErrSandboxNotHandled},
		{"host network", containerd("sb-new"), nil, []specs.LinuxDevice{uverbs(1)}, indexed, nil},
		{"no HCA", containerd("sb-new"), ownNet, []specs.LinuxDevice{{Path: "/dev/null", Type: "c", Major: 1, Minor: 3}}, indexed, nil},
		{"not Kubernetes", nil, ownNet, []specs.LinuxDevice{uverbs(1)}, indexed, nil},
		{"no index: pod networking off", containerd("sb-new"), ownNet, []specs.LinuxDevice{uverbs(1)}, t.TempDir(), nil},
		{"broken index", containerd("sb-known"), ownNet, []specs.LinuxDevice{uverbs(1)}, broken, errAny},
		{"a FIFO for an index", containerd("sb-known"), ownNet, []specs.LinuxDevice{uverbs(1)}, fifo, errAny},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBundle(t)
			b.Spec.Annotations = tc.ann
			b.Spec.Linux.Namespaces = tc.namespaces
			b.Spec.Linux.Devices = tc.devices
			b.save(t)
			err := CheckPodSandbox(b.load(t), tc.stateDir, sys)
			switch {
			case tc.want == nil && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want == errAny && (err == nil || !strings.Contains(err.Error(), sandboxlist.File)):
				t.Errorf("got %v, want an error naming %s", err, sandboxlist.File)
			case tc.want == ErrSandboxNotHandled && !errors.Is(err, ErrSandboxNotHandled):
				t.Errorf("got %v, want %v", err, ErrSandboxNotHandled)
			}
		})
	}
}

var errAny = errors.New("any error")
