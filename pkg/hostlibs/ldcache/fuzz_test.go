package ldcache

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// FuzzParse checks that any input either parses or fails with ErrFormat,
// never panics, never yields more entries than the input can hold, and that
// whatever parses survives an Encode/Parse round trip.
// The corpus in testdata/fuzz/FuzzParse holds this machine's ld.so.cache at
// generation time and truncated copies of it. Those seeds are large, so
// run with a short -fuzzminimizetime (e.g. 2s) or the default 60s spent
// minimizing each new input stalls the run:
//
//	go test -run "^$" -fuzz FuzzParse -fuzzminimizetime 2s ./pkg/hostlibs/ldcache
func FuzzParse(f *testing.F) {
	f.Add(Encode(sample))
	f.Add(withOldHeader(1, Encode(sample)))
	f.Add(toBigEndian(Encode(sample)))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		if len(entries) > len(data)/oldEntrySize {
			t.Fatalf("%d entries from %d bytes", len(entries), len(data))
		}
		for _, e := range entries {
			if bytes.IndexByte([]byte(e.Name+e.Path), 0) >= 0 {
				t.Fatalf("NUL inside entry %+v", e)
			}
		}
		again, err := Parse(Encode(entries))
		if err != nil {
			t.Fatalf("re-encoded entries do not parse: %v", err)
		}
		if len(entries) > 0 && !reflect.DeepEqual(again, entries) {
			t.Fatalf("round trip changed entries")
		}
	})
}
