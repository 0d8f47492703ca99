package sysfs

import (
	"slices"
	"strings"
	"testing"
)

// The kernel's list form, as devices/system/node and cpulist files print it.
func TestParseList(t *testing.T) {
	for in, want := range map[string][]int{
		"":              nil,
		"\n":            nil,
		"0":             {0},
		"0-1\n":         {0, 1},
		"0-2,10,18,26":  {0, 1, 2, 10, 18, 26},
		"0-3,8-9,12":    {0, 1, 2, 3, 8, 9, 12},
		"142-143":       {142, 143},
		"0,2,4,6,8,100": {0, 2, 4, 6, 8, 100},
	} {
		got, err := ParseList("/sys/devices/system/node/online", in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"a", "1-", "-1", "3-1", "1,1", "4,2", "0-2,1", "1 2", "0-99999999"} {
		if got, err := ParseList("/sys/devices/system/node/has_cpu", bad); err == nil || !strings.Contains(err.Error(), "/sys/devices/system/node/has_cpu: ") {
			t.Errorf("ParseList(%q) = %v, %v; want an error naming the file", bad, got, err)
		}
	}
}

func TestParseDistances(t *testing.T) {
	got, err := ParseDistances("node0/distance", "10 40 80 80 120 120\n")
	if err != nil || !slices.Equal(got, []int{10, 40, 80, 80, 120, 120}) {
		t.Errorf("a SLIT row: %v, %v", got, err)
	}
	for _, bad := range []string{"", "10 x", "10 0", "10 256", "10 -20"} {
		if got, err := ParseDistances("node0/distance", bad); err == nil || !strings.Contains(err.Error(), "node0/distance: ") {
			t.Errorf("ParseDistances(%q) = %v, %v; want an error naming the file", bad, got, err)
		}
	}
}
