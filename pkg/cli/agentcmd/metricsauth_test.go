package agentcmd

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
)

// An agent told to authenticate /metrics with the API server, outside a
// pod, fails its start and says why, before it binds or watches anything.
func TestMetricsAuthKubernetesNeedsAPod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	var out bytes.Buffer
	app := &cli.App{Log: logrus.New(), Stdout: &out, Stderr: &out, Version: "test"}
	root := cli.NewRoot(app, "rdma-cdi-agent", "", Watch)
	root.SetArgs([]string{"watch", "--config", filepath.Join(t.TempDir(), "absent.toml"),
		"--metrics-address", "127.0.0.1:0", "--metrics-auth", "kubernetes"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "metrics.auth kubernetes: no in-cluster config") {
		t.Fatalf("watch --metrics-auth kubernetes outside a pod: %v, want an error naming the key and the in-cluster config", err)
	}
}
