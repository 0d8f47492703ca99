package node

// The .deb's hardened units under a real systemd 252 (PID 1 of a podman
// container booted from a Debian minbase rootfs): a sandboxing option that
// forbids a write the daemon needs shows here, not on a user's node.

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// systemdNode is a booted systemd container with the .deb and a fixture
// node bound at /fixture.
type systemdNode struct {
	p    *e2e.PodmanEnv
	name string
}

func (n *systemdNode) exec(args ...string) (string, string, error) {
	return n.p.Podman(append([]string{"exec", n.name}, args...)...)
}

func (n *systemdNode) mustExec(t *testing.T, args ...string) string {
	t.Helper()
	so, se, err := n.exec(args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s%s\njournal:\n%s", strings.Join(args, " "), err, so, se, n.journal())
	}
	return so
}

// writeFile writes data to path inside the node, creating its directory.
func (n *systemdNode) writeFile(t *testing.T, path, data string) {
	t.Helper()
	cmd := n.p.Command("exec", "-i", n.name, "sh", "-c", `mkdir -p "$(dirname "$1")" && cat > "$1"`, "sh", path)
	cmd.Stdin = strings.NewReader(data)
	if _, se, err := e2e.Run(cmd); err != nil {
		t.Fatalf("writing %s in the node: %v\n%s", path, err, se)
	}
}

func (n *systemdNode) journal() string {
	so, _, _ := n.exec("journalctl", "--no-pager", "-n", "40", "-u", "rdma-cdi-watch", "-u", "rdma-cdi-generate")
	return so
}

// waitUntil polls cmd inside the node until its output contains want.
func (n *systemdNode) waitUntil(t *testing.T, want string, args ...string) string {
	t.Helper()
	var so string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		so, _, _ = n.exec(args...)
		if strings.Contains(so, want) {
			return so
		}
	}
	t.Fatalf("%s never said %q (last: %q)\njournal:\n%s", strings.Join(args, " "), want, so, n.journal())
	return ""
}

func bootSystemdNode(t *testing.T, fixtureNode *e2e.FixtureNode, deb string) *systemdNode {
	t.Helper()
	p := e2e.Podman(t)
	tarPath := e2e.RequireFile(t, filepath.Join(e2e.ImagesDir(), "systemd.tar"), "make images")
	ref := "localhost/" + e2e.UniqueID("rdma-cdi-systemd-") + ":latest"
	if _, se, err := p.Podman("import", "--quiet", tarPath, ref); err != nil {
		t.Fatalf("import: %v\n%s", err, se)
	}
	t.Cleanup(func() { _, _, _ = p.Podman("rmi", "--force", ref) })
	n := &systemdNode{p: p, name: e2e.UniqueID("sysd-")}
	// Privileged: systemd sets up each unit's sandbox (mount namespaces,
	// ProtectSystem, ...) as it does on a host, which needs CAP_SYS_ADMIN.
	_, se, err := p.Podman("run", "-d", "--name", n.name, "--privileged", "--systemd=always", "--network", "none",
		"-v", deb+":/tmp/rdma-cdi.deb:ro",
		"-v", fixtureNode.Sys+":/fixture/sys:ro", "-v", fixtureNode.Dev+":/fixture/dev:ro",
		ref, "/sbin/init")
	if err != nil {
		t.Fatalf("podman run systemd: %v\n%s", err, se)
	}
	t.Cleanup(func() { _, _, _ = p.Podman("rm", "--force", "--time", "0", n.name) })
	n.waitUntil(t, "running", "systemctl", "is-system-running", "--wait")
	return n
}

// fixtureDropIn points a unit at the bound fixture: the roots are flags,
// so a drop-in replaces ExecStart as an operator's would.
func fixtureDropIn(binary, command string) string {
	return fmt.Sprintf("[Service]\nExecStart=\nExecStart=/usr/bin/%s --config /etc/rdma-cdi/config.toml --sysfs-root /fixture/sys --dev-root /fixture/dev %s\n", binary, command)
}

func TestDebUnitsUnderSystemd(t *testing.T) {
	e2e.RequireRoot(t)
	fixtureNode := e2e.NewFixtureNode(t, "seed002")
	n := bootSystemdNode(t, fixtureNode, buildDeb(t))

	// Installed as docs/engines.md says; postinst enables and starts the watch unit.
	n.mustExec(t, "apt-get", "install", "-y", "-q", "--no-install-recommends", "/tmp/rdma-cdi.deb")
	if so, _, _ := n.exec("systemctl", "is-enabled", "rdma-cdi-watch"); strings.TrimSpace(so) != "enabled" {
		t.Errorf("rdma-cdi-watch is %q after install, want enabled", so)
	}
	for unit, run := range map[string][2]string{"rdma-cdi-watch": {"rdma-cdi-agent", "watch"}, "rdma-cdi-generate": {"rdma-cdi", "generate"}} {
		n.writeFile(t, "/etc/systemd/system/"+unit+".service.d/fixture.conf", fixtureDropIn(run[0], run[1]))
	}
	n.mustExec(t, "systemctl", "daemon-reload")
	n.mustExec(t, "systemctl", "restart", "rdma-cdi-watch")

	spec := "/run/cdi/rdma.example.com-hca.yaml"
	n.waitUntil(t, "name: mlx5_8", "cat", spec)
	if so, _, _ := n.exec("systemctl", "is-active", "rdma-cdi-watch"); strings.TrimSpace(so) != "active" {
		t.Fatalf("rdma-cdi-watch is %q after writing the spec\njournal:\n%s", so, n.journal())
	}

	// The oneshot unit, sandboxed the same way, succeeds.
	n.mustExec(t, "rm", spec)
	n.mustExec(t, "systemctl", "start", "rdma-cdi-generate")
	if so, _, _ := n.exec("systemctl", "show", "-p", "Result", "--value", "rdma-cdi-generate"); strings.TrimSpace(so) != "success" {
		t.Errorf("rdma-cdi-generate result %q\njournal:\n%s", so, n.journal())
	}
	n.mustExec(t, "test", "-s", spec)

	// systemctl reload sends SIGHUP: a new vendor in the config moves the spec.
	conf := n.mustExec(t, "cat", "/etc/rdma-cdi/config.toml")
	edited := strings.Replace(conf, "[cdi]\n", "[cdi]\nvendor = \"reload.example.com\"\n", 1)
	if edited == conf {
		t.Fatalf("the shipped config has no [cdi] table:\n%s", conf)
	}
	n.writeFile(t, "/etc/rdma-cdi/config.toml", edited)
	n.mustExec(t, "systemctl", "reload", "rdma-cdi-watch")
	n.waitUntil(t, "kind: reload.example.com/hca", "cat", "/run/cdi/reload.example.com-hca.yaml")
	n.waitUntil(t, "gone", "sh", "-c", "test -e "+spec+" || echo gone")
	if so, _, _ := n.exec("systemctl", "is-active", "rdma-cdi-watch"); strings.TrimSpace(so) != "active" {
		t.Errorf("rdma-cdi-watch is %q after reload", so)
	}

	// Uninstalling (prerm stops the unit) leaves nothing running.
	n.mustExec(t, "apt-get", "remove", "-y", "-q", "rdma-cdi")
	if so, _, _ := n.exec("sh", "-c", "cat /proc/[0-9]*/comm 2>/dev/null | grep -c rdma-cdi || true"); strings.TrimSpace(so) != "0" {
		t.Errorf("rdma-cdi processes left after remove: %s", so)
	}
	if so, _, _ := n.exec("systemctl", "list-unit-files", "rdma-cdi*", "--no-legend"); strings.TrimSpace(so) != "" {
		t.Errorf("unit files left after remove:\n%s", so)
	}
}
