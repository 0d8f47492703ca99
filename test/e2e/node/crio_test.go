package node

// CRI-O 1.34 (built from source by `make engines-cdi`) through the CRI API,
// as kubelet drives it: CDI requests, the spec versions it reads, the
// runtime wrapper as the shipped deploy/crio/10-rdma.conf configures it,
// and what the shipped hooks.d files do there.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/runtimewrap"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

func TestCDICRIODevice(t *testing.T) {
	s := seed002Spec(t)
	checkCRIDevices(t, e2e.CRIO(t, e2e.CRIOOptions{}), s)
}

// CRI-O 1.34 vendors the CDI library v1.0.1 (specs-go v1.0.0): it reads
// specs up to cdiVersion 1.0.0 and refuses a newer file whole.
func TestCRIOSpecVersions(t *testing.T) {
	c := e2e.CRIO(t, e2e.CRIOOptions{})
	n := e2e.SharedFixtureNode(t, "seed002")
	pod, podCfg := c.RunPod(t, e2e.UniqueID("versions-"))
	for _, tc := range []struct {
		version string
		ok      bool
	}{{"0.5.0", true}, {"1.0.0", true}, {"1.1.0", false}} {
		t.Run(tc.version, func(t *testing.T) {
			s := n.GenerateSpec(t, e2e.SpecOptions{})
			setCDIVersion(t, s.Path, tc.version)
			cfg := &runtimeapi.ContainerConfig{
				Metadata:   &runtimeapi.ContainerMetadata{Name: e2e.UniqueID("v-")},
				Image:      e2e.CRIImage(e2e.BB.Ref),
				Command:    []string{"/bin/sh", "-c", e2e.HookProbe},
				CDIDevices: []*runtimeapi.CDIDevice{{Name: s.Device("mlx5_1")}},
			}
			out, code, err := c.TryRunContainer(pod, podCfg, cfg)
			if !tc.ok {
				if err == nil || !strings.Contains(err.Error(), s.Device("mlx5_1")) {
					t.Fatalf("cdiVersion %s: want CRI-O to refuse the device, got %v (exit %d)\n%s", tc.version, err, code, out)
				}
				return
			}
			if err != nil || code != 0 {
				t.Fatalf("cdiVersion %s: %v (exit %d)\n%s\ndaemon log: %s", tc.version, err, code, out, e2e.TailFile(c.Log, 3000))
			}
			e2e.CheckHookProbe(t, "crio cdiVersion "+tc.version, s, out)
		})
	}
}

var cdiVersionLine = regexp.MustCompile(`(?m)^cdiVersion: .*$`)

// setCDIVersion rewrites the cdiVersion of a YAML spec written by generate.
func setCDIVersion(t *testing.T, path, version string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !cdiVersionLine.Match(data) {
		t.Fatalf("%s has no cdiVersion line:\n%s", path, data)
	}
	out := cdiVersionLine.ReplaceAll(data, []byte("cdiVersion: "+version))
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The runtime handler "rdma" of the shipped 10-rdma.conf runs the wrapper,
// on a node whose config accepts Kubernetes annotation requests
// ([runtime] kubernetes_accept_annotations, off by default:
// TestWrapperKubernetesRequests shows the default): a pod annotated with
// its request gets devices, CAP_IPC_LOCK, memlock and the NCCL env; a pod
// that asked for nothing runs unchanged.
func TestWrapperCRIO(t *testing.T) {
	s := newRDMASetup(t)
	wrapper := s.wrapperBinary(t)
	accepting := s.acceptingConfig(t, "kubernetes_accept_annotations = true\n")
	handler := e2e.CRIORuntimeHandler(t, wrapper, filepath.Join(s.dir, "runc-root"), []string{
		runtimewrap.EnvConfig + "=" + accepting, runtimewrap.EnvSysfsRoot + "=" + s.sys, runtimewrap.EnvDevRoot + "=" + s.dev,
	})
	c := e2e.CRIO(t, e2e.CRIOOptions{DropIns: map[string]string{"10-rdma.conf": handler}})
	pod, podCfg := c.RunPodWith(t, e2e.UniqueID("wrapper-"), "rdma")
	mlock := &runtimeapi.Mount{ContainerPath: "/mlock", HostPath: s.mlock, Readonly: true}
	run := func(t *testing.T, annotations map[string]string) probed {
		t.Helper()
		out, code := c.RunContainer(t, pod, podCfg, &runtimeapi.ContainerConfig{
			Metadata:    &runtimeapi.ContainerMetadata{Name: e2e.UniqueID("w-")},
			Image:       e2e.CRIImage(e2e.Glibc.Ref),
			Command:     []string{"sh", "-c", e2e.Probe},
			Annotations: annotations,
			Mounts:      []*runtimeapi.Mount{mlock},
		})
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		return parseProbe(t, out)
	}
	t.Run("annotation asks for two HCAs", func(t *testing.T) {
		p := run(t, map[string]string{s.vendor + "/devices": "mlx5_1,mlx5_2"})
		s.checkRDMA(t, p, []int{1, 2})
	})
	t.Run("asked for nothing", func(t *testing.T) {
		checkNothing(t, run(t, nil))
	})
}

// CRI-O reads hooks.d files too, but it has no precreate stage, and it
// refuses to start on a hook with a stage it does not know: either shipped
// file in its hooks dir stops it. So they go only where podman looks and a
// default CRI-O does not, /etc/containers/oci/hooks.d (TestDebInstallRemove
// and the bootstrap test check the paths). A CRI-O user gets the CDI devices
// with the spec's hooks, or the runtime wrapper.
func TestCRIORefusesThePrecreateHooks(t *testing.T) {
	bare := e2e.CRIOInputs(t)
	bare.Images = nil // it is not to run anything
	binary := e2e.Binary(t, "rdma-cdi")
	for _, name := range []string{"rdma-cdi-precreate.json", "rdma-cdi-precreate-always.json"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(e2e.RepoRoot(), "deploy/hooks.d", name))
			if err != nil {
				t.Fatal(err)
			}
			// As installed: its program exists (CRI-O, like podman, skips a
			// hook whose program is missing).
			data = []byte(strings.Replace(string(data), `"/usr/bin/rdma-cdi"`, fmt.Sprintf("%q", binary), 1))
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
			d, err := e2e.StartCRIO(t, bare, e2e.CRIOOptions{HooksDir: dir})
			if err == nil {
				// On a loaded machine CRI-O can create its socket before
				// it reads the hooks dir: the refusal then comes after.
				err = logLineWithin(d.Log, "unknown stage", 15*time.Second)
			}
			if err == nil || !strings.Contains(err.Error(), `unknown stage`) || !strings.Contains(err.Error(), "precreate") {
				t.Fatalf("want CRI-O to refuse the precreate hook at start, got %v", err)
			}
		})
	}
}

// logLineWithin returns, as an error, the first line of the file log that
// contains text, once it is there; nil if it is not within d.
func logLineWithin(log, text string, d time.Duration) error {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		b, _ := os.ReadFile(log)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, text) {
				return errors.New(line)
			}
		}
	}
	return nil
}
