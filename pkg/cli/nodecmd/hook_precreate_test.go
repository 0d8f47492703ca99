package nodecmd

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// precreateApp is an App as setup leaves it, with a CDI spec dir holding
// fixture.TwoHCASpec and an empty sysfs (no NCCL ports; tunables still apply).
func precreateApp(t *testing.T) (*cli.App, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	dir := t.TempDir()
	specDir := filepath.Join(dir, "cdi")
	if err := os.MkdirAll(specDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(specDir, "rdma.yaml"), []byte(fixture.TwoHCASpec), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.CDI.SpecDir = specDir
	cfg.Hooks.Memlock = 8 << 20
	cfg.Hooks.LogFile = filepath.Join(dir, "hooks.log")
	cfg.NCCL.Tunables = map[string]string{"NCCL_IB_TIMEOUT": "22", "NCCL_IB_TC": "160"}
	var out, errOut bytes.Buffer
	app := &cli.App{Config: cfg, Log: logrus.New(), Stdout: &out, Stderr: &errOut, Roots: model.Roots{Sysfs: t.TempDir(), Dev: t.TempDir(), Host: "/"}}
	app.Log.SetOutput(&errOut)
	return app, &out, &errOut
}

func runPrecreate(t *testing.T, app *cli.App, in string) error {
	t.Helper()
	cmd := Precreate(app)
	cmd.SetIn(strings.NewReader(in))
	cmd.SetArgs([]string{})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true // as under the root command
	return cmd.Execute()
}

func TestPrecreateEditsRequest(t *testing.T) {
	app, out, _ := precreateApp(t)
	in := `{"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":["sh"],"cwd":"/",` +
		`"env":["PATH=/bin","RDMA_VISIBLE_DEVICES=mlx5_1","NCCL_IB_TC=106"]},"root":{"path":"/r"},"linux":{}}`
	if err := runPrecreate(t, app, in); err != nil {
		t.Fatal(err)
	}
	var got specs.Spec
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("stdout is not a config: %v\n%s", err, out)
	}
	var paths []string
	for _, d := range got.Linux.Devices {
		paths = append(paths, d.Path)
	}
	slices.Sort(paths)
	if !slices.Equal(paths, []string{"/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs1"}) {
		t.Fatalf("devices = %v", paths)
	}
	if !slices.Contains(got.Process.Capabilities.Effective, "CAP_IPC_LOCK") {
		t.Fatalf("caps = %+v", got.Process.Capabilities)
	}
	if len(got.Process.Rlimits) != 1 || got.Process.Rlimits[0].Hard != 8<<20 {
		t.Fatalf("rlimits = %+v", got.Process.Rlimits)
	}
	env := strings.Join(got.Process.Env, " ")
	if !strings.Contains(env, "NCCL_IB_TIMEOUT=22") || !strings.Contains(env, "NCCL_IB_TC=106") || strings.Contains(env, "NCCL_IB_TC=160") {
		t.Fatalf("env = %v", got.Process.Env)
	}
	if log, _ := os.ReadFile(app.Config.Hooks.LogFile); !strings.Contains(string(log), "gave RDMA devices mlx5_1") {
		t.Fatalf("hook log = %q", log)
	}
}

func TestPrecreateNoRequestIsByteForByte(t *testing.T) {
	app, out, _ := precreateApp(t)
	// Odd spacing, key order and an unknown key: any re-encoding would show.
	in := "{ \"root\" : {\"path\":\"/r\"},\n  \"ociVersion\":\"1.0.2\", \"x-future\": [1,2],\n" +
		"\"process\":{\"args\":[\"sh\"],\"cwd\":\"/\",\"env\":[\"NCCL_IB_HCA=mlx5_3:1\"]},\"annotations\":{\"cdi.k8s.io/gpu\":\"vendor.example.com/gpu=0\"}}\n"
	if err := runPrecreate(t, app, in); err != nil {
		t.Fatal(err)
	}
	if out.String() != in {
		t.Fatalf("output differs from input:\n%q\n%q", in, out.String())
	}
}

func TestPrecreateErrors(t *testing.T) {
	cases := map[string]string{
		"{not json": "config.json on stdin is not a valid OCI config",
		`{"process":{"env":["RDMA_VISIBLE_DEVICES=mlx5_9"],"cwd":"/"}}`:                             `unknown RDMA device "mlx5_9" requested by env RDMA_VISIBLE_DEVICES (known: mlx5_0, mlx5_1)`,
		`{"annotations":{"rdma.example.com/devices":"mlx5_0"},"process":{"cwd":"/","args":["sh"]}}`: "",
	}
	for in, want := range cases {
		app, out, _ := precreateApp(t)
		err := runPrecreate(t, app, in)
		if want == "" {
			if err != nil || !strings.Contains(out.String(), "CAP_IPC_LOCK") {
				t.Errorf("%s: %v, %s", in, err, out)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", in, err, want)
		}
		if out.Len() != 0 {
			t.Errorf("%s: wrote %q on failure", in, out)
		}
		if log, _ := os.ReadFile(app.Config.Hooks.LogFile); !strings.Contains(string(log), strings.ReplaceAll(want, `"`, `\"`)) {
			t.Errorf("%s: hook log %q lacks the error", in, log)
		}
	}
}

// A hooks.memlock the config cannot hold, refused when the file is read
// (as the hook's root command reads it), refuses a request, never a
// bystander.
func TestPrecreateBadMemlockOnlyRefusesRequests(t *testing.T) {
	app, out, _ := precreateApp(t)
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte("[hooks]\nmemlock = \"lots\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, app.ConfigErr = config.LoadForContainers(path)
	bystander := `{"ociVersion":"1.0.2","process":{"args":["sh"],"cwd":"/","env":["PATH=/bin"]},"root":{"path":"/r"}}`
	if err := runPrecreate(t, app, bystander); err != nil || out.String() != bystander {
		t.Fatalf("bystander: %v, output %q; want its input back", err, out)
	}
	request := strings.Replace(bystander, `"PATH=/bin"`, `"PATH=/bin","RDMA_VISIBLE_DEVICES=mlx5_1"`, 1)
	if err := runPrecreate(t, app, request); err == nil || !strings.Contains(err.Error(), "hooks.memlock") {
		t.Fatalf("request: %v, want the hooks.memlock error", err)
	}
}
