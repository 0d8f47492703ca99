package ldcache

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

const realCache = "/etc/ld.so.cache"

var sample = []Entry{
	{Name: "libibverbs.so.1", Path: "/lib/x86_64-linux-gnu/libibverbs.so.1", Flags: TypeELFLibc6 | ArchX8664Lib64},
	{Name: "libibverbs.so.1", Path: "/lib/i386-linux-gnu/libibverbs.so.1", Flags: TypeELFLibc6},
	{Name: "libz.so.1", Path: "/usr/lib64/glibc-hwcaps/x86-64-v3/libz.so.1", Flags: TypeELFLibc6 | ArchX8664Lib64, HWCap: 1 << 62},
	{Name: "", Path: "", Flags: 0},
}

func TestEncodeParseRoundTrip(t *testing.T) {
	got, err := Parse(Encode(sample))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sample) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, sample)
	}
	if got, err := Parse(Encode(nil)); err != nil || len(got) != 0 {
		t.Fatalf("empty cache: %v, %v", got, err)
	}
}

// withOldHeader prepends an old-layout section of n entries whose strings
// would be "old", then pads to 8 bytes as ldconfig does before the new one.
func withOldHeader(n int, newSection []byte) []byte {
	out := make([]byte, oldHeaderSize+n*oldEntrySize)
	copy(out, magicOld)
	binary.NativeEndian.PutUint32(out[12:], uint32(n))
	for len(out)%newAlign != 0 {
		out = append(out, 0)
	}
	return append(out, newSection...)
}

func TestParseOldHeaderThenNew(t *testing.T) {
	for _, n := range []int{0, 1, 3} { // 1 and 3 need padding, 0 and 2 do not
		got, err := Parse(withOldHeader(n, Encode(sample)))
		if err != nil {
			t.Fatalf("%d old entries: %v", n, err)
		}
		if !reflect.DeepEqual(got, sample) {
			t.Fatalf("%d old entries: got %+v", n, got)
		}
	}
}

func TestParseOldOnly(t *testing.T) {
	// Two entries; strings follow the entry array and offsets count from there.
	strs := "libfoo.so.1\x00/lib/libfoo.so.1\x00libbar.so.2\x00/usr/lib/libbar.so.2\x00"
	data := make([]byte, oldHeaderSize+2*oldEntrySize)
	copy(data, magicOld)
	ne := binary.NativeEndian
	ne.PutUint32(data[12:], 2)
	put := func(i int, flags, key, value uint32) {
		rec := data[oldHeaderSize+i*oldEntrySize:]
		ne.PutUint32(rec[0:], flags)
		ne.PutUint32(rec[4:], key)
		ne.PutUint32(rec[8:], value)
	}
	put(0, 0x0303, 0, 12)
	put(1, 0x0003, 29, 41)
	data = append(data, strs...)

	got, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Name: "libfoo.so.1", Path: "/lib/libfoo.so.1", Flags: 0x0303},
		{Name: "libbar.so.2", Path: "/usr/lib/libbar.so.2", Flags: 0x0003},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// toBigEndian rewrites a little-endian new-layout cache in big-endian order.
func toBigEndian(le []byte) []byte {
	be := bytes.Clone(le)
	swap32 := func(off int) {
		binary.BigEndian.PutUint32(be[off:], binary.LittleEndian.Uint32(le[off:]))
	}
	swap32(offNewNLibs)
	swap32(offNewLenStrings)
	be[offNewFlags] = endianBig
	n := int(binary.LittleEndian.Uint32(le[offNewNLibs:]))
	for i := range n {
		rec := newHeaderSize + i*newEntrySize
		swap32(rec)
		swap32(rec + 4)
		swap32(rec + 8)
		binary.BigEndian.PutUint64(be[rec+16:], binary.LittleEndian.Uint64(le[rec+16:]))
	}
	return be
}

func TestParseBigEndian(t *testing.T) {
	got, err := Parse(toBigEndian(Encode(sample)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sample) {
		t.Fatalf("got %+v", got)
	}
}

func TestParseErrors(t *testing.T) {
	valid := Encode(sample[:1])
	stringsStart := newHeaderSize + newEntrySize
	patch := func(off int, v uint32) []byte {
		b := bytes.Clone(valid)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}
	setFlags := func(f byte) []byte {
		b := bytes.Clone(valid)
		b[offNewFlags] = f
		return b
	}
	oldHuge := make([]byte, oldHeaderSize)
	copy(oldHuge, magicOld)
	binary.NativeEndian.PutUint32(oldHuge[12:], 0xffffffff)

	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "unknown magic"},
		{"elf file", []byte("\x7fELF\x02\x01\x01"), "unknown magic"},
		{"truncated header", valid[:newHeaderSize-1], "truncated header: need 48 bytes, have 47"},
		{"bad version", append([]byte(magicNew+"9.9"), valid[20:]...), `unsupported version "9.9"`},
		{"invalid byte order", setFlags(endianInvalid), "byte order invalid"},
		{"huge entry count", patch(offNewNLibs, 0xffffffff), "announces 4294967295 entries"},
		{"entries cut", valid[:stringsStart-1], "announces 1 entries (72 bytes) but the file has 71 bytes"},
		{"string table cut", valid[:len(valid)-1], "runs past the end"},
		{"huge string table", patch(offNewLenStrings, 0xffffffff), "runs past the end"},
		{"name before table", patch(newHeaderSize+4, 3), "entry 0 name: malformed ld.so.cache: string offset 3 lies before the string table"},
		{"path past end", patch(newHeaderSize+8, 0x7fffffff), "entry 0 path: malformed ld.so.cache: string offset 2147483647 past the end of the string table"},
		{"unterminated", func() []byte { b := bytes.Clone(valid); b[len(b)-1] = 'x'; return b }(), "has no terminating NUL"},
		{"truncated old header", []byte(magicOld + "\x00\x01"), "truncated old header"},
		{"huge old entry count", oldHuge, "old header announces 4294967295 entries"},
		{"broken new after old", withOldHeader(1, valid[:60]), "new section at offset 32: malformed ld.so.cache: header announces 1 entries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.data)
			if err == nil {
				t.Fatalf("no error, got %+v", got)
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("error %v does not wrap ErrFormat", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestFlagsString(t *testing.T) {
	for flags, want := range map[Flags]string{
		0x0303: "libc6,x86-64",
		0x0003: "libc6",
		0x0a03: "libc6,AArch64",
		0x0803: "libc6,x32",
		0x0001: "ELF",
		0xfe03: "libc6,unknown",
		0x0007: "unknown",
	} {
		if got := flags.String(); got != want {
			t.Errorf("Flags(%#x).String() = %q, want %q", uint32(flags), got, want)
		}
	}
	if f, ok := flagsFor("amd64"); !ok || f != 0x0303 {
		t.Errorf("flagsFor(amd64) = %#x, %v", uint32(f), ok)
	}
	if _, ok := flagsFor("arm"); ok {
		t.Error("flagsFor(arm) should be unknown")
	}
}

func readRealCache(t testing.TB) []byte {
	data, err := os.ReadFile(realCache)
	if err != nil {
		t.Skipf("no real cache to test against: %v", err)
	}
	return data
}

// ldconfigEntry is one line of `ldconfig -p`.
type ldconfigEntry struct{ name, flags, path string }

// ldconfigList runs `ldconfig -p` and returns its announced count and its
// entries without hwcaps (their lines carry extra text we do not model).
func ldconfigList(t *testing.T) (int, []ldconfigEntry) {
	out, err := exec.Command("ldconfig", "-p").Output()
	if err != nil {
		t.Skipf("ldconfig -p unavailable: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Scan()
	count, err := strconv.Atoi(strings.Fields(sc.Text())[0])
	if err != nil {
		t.Fatalf("ldconfig -p header %q: %v", sc.Text(), err)
	}
	var entries []ldconfigEntry
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		lhs, path, ok := strings.Cut(line, ") => ")
		if !ok || strings.Contains(lhs, "hwcap") {
			continue
		}
		name, flags, _ := strings.Cut(lhs, " (")
		entries = append(entries, ldconfigEntry{name, flags, path})
	}
	return count, entries
}

// TestParseMatchesLdconfig compares the parse of this machine's cache with
// glibc's own reading of it.
func TestParseMatchesLdconfig(t *testing.T) {
	data := readRealCache(t)
	entries, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	count, want := ldconfigList(t)
	if len(entries) != count {
		t.Fatalf("parsed %d entries, ldconfig -p announces %d", len(entries), count)
	}
	var got []ldconfigEntry
	for _, e := range entries {
		if e.HWCap == 0 {
			got = append(got, ldconfigEntry{e.Name, e.Flags.String(), e.Path})
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("entries differ from ldconfig -p:\n got %d: %v\nwant %d: %v", len(got), head(got), len(want), head(want))
	}
}

func head(e []ldconfigEntry) []ldconfigEntry { return e[:min(len(e), 5)] }

// TestParseEveryPrefixOfRealCache cuts the real cache at every length: a cut
// inside the header, entries or string table is an error, a cut after the
// string table (in the extensions, which we skip) still parses fully.
func TestParseEveryPrefixOfRealCache(t *testing.T) {
	data := readRealCache(t)
	full, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte(magicNew)) {
		t.Skip("real cache is not in the new layout")
	}
	nlibs := int(binary.LittleEndian.Uint32(data[offNewNLibs:]))
	lenStrings := int(binary.LittleEndian.Uint32(data[offNewLenStrings:]))
	stringsEnd := newHeaderSize + nlibs*newEntrySize + lenStrings
	for n := range len(data) {
		got, err := Parse(data[:n])
		switch {
		case n < stringsEnd && !errors.Is(err, ErrFormat):
			t.Fatalf("prefix of %d bytes (string table ends at %d): err = %v", n, stringsEnd, err)
		case n >= stringsEnd && (err != nil || len(got) != len(full)):
			t.Fatalf("prefix of %d bytes: %d entries, err = %v", n, len(got), err)
		}
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	good := dir + "/good"
	if err := os.WriteFile(good, Encode(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(good); err != nil || len(got) != len(sample) {
		t.Fatalf("ReadFile = %d entries, %v", len(got), err)
	}
	bad := dir + "/bad"
	if err := os.WriteFile(bad, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(bad); err == nil || !strings.HasPrefix(err.Error(), bad+": ") {
		t.Fatalf("ReadFile(bad) error %v should name the file", err)
	}
	if _, err := ReadFile(dir + "/missing"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadFile(missing) = %v, want ErrNotExist", err)
	}
}

func BenchmarkParseLdCache(b *testing.B) {
	data := readRealCache(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseSharedStringsCostOneTable builds a hostile cache whose entries
// all point at one long string: parsing must not copy it per entry.
func TestParseSharedStringsCostOneTable(t *testing.T) {
	const n = 20000
	long := strings.Repeat("x", maxStringLen-1)
	data := Encode([]Entry{{Name: long, Path: long}})
	stringsStart := newHeaderSize + newEntrySize
	entries := make([]byte, n*newEntrySize)
	for i := range n {
		copy(entries[i*newEntrySize:], data[newHeaderSize:stringsStart])
	}
	hostile := append(append(bytes.Clone(data[:newHeaderSize]), entries...), data[stringsStart:]...)
	binary.LittleEndian.PutUint32(hostile[offNewNLibs:], n)
	// Offsets count from the header: move them past the longer entry array.
	shift := uint32((n - 1) * newEntrySize)
	for i := range n {
		rec := hostile[newHeaderSize+i*newEntrySize:]
		binary.LittleEndian.PutUint32(rec[4:], binary.LittleEndian.Uint32(rec[4:])+shift)
		binary.LittleEndian.PutUint32(rec[8:], binary.LittleEndian.Uint32(rec[8:])+shift)
	}

	var got []Entry
	// Averaged over runs: a stray allocation by the runtime or another
	// goroutine during one run must not fail the test (a loaded machine saw 4).
	allocated := testing.AllocsPerRun(20, func() {
		var err error
		if got, err = Parse(hostile); err != nil {
			t.Fatal(err)
		}
	})
	if len(got) != n || got[n-1].Path != long {
		t.Fatalf("got %d entries", len(got))
	}
	if allocated > 3 { // the entry slice and the table
		t.Fatalf("%v allocations for %d entries sharing one string", allocated, n)
	}
}

func TestParseRejectsOverlongString(t *testing.T) {
	long := strings.Repeat("x", maxStringLen)
	_, err := Parse(Encode([]Entry{{Name: "libfoo.so.1", Path: long}}))
	if err == nil || !strings.Contains(err.Error(), "entry 0 path: malformed ld.so.cache: string at offset 84 is longer than 4096 bytes") {
		t.Fatalf("err = %v", err)
	}
}
