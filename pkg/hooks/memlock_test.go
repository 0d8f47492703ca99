package hooks

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
)

// procMemlock reads "Max locked memory" of pid from /proc/PID/limits.
func procMemlock(t testing.TB, pid int) (soft, hard uint64) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	must(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "Max locked memory") {
			continue
		}
		f := strings.Fields(strings.TrimPrefix(line, "Max locked memory"))
		parse := func(s string) uint64 {
			if s == "unlimited" {
				return config.Unlimited
			}
			v, err := strconv.ParseUint(s, 10, 64)
			must(t, err)
			return v
		}
		return parse(f[0]), parse(f[1])
	}
	t.Fatal("no Max locked memory line")
	return 0, 0
}

// memlockContainer starts the container's process with RLIMIT_MEMLOCK
// soft 64 KiB and the caller's hard limit.
func memlockContainer(t *testing.T, b *testBundle) (*Container, uint64) {
	t.Helper()
	needRoot(t)
	var self unix.Rlimit
	must(t, unix.Getrlimit(unix.RLIMIT_MEMLOCK, &self))
	if self.Max < 1<<20 {
		t.Skipf("memlock hard limit %d below 1 MiB", self.Max)
	}
	c := b.load(t)
	must(t, unix.Prlimit(c.Pid, unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: 64 << 10, Max: self.Max}, nil))
	return c, self.Max
}

func TestMemlockRaisesTheSoftLimit(t *testing.T) {
	b := newBundle(t)
	c, hard := memlockContainer(t, b)
	log, buf := testLog()
	must(t, Memlock(c, config.Unlimited, log))
	soft, newHard := procMemlock(t, c.Pid)
	// With CAP_SYS_RESOURCE both become unlimited; without it (these
	// machines) the soft limit rises to the hard limit, which stays.
	if newHard == config.Unlimited {
		if soft != config.Unlimited {
			t.Fatalf("soft %d with an unlimited hard limit", soft)
		}
	} else if soft != hard || newHard != hard {
		t.Fatalf("soft %d hard %d, want both %d; log: %s", soft, newHard, hard, buf)
	} else if !strings.Contains(buf.String(), "CAP_SYS_RESOURCE") {
		t.Errorf("the log does not say why the hard limit stayed: %s", buf)
	}

	// A value within the hard limit is set exactly; a lower one never lowers.
	must(t, unix.Prlimit(c.Pid, unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: 64 << 10, Max: hard}, nil))
	must(t, Memlock(c, 1<<20, log))
	if soft, h := procMemlock(t, c.Pid); soft != 1<<20 || h != hard {
		t.Fatalf("want 1 MiB soft, got %d/%d", soft, h)
	}
	must(t, Memlock(c, 4096, log))
	if soft, _ := procMemlock(t, c.Pid); soft != 1<<20 {
		t.Fatalf("lowered to %d", soft)
	}
}

func TestMemlockLeavesConfigRlimitsAlone(t *testing.T) {
	b := newBundle(t)
	b.Spec.Process.Rlimits = []specs.POSIXRlimit{{Type: "RLIMIT_MEMLOCK", Soft: 1 << 16, Hard: 1 << 16}}
	b.save(t)
	c, _ := memlockContainer(t, b)
	log, buf := testLog()
	must(t, Memlock(c, config.Unlimited, log))
	if soft, _ := procMemlock(t, c.Pid); soft != 64<<10 {
		t.Fatalf("soft %d changed although config.json lists RLIMIT_MEMLOCK", soft)
	}
	if !strings.Contains(buf.String(), "process.rlimits") {
		t.Errorf("log: %s", buf)
	}
}
