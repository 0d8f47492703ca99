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
