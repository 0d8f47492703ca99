package sysfs

import (
	"strings"
	"testing"
)

// Regression (found by FuzzParseGID): a 39-character string with seven
// colons was enough, so "::" compressions and a "%zone" passed as a GID.
func TestParseGIDRefusesZoneAndCompression(t *testing.T) {
	for _, s := range []string{
		"0000:0000:0000:0000:000::000%00000:0000",
		"fe80:0000:0000:0000:0000:0000:0000:0%e1",
		"fe80::0000:0000:0000:0000:0000:00000001",
	} {
		if a, err := ParseGID("/sys/x/gids/0", s); err == nil || !strings.Contains(err.Error(), "/sys/x/gids/0: malformed GID") {
			t.Errorf("%q -> %v, %v; want a malformed-GID error naming the file", s, a, err)
		}
	}
	a, err := ParseGID("/sys/x/gids/0", "FE80:0000:0000:0000:f820:20ff:fe28:c769")
	if err != nil || a.String() != "fe80::f820:20ff:fe28:c769" {
		t.Fatalf("full form: %v, %v", a, err)
	}
}

// ParseRate and LinkWidth are the one reading of a port's rate: the DRA
// driver's rate attribute is its whole Gb/s, rounded down.
func TestParseRate(t *testing.T) {
	for in, want := range map[string]int64{"200 Gb/sec (4X HDR)": 200, "2.5 Gb/sec (1X SDR)": 2, "100 Gb/sec": 100} {
		if got, ok := ParseRate(in); !ok || int64(got) != want {
			t.Errorf("ParseRate(%q) = %v, %v", in, got, ok)
		}
	}
	for _, bad := range []string{"", "fast", "100 Mb/sec", "NaN Gb/sec", "-1 Gb/sec", "Inf Gb/sec"} {
		if got, ok := ParseRate(bad); ok {
			t.Errorf("ParseRate(%q) = %v, want not ok", bad, got)
		}
	}
}

func TestLinkWidth(t *testing.T) {
	for rate, want := range map[string]int{"100 Gb/sec (4X EDR)": 4, "25 Gb/sec (1X EDR)": 1, "400 Gb/sec (4X NDR)": 4, "10 Gb/sec": 0, "": 0, "(X)": 0} {
		if got := LinkWidth(rate); got != want {
			t.Errorf("LinkWidth(%q) = %d, want %d", rate, got, want)
		}
	}
}
