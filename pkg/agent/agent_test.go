package agent

import (
	"os"
	"path/filepath"
	"testing"
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
