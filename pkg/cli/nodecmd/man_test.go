package nodecmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `rdma-cdi man DIR` writes a page per visible command (not its own), and
// `completion` writes the shells' scripts.
func TestManPagesAndCompletion(t *testing.T) {
	dir := t.TempDir()
	if _, se, err := runCLI(t, "man", dir); err != nil {
		t.Fatalf("man: %v\n%s", err, se)
	}
	for _, page := range []string{"rdma-cdi.1", "rdma-cdi-doctor.1", "rdma-cdi-generate.1", "rdma-cdi-hook-precreate.1", "rdma-cdi-completion-bash.1"} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Errorf("no page %s: %v", page, err)
			continue
		}
		if !strings.HasPrefix(string(b), ".nh\n") || !strings.Contains(string(b), `.TH "RDMA-CDI" "1"`) {
			t.Errorf("%s is no man page:\n%.300s", page, b)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "rdma-cdi-man.1")); err == nil {
		t.Error("the hidden man command has a page of its own")
	}
	doctor, _ := os.ReadFile(filepath.Join(dir, "rdma-cdi-doctor.1"))
	if !strings.Contains(string(doctor), `\fB--rootfs\fP`) {
		t.Errorf("the doctor page lacks its flags:\n%s", doctor)
	}
	for shell, want := range map[string]string{"bash": "# bash completion V2 for rdma-cdi", "zsh": "#compdef rdma-cdi", "fish": "complete -c rdma-cdi"} {
		if out, se, err := runCLI(t, "completion", shell); err != nil || !strings.Contains(out, want) {
			t.Errorf("completion %s: %v %s; output lacks %q", shell, err, se, want)
		}
	}
}
