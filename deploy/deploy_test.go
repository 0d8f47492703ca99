// Package deploy holds no Go code: these tests check the deployment files
// themselves (sample config, systemd units); the Helm chart's tests, which
// need helm, are in test/e2e (helm_chart_test.go, k8s_helm_test.go).
package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
)

// TestSampleConfigDocumentsTheDefaults uncomments every "# key = value"
// line of the sample config: the result must decode strictly and equal the
// built-in defaults, so the file never lies about them.
func TestSampleConfigDocumentsTheDefaults(t *testing.T) {
	data, err := os.ReadFile("bootstrap/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	var asIs config.Config
	if err := config.Decode(data, &asIs); err != nil {
		t.Fatalf("sample config as shipped: %v", err)
	}
	keyLine := regexp.MustCompile(`(?m)^# ([a-z_]+ = .*)$`)
	uncommented := keyLine.ReplaceAll(data, []byte("$1"))
	if n := len(keyLine.FindAll(data, -1)); n < 20 {
		t.Fatalf("only %d documented keys", n)
	}
	got := config.Default()
	got.NCCL.Tunables = nil
	if err := config.Decode(uncommented, &got); err != nil {
		t.Fatalf("uncommented sample config: %v\n%s", err, uncommented)
	}
	want := config.Default()
	// TOML empty arrays decode as empty slices.
	for _, s := range []*[]string{&got.NCCL.IncludeHCAs, &got.NCCL.ExcludeHCAs, &got.CDI.ExtraLibraries} {
		if len(*s) == 0 {
			*s = nil
		}
	}
	if len(got.NCCL.Tunables) == 0 {
		got.NCCL.Tunables = want.NCCL.Tunables
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("documented defaults differ:\n got %+v\nwant %+v", got, want)
	}
}

func TestSystemdUnitsAreHardened(t *testing.T) {
	for _, unit := range []string{"systemd/rdma-cdi-watch.service", "systemd/rdma-cdi-generate.service"} {
		data, err := os.ReadFile(unit)
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]string{}
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
				keys[k] = v
			}
		}
		for k, v := range map[string]string{
			"ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes", "NoNewPrivileges": "yes",
			"CapabilityBoundingSet": "", "RestrictAddressFamilies": "AF_NETLINK AF_UNIX",
			"ReadWritePaths": "/run/cdi /var/log/rdma-cdi", "RuntimeDirectory": "cdi", "RuntimeDirectoryPreserve": "yes",
		} {
			if got, ok := keys[k]; !ok || got != v {
				t.Errorf("%s: %s=%q, want %q", unit, k, got, v)
			}
		}
		binary := "/usr/bin/rdma-cdi"
		if strings.HasSuffix(unit, "-watch.service") {
			binary = "/usr/bin/rdma-cdi-agent" // the agents' binary
		}
		if !strings.HasPrefix(keys["ExecStart"], binary+" --config /etc/rdma-cdi/config.toml ") {
			t.Errorf("%s: ExecStart=%s", unit, keys["ExecStart"])
		}
	}
}

// TestInstallNeverTakesTheCurrentDirectorysBinary: install.sh, run from a
// directory holding an executable rdma-cdi (anyone's /tmp) in a checkout
// without a build, refuses instead of installing that file as root's.
func TestInstallNeverTakesTheCurrentDirectorysBinary(t *testing.T) {
	checkout := t.TempDir()
	if err := os.MkdirAll(filepath.Join(checkout, "deploy", "bootstrap"), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("bootstrap/install.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(checkout, "deploy", "bootstrap", "install.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	cwd, root := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "rdma-cdi"), []byte("#!/bin/sh\necho planted\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(checkout, "deploy", "bootstrap", "install.sh"), "--root", root)
	cmd.Dir = cwd
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no rdma-cdi binary") {
		t.Fatalf("install.sh from a directory with ./rdma-cdi: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/local/bin/rdma-cdi")); err == nil {
		t.Fatal("the current directory's rdma-cdi was installed")
	}
}
