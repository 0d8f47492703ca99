package sysfs

import (
	"fmt"
	"strconv"
	"strings"
)

// maxListItems bounds what ParseList expands: the kernel's CPU and node
// masks hold at most a few thousand bits (NR_CPUS 8192 on the largest
// configurations), so a longer range is a broken file.
const maxListItems = 1 << 16

// ParseList reads a bitmap as the kernel prints it in list form
// (cpulist, devices/system/node/online, has_memory): comma-separated
// numbers and inclusive ranges, "0-71,144", ascending. An empty file is
// the empty set.
func ParseList(path, s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err1 := strconv.Atoi(lo)
		last, err2 := first, error(nil)
		if isRange {
			last, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || first < 0 || last < first || len(out) > 0 && first <= out[len(out)-1] {
			return nil, fmt.Errorf("%s: malformed list %q, want ascending N and N-M separated by commas", path, s)
		}
		if len(out)+last-first+1 > maxListItems {
			return nil, fmt.Errorf("%s: list %q holds more than %d numbers", path, s, maxListItems)
		}
		for n := first; n <= last; n++ {
			out = append(out, n)
		}
	}
	return out, nil
}

// ParseDistances reads a NUMA node's distance attribute: one SLIT
// distance per online node, in the order of devices/system/node/online.
func ParseDistances(path, s string) ([]int, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, fmt.Errorf("%s: no distance", path)
	}
	out := make([]int, len(fields))
	for i, f := range fields {
		d, err := strconv.Atoi(f)
		if err != nil || d <= 0 || d > 255 {
			return nil, fmt.Errorf("%s: malformed distance %q, want numbers 1-255 separated by spaces", path, f)
		}
		out[i] = d
	}
	return out, nil
}
