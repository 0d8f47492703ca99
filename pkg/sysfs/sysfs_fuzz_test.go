package sysfs

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// The parsers read attributes that a kernel (or a fixture, or a broken
// driver) writes. Whatever the bytes, they must not panic, every error must
// name the file, and what they accept must be what they claim to accept.

const fuzzPath = "/sys/class/infiniband/mlx5_1/ports/1/x"

func checkNamesPath(t *testing.T, err error) {
	t.Helper()
	if err != nil && !strings.Contains(err.Error(), fuzzPath) {
		t.Fatalf("error does not name the file: %v", err)
	}
}

func FuzzParseDevNumbers(f *testing.F) {
	for _, s := range []string{"231:192", "0:0", "4294967295:4294967295", "4294967296:1", "231", ":", "231:", ":1",
		"-1:2", "+1:2", " 231:192", "231:192\n", "1:2:3", "0x10:1", "231:192 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		major, minor, err := ParseDevNumbers(fuzzPath, s)
		checkNamesPath(t, err)
		if err != nil {
			if major != 0 || minor != 0 {
				t.Fatalf("%q: error with numbers %d:%d", s, major, minor)
			}
			return
		}
		// Accepted: exactly two unsigned decimal numbers around one colon.
		a, b, _ := strings.Cut(s, ":")
		if strings.Contains(b, ":") || strings.TrimLeft(a, "0123456789") != "" || strings.TrimLeft(b, "0123456789") != "" {
			t.Fatalf("%q accepted as %d:%d", s, major, minor)
		}
		// The canonical form parses back to the same numbers.
		m2, n2, err := ParseDevNumbers(fuzzPath, fmt.Sprintf("%d:%d", major, minor))
		if err != nil || m2 != major || n2 != minor {
			t.Fatalf("%q: round trip %d:%d -> %d:%d, %v", s, major, minor, m2, n2, err)
		}
	})
}

func FuzzParseGID(f *testing.F) {
	for _, s := range []string{
		"fe80:0000:0000:0000:f820:20ff:fe28:c769",
		"0000:0000:0000:0000:0000:ffff:190b:8002",
		"0000:0000:0000:0000:0000:0000:0000:0000",
		"fe80::f820:20ff:fe28:c769",
		"fe80:0000:0000:0000:f820:20ff:fe28:c76",
		"fe80:0000:0000:0000:f820:20ff:fe28:c769%eth0",
		"fe80:0000:0000:0000:f820:20ff:fe28:g769",
		"::ffff:25.11.128.2",
		"0000:0000:0000:0000:0000:ffff:1.2.3.4",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseGID(fuzzPath, s)
		checkNamesPath(t, err)
		if err != nil {
			if a.IsValid() {
				t.Fatalf("%q: error with a valid address %v", s, a)
			}
			return
		}
		if !a.Is6() || a.Zone() != "" {
			t.Fatalf("%q accepted as %v (not a plain 128-bit GID)", s, a)
		}
		// What sysfs prints is the full form: it must be that form.
		if got := fullGID(a.As16()); !strings.EqualFold(got, s) {
			t.Fatalf("%q accepted, but its full form is %q", s, got)
		}
		_ = GIDIsEmpty(a)
	})
}

func fullGID(b [16]byte) string {
	parts := make([]string, 8)
	for i := range parts {
		parts[i] = fmt.Sprintf("%02x%02x", b[2*i], b[2*i+1])
	}
	return strings.Join(parts, ":")
}

func FuzzParseGIDType(f *testing.F) {
	for _, s := range []string{"IB/RoCE v1", "RoCE v1", "RoCE v2", "IB", "", "roce v2", "RoCE v2\n", "RoCE v3"} {
		f.Add(s)
	}
	known := map[string]model.GIDType{
		"IB/RoCE v1": model.GIDTypeRoCEv1, "RoCE v1": model.GIDTypeRoCEv1,
		"RoCE v2": model.GIDTypeRoCEv2, "IB": model.GIDTypeIB, "": model.GIDTypeUnknown,
	}
	f.Fuzz(func(t *testing.T, s string) {
		typ, err := ParseGIDType(fuzzPath, s)
		checkNamesPath(t, err)
		want, ok := known[s]
		if ok != (err == nil) || typ != want {
			t.Fatalf("%q -> %q, %v; want %q (known %v)", s, typ, err, want, ok)
		}
	})
}

func FuzzParseNumbered(f *testing.F) {
	for _, s := range []string{"4: ACTIVE", "5: LinkUp", "1: DOWN", "4:ACTIVE", "4: ", ": ACTIVE", "x: ACTIVE",
		"4: ACTIVE: x", "-1: DOWN", "99999999999999999999: X", " 4: ACTIVE"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		name, err := ParseNumbered(fuzzPath, s)
		checkNamesPath(t, err)
		if err != nil {
			if name != "" {
				t.Fatalf("%q: error with name %q", s, name)
			}
			return
		}
		if name == "" || !strings.HasSuffix(s, ": "+name) {
			t.Fatalf("%q -> %q: not the text after the first \": \"", s, name)
		}
		num := strings.TrimSuffix(s, ": "+name)
		if strings.Contains(num, ": ") {
			t.Fatalf("%q -> %q: cut at a later \": \"", s, name)
		}
	})
}
