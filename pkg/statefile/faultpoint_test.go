package statefile

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

const testEnv = "RDMA_CDI_STATEFILE_TEST_CRASH_AT"

// TestCrashOnce runs itself as a child that dies at the named point the
// first time and goes on the second.
func TestCrashOnce(t *testing.T) {
	if dir := os.Getenv("STATEFILE_TEST_DIR"); dir != "" {
		CrashOnce(testEnv, dir, "other-point") // not named: goes on
		CrashOnce(testEnv, dir, "save-point")
		return
	}
	dir := t.TempDir()
	run := func() error {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashOnce$")
		cmd.Env = append(os.Environ(), "STATEFILE_TEST_DIR="+dir, testEnv+"=save-point")
		return cmd.Run()
	}
	err := run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 137 {
		t.Fatalf("first run: %v, want exit status 137", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".crashed-save-point")); err != nil {
		t.Fatalf("no marker: %v", err)
	}
	if err := run(); err != nil {
		t.Fatalf("second run: %v, want it to go on", err)
	}
}
