package nodecmd

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// testRoot is rdma-cdi's command tree, as cmd/rdma-cdi wires it.
func testRoot(app *cli.App) *cobra.Command {
	return cli.NewRoot(app, "rdma-cdi", "", append([]cli.Command{List, NCCLEnv, Generate, CDI, Doctor, cli.Hooks(Precreate), Runtime, Man}, AgentCommands()...)...)
}

// runCLI runs the command tree in-process with captured output.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &cli.App{Log: logrus.New(), Stdout: &out, Stderr: &errOut, Version: "test", Commit: "abc"}
	root := testRoot(app)
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	err = root.Execute()
	return out.String(), errOut.String(), err
}

// fixtureRoots builds a bundled topology's sysfs and dev trees (no netns:
// netdev state is covered by pkg/discover's tests).
func fixtureRoots(t *testing.T, name string) []string {
	t.Helper()
	tr := fixture.BuildBundledTrees(t, name, false)
	// An empty config file keeps the host's /etc/rdma-cdi out of the test.
	cfg := filepath.Join(tr.Dir, "config.toml")
	if err := os.WriteFile(cfg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"--sysfs-root", tr.Sys, "--dev-root", tr.Dev, "--config", cfg}
}

func TestListTable(t *testing.T) {
	out, _, err := runCLI(t, append(fixtureRoots(t, "seed002"), "--log-level=error", "list")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"mlx5_1 port 1 ==> eth1",
		"DEV    PORT INDEX GID                                     IPv4          VER DEV",
		"mlx5_1 1    3     0000:0000:0000:0000:0000:ffff:190b:8002 25.11.128.2   v2  eth1",
		"rdma_cm: /dev/infiniband/rdma_cm (10:58)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("list output lacks %q:\n%s", want, out)
		}
	}
}

func TestListShowsSRIOVRoles(t *testing.T) {
	roots := append(fixtureRoots(t, "sriov"), "--log-level=error", "list")
	out, _, err := runCLI(t, roots...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"mlx5_0 port 1 ==> ens1f0np0 (Down) ACTIVE Ethernet 200 Gb/sec (4X HDR) [PF, 16 VFs]\n",
		"mlx5_1 port 1 ==> ens1f1np1 (Down) ACTIVE Ethernet 200 Gb/sec (4X HDR)\n",
		"mlx5_17 port 1 ==> ens1f0v15 (Down) ACTIVE Ethernet 200 Gb/sec (4X HDR) [VF of mlx5_0]\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("list output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runCLI(t, append(roots, "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	var node struct {
		Devices []struct {
			Name, PhysFn string
			NumVFs       int
		}
	}
	if err := json.Unmarshal([]byte(out), &node); err != nil {
		t.Fatal(err)
	}
	pfOf, numVFs := map[string]string{}, map[string]int{}
	for _, d := range node.Devices {
		pfOf[d.Name], numVFs[d.Name] = d.PhysFn, d.NumVFs
	}
	if pfOf["mlx5_2"] != "0000:3b:00.0" || pfOf["mlx5_0"] != "" || numVFs["mlx5_0"] != 16 || numVFs["mlx5_1"] != 0 || numVFs["mlx5_2"] != 0 {
		t.Errorf("--json: physFn %v, numVFs %v", pfOf, numVFs)
	}
}

func TestListJSON(t *testing.T) {
	out, _, err := runCLI(t, append(fixtureRoots(t, "seed002"), "--log-level=error", "list", "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	var node struct {
		Devices []struct {
			Name  string
			Verbs struct {
				Path         string
				Major, Minor int
			}
			Ports []struct {
				Umad struct{ Path string }
				GIDs []struct {
					Index  int
					GID    string
					Type   string
					NetDev string
					IPv4   string
				}
			}
		}
		RDMACM *struct{ Path string }
	}
	if err := json.Unmarshal([]byte(out), &node); err != nil {
		t.Fatalf("list --json is not JSON: %v\n%s", err, out)
	}
	d := node.Devices[1]
	g := d.Ports[0].GIDs[3]
	if d.Name != "mlx5_1" || d.Verbs.Path != "/dev/infiniband/uverbs1" || d.Verbs.Minor != 193 || d.Ports[0].Umad.Path != "/dev/infiniband/umad1" {
		t.Errorf("device = %+v", d)
	}
	if g.Index != 3 || g.GID != "::ffff:25.11.128.2" || g.Type != "RoCE v2" || g.NetDev != "eth1" || g.IPv4 != "25.11.128.2" {
		t.Errorf("gid = %+v", g)
	}
	if node.RDMACM == nil {
		t.Error("rdmaCM missing")
	}
}

func TestNoRDMANode(t *testing.T) {
	roots := fixtureRoots(t, "no-rdma")
	out, _, err := runCLI(t, append(roots, "list")...)
	if err != nil || !strings.Contains(out, "no RDMA devices found") {
		t.Fatalf("list: %v %q", err, out)
	}
	out, _, err = runCLI(t, append(roots, "list", "--json")...)
	if err != nil || !strings.Contains(out, `"devices": []`) {
		t.Fatalf("list --json must give an empty list: %v %s", err, out)
	}
	out, stderr, err := runCLI(t, append(roots, "generate", "--output", "-")...)
	if err != nil || out != "" || !strings.Contains(stderr, "no spec written") {
		t.Fatalf("generate: %v out=%q err=%q", err, out, stderr)
	}
}

func TestNCCLEnvFormatsAndErrors(t *testing.T) {
	roots := fixtureRoots(t, "seed002")
	out, _, err := runCLI(t, append(roots, "--log-level=error", "nccl-env", "--format", "json", "--devices", "mlx5_2")...)
	if err != nil {
		t.Fatal(err)
	}
	var vars map[string]string
	if err := json.Unmarshal([]byte(out), &vars); err != nil || vars["NCCL_IB_HCA"] != "mlx5_2:1" || vars["NCCL_IB_GID_INDEX"] != "3" {
		t.Fatalf("json: %v %s", err, out)
	}
	out, _, _ = runCLI(t, append(roots, "--log-level=error", "--nccl-tunable", "NCCL_IB_TIMEOUT=22", "nccl-env", "--format", "conf")...)
	if !strings.Contains(out, "NCCL_IB_GID_INDEX=3\n") || !strings.HasSuffix(out, "NCCL_IB_TIMEOUT=22\n") {
		t.Fatalf("conf: %s", out)
	}
	_, _, err = runCLI(t, append(roots, "nccl-env", "--devices", "mlx5_42")...)
	if err == nil || !strings.Contains(err.Error(), "mlx5_42") || !strings.Contains(err.Error(), "mlx5_8") {
		t.Fatalf("unknown device: %v", err)
	}
	_, _, err = runCLI(t, append(roots, "nccl-env", "--format", "yaml")...)
	if err == nil || !strings.Contains(err.Error(), "yaml") {
		t.Fatalf("bad format: %v", err)
	}
	_, _, err = runCLI(t, "--sysfs-root", "/nonexistent-root", "list")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent-root") {
		t.Fatalf("missing sysfs root: %v", err)
	}
}

func TestVersion(t *testing.T) {
	out, _, err := runCLI(t, "--version")
	if err != nil || !strings.Contains(out, "test (commit abc)") {
		t.Fatalf("%v %q", err, out)
	}
}

func TestHookArgsCarryOnlyWhatHooksRead(t *testing.T) {
	roots := fixtureRoots(t, "seed002")
	args := append(roots, "--log-level=error", "--debounce=3s", "--vendor=example.org", "--nccl-tunable", "NCCL_IB_TC=160",
		"--memlock=1G", "generate", "--output", "-", "--format", "json")
	out, _, err := runCLI(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"--sysfs-root=`, `"--dev-root=`, `"--config=`, `"--nccl-tunable=NCCL_IB_TC=160"`, `"--memlock=1G"`} {
		if !strings.Contains(out, want) {
			t.Errorf("hook args lack %s", want)
		}
	}
	for _, unwanted := range []string{"--debounce", "--vendor", "--log-level"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("hook args must not carry %s", unwanted)
		}
	}
}

// rdma-cdi's watch, device-plugin and top hand over to rdma-cdi-agent; with
// none beside the binary or in PATH, the error names what to install, and
// the config (the agent's to read) is not read first.
func TestAgentCommandsNameAMissingAgent(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, cmd := range []string{"watch", "device-plugin", "top"} {
		_, _, err := runCLI(t, "--config", "/nonexistent/config.toml", cmd, "--ready-file", "/tmp/x")
		if err == nil || !strings.Contains(err.Error(), "rdma-cdi-agent is not installed beside this binary or in PATH") {
			t.Errorf("%s: err = %v, want the missing agent named", cmd, err)
		}
	}
}
