package rlimit

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// canRaiseHardLimits reads CAP_SYS_RESOURCE from this process's effective
// set: without it (root on some hosts, any user namespace) a hard limit
// cannot be raised.
func canRaiseHardLimits(t *testing.T) bool {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

// TestApplicableMemlockUnderALowHardLimit runs this test binary under a
// 4 MiB hard limit and asks it for unlimited.
func TestApplicableMemlockUnderALowHardLimit(t *testing.T) {
	if os.Getenv("RLIMIT_TEST_CHILD") == "1" {
		limit, why := ApplicableMemlock(unix.RLIM_INFINITY)
		var after unix.Rlimit
		_ = unix.Prlimit(0, unix.RLIMIT_MEMLOCK, nil, &after)
		os.Stdout.WriteString(String(limit) + "|" + String(after.Max) + "|" + why + "\n")
		return
	}
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("no prlimit")
	}
	cmd := exec.Command(prlimit, "--memlock=65536:4194304", os.Args[0], "-test.run=^TestApplicableMemlockUnderALowHardLimit$")
	cmd.Env = append(os.Environ(), "RLIMIT_TEST_CHILD=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	parts := strings.SplitN(line, "|", 3)
	if len(parts) != 3 {
		t.Fatalf("child said %q", out)
	}
	limit, after, why := parts[0], parts[1], parts[2]
	if after != "4194304" {
		t.Errorf("the hard limit of the process changed: %s, want it put back to 4194304", after)
	}
	if canRaiseHardLimits(t) {
		if limit != "unlimited" || why != "" {
			t.Errorf("with CAP_SYS_RESOURCE: %s %q, want unlimited", limit, why)
		}
		return
	}
	if limit != "4194304" || !strings.Contains(why, "CAP_SYS_RESOURCE") || !strings.Contains(why, "may not be raised to unlimited") {
		t.Errorf("without CAP_SYS_RESOURCE: %s %q, want the hard limit 4194304 and why", limit, why)
	}
}

func TestApplicableMemlockBelowTheHardLimit(t *testing.T) {
	var cur unix.Rlimit
	if err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, nil, &cur); err != nil {
		t.Fatal(err)
	}
	if limit, why := ApplicableMemlock(cur.Max); limit != cur.Max || why != "" {
		t.Errorf("want == hard: %s %q", String(limit), why)
	}
	if limit, why := ApplicableMemlock(0); limit != 0 || why != "" {
		t.Errorf("want 0: %s %q", String(limit), why)
	}
}
