package hookevents

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// ProcessStart is the start time of pid (field 22 of PROC/PID/stat, clock
// ticks since boot) under the procfs mounted at proc, which tells a process
// from a later one given the same pid.
func ProcessStart(proc string, pid int) (uint64, error) {
	path := proc + "/" + strconv.Itoa(pid) + "/stat"
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	// The command (field 2) is in parentheses and may hold any byte:
	// fields are counted from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: no command field", path)
	}
	f := bytes.Fields(b[i+1:])
	const startField = 22 - 3 // after pid and comm, fields start at 3
	if len(f) <= startField {
		return 0, fmt.Errorf("%s: %d fields", path, len(f)+2)
	}
	v, err := strconv.ParseUint(string(f[startField]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: start time %q", path, f[startField])
	}
	return v, nil
}

// Alive reports whether pid (under the procfs at proc) is still the
// process that started at start.
func Alive(proc string, pid int, start uint64) bool {
	now, err := ProcessStart(proc, pid)
	return err == nil && now == start
}
