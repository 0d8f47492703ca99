// Command probe stands in for ldconfig in the sandbox tests: it writes what
// it sees from inside the sandbox to /probe-report, one fact per line.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The parent-death signal belongs to the thread that exec'd the probe;
// threads the probe's runtime starts have none. Locked in init, main runs
// on that first thread.
func init() { runtime.LockOSThread() }

func main() {
	var r []string
	add := func(format string, a ...any) { r = append(r, fmt.Sprintf(format, a...)) }
	add("args=%s", strings.Join(os.Args, " "))
	add("env=%s", strings.Join(os.Environ(), " "))
	for _, dir := range []string{"/proc", "/sys"} {
		entries, err := os.ReadDir(dir)
		add("entries %s=%d %v", dir, len(entries), err)
	}
	_, err := os.Stat("/proc/1/root")
	add("stat /proc/1/root=%v", err)
	marker, err := os.ReadFile("/marker-in-root")
	add("stat /marker-in-root=%v", err)
	add("read /marker-in-root=%q", marker)
	f, err := os.OpenFile("/dev/null", os.O_WRONLY, 0)
	if err == nil {
		f.Close()
	}
	add("open /dev/null=%v", err)
	err = os.WriteFile("/proc/escape", nil, 0o644)
	add("write /proc/escape=%v", err)
	for _, l := range []struct {
		name string
		res  int
	}{{"nofile", unix.RLIMIT_NOFILE}, {"as", unix.RLIMIT_AS}, {"cpu", unix.RLIMIT_CPU}} {
		var lim unix.Rlimit
		_ = unix.Getrlimit(l.res, &lim)
		add("rlimit %s=%d", l.name, lim.Max)
	}
	nnp, _ := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	add("no_new_privs=%d", nnp)
	var pdeath int32
	_ = unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&pdeath)), 0, 0, 0)
	add("pdeathsig=%d", pdeath)
	// Descriptors inherited across the exec: open and not close-on-exec
	// (Go's runtime opens its own with close-on-exec).
	var fds []string
	for fd := 3; fd < 1024; fd++ {
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			fds = append(fds, fmt.Sprint(fd))
		}
	}
	add("inherited fds=[%s]", strings.Join(fds, " "))
	if err := os.WriteFile("/probe-report", []byte(strings.Join(r, "\n")+"\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
