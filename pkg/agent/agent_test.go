package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
)

// TestHostProc: the agent looks for containers' inits in the host's /proc
// only where its host root has one (the agent on the host); a DaemonSet's
// host root without it (no host / mounted) leaves the cgroup check alone.
func TestHostProc(t *testing.T) {
	withProc := t.TempDir()
	if err := os.Mkdir(filepath.Join(withProc, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	procFile := t.TempDir()
	if err := os.WriteFile(filepath.Join(procFile, "proc"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for root, want := range map[string]string{
		"/":         "/proc",
		withProc:    filepath.Join(withProc, "proc"),
		t.TempDir(): "",
		procFile:    "",
	} {
		if got := hostProc(root); got != want {
			t.Errorf("hostProc(%s) = %q, want %q", root, got, want)
		}
	}
}

// TestHooksMissPodNetwork: an agent with pod networking on warns when the
// config file the hooks read does not say so (on by a flag alone), or
// names another state directory: the hooks would not hold a pod back, or
// would refuse every pod.
func TestHooksMissPodNetwork(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	on := config.Default().PodNetwork
	on.Enabled = true
	for _, tc := range []struct {
		name, path, want string
	}{
		{"in the file", write("on.toml", "[pod_network]\nenabled = true\n"), ""},
		{"by a flag alone", write("empty.toml", ""), "enabled = true"},
		{"no file", filepath.Join(dir, "none.toml"), "enabled = true"},
		{"another state dir", write("dir.toml", "[pod_network]\nenabled = true\nstate_dir = \"/run/other\"\n"), "state_dir"},
		{"a broken file", write("broken.toml", "[pod_network\n"), ""},
	} {
		got := hooksMissPodNetwork(on, tc.path)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
