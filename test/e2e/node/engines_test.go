package node

import (
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// Smoke tests: each engine helper runs the busybox image on this machine.

func TestMain(m *testing.M) { e2e.Main(m) }

func expectOK(t *testing.T, stdout, stderr string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%v\nstdout: %s", err, stdout)
	}
	if strings.TrimSpace(stdout) != "ok" {
		t.Fatalf("stdout = %q, want \"ok\"; stderr: %s", stdout, stderr)
	}
}

func TestEnginePodman(t *testing.T) {
	p := e2e.Podman(t)
	so, se, err := p.Run(e2e.BB.Ref, "echo", "ok")
	expectOK(t, so, se, err)

	// The default ulimits of the containers.conf apply.
	so, _, err = p.Run(e2e.BB.Ref, "sh", "-c", "ulimit -n")
	if err != nil || strings.TrimSpace(so) != "1024" {
		t.Errorf("ulimit -n = %q, %v; want 1024", so, err)
	}
}

func TestEnginePodmanGlibc(t *testing.T) {
	p := e2e.Podman(t)
	// The glibc image has ibv_devices but no libibverbs: it must not load.
	so, se, err := p.Run(e2e.Glibc.Ref, "sh", "-c", "test -x /usr/bin/ibv_devices && ! ls /usr/lib/x86_64-linux-gnu/libibverbs.so.1 2>/dev/null && echo ok")
	expectOK(t, so, se, err)
}

func TestEngineRunc(t *testing.T) {
	r := e2e.Runc(t)
	b := r.Bundle(t, e2e.BB)
	b.Spec.Process.Args = []string{"echo", "ok"}
	so, se, err := r.Run(b)
	expectOK(t, so, se, err)
}

func TestEngineDocker20(t *testing.T) {
	d := e2e.Docker20(t)
	so, se, err := d.Run(e2e.BB.Ref, "echo", "ok")
	expectOK(t, so, se, err)
}

func TestEngineContainerd(t *testing.T) {
	c := e2e.Containerd(t)
	so, se, err := c.Run(e2e.BB.Ref, e2e.UniqueID("smoke-"), "echo", "ok")
	expectOK(t, so, se, err)
}

// cdiSmokeSpec is an env-only CDI spec (0.5.0: podman 4.3 reads no newer).
func cdiSmokeSpec(t *testing.T) (device string) {
	vendor := e2e.UniqueVendor(t)
	spec := `{"cdiVersion":"0.5.0","kind":"` + vendor + `/hca","devices":[{"name":"smoke","containerEdits":{"env":["RDMA_CDI_SMOKE=ok"]}}]}`
	e2e.InstallSpecData(t, "smoke", ".json", []byte(spec))
	return vendor + "/hca=smoke"
}

func TestEnginePodmanCDI(t *testing.T) {
	p := e2e.Podman(t)
	so, se, err := p.Run("--device", cdiSmokeSpec(t), e2e.BB.Ref, "sh", "-c", "echo $RDMA_CDI_SMOKE")
	expectOK(t, so, se, err)
}

func TestEngineContainerdCDI(t *testing.T) {
	c := e2e.Containerd(t)
	so, se, err := c.Run("--device", cdiSmokeSpec(t), e2e.BB.Ref, e2e.UniqueID("smoke-"), "sh", "-c", "echo $RDMA_CDI_SMOKE")
	expectOK(t, so, se, err)
}

func TestEngineDocker29(t *testing.T) {
	d := e2e.Docker29(t)
	so, se, err := d.Run(e2e.BB.Ref, "echo", "ok")
	expectOK(t, so, se, err)
}

func TestEngineDocker29CDI(t *testing.T) {
	d := e2e.Docker29(t)
	so, se, code, err := d.RunAPI(e2e.DockerRunSpec{
		Image:      e2e.BB.Ref,
		Cmd:        []string{"sh", "-c", "echo $RDMA_CDI_SMOKE"},
		CDIDevices: []string{cdiSmokeSpec(t)},
	})
	if err == nil && code != 0 {
		t.Fatalf("exit code %d; stderr: %s", code, se)
	}
	expectOK(t, so, se, err)
}
