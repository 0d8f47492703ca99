// Package ldcache parses glibc's /etc/ld.so.cache.
//
// Two layouts exist. The new one ("glibc-ld.so.cache1.1", the only one
// ldconfig writes since glibc 2.32) is a 48-byte header, nlibs entries of 24
// bytes and a string table. Older ldconfigs wrote the old layout
// ("ld.so-1.7.0": 16-byte header, 12-byte entries) and hid the new one right
// after it. Parse accepts the new layout, the old one followed by the new
// one, and the old one alone.
//
// The parser runs at every container start, so it is one pass over a byte
// slice; every count and offset read from the file is checked against the
// slice before use, so a truncated or hostile file yields an error wrapping
// ErrFormat, never a panic or an allocation larger than the file.
package ldcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrFormat is wrapped by every error that reports a malformed cache.
var ErrFormat = errors.New("malformed ld.so.cache")

// MaxFileSize bounds what ReadFile accepts; real caches are tens of KiB.
// Parse's time is linear in the file size times maxStringLen at worst.
const MaxFileSize = 16 << 20

const (
	magicOld = "ld.so-1.7.0"
	magicNew = "glibc-ld.so.cache"
	// versionNew follows magicNew in the header.
	versionNew = "1.1"

	oldHeaderSize = 16 // magic[11], 1 byte of padding, uint32 nlibs
	oldEntrySize  = 12 // int32 flags, uint32 key, uint32 value
	newHeaderSize = 48 // see newHeader offsets below
	newEntrySize  = 24 // flags, key, value, osversion (uint32 each), uint64 hwcap

	// Offsets inside the new header.
	offNewNLibs      = 20
	offNewLenStrings = 24
	offNewFlags      = 28

	// The new header is aligned to 8 bytes after the old entries.
	newAlign = 8
)

// Byte-order values of the new header's flags byte (glibc's
// cache_file_new_flags_endian_*).
const (
	endianUnset   = 0
	endianInvalid = 1
	endianLittle  = 2
	endianBig     = 3
)

// Entry is one library of the cache.
type Entry struct {
	// Name is the soname ("libibverbs.so.1").
	Name string
	// Path is where the library lies, as seen by the host's dynamic linker.
	Path string
	// Flags hold the library type and architecture (see Flags).
	Flags Flags
	// HWCap is non-zero for libraries of a hardware-capability subdirectory
	// (glibc-hwcaps); the dynamic linker picks those only on capable CPUs.
	HWCap uint64
}

// Parse decodes a whole ld.so.cache file.
func Parse(data []byte) ([]Entry, error) {
	switch {
	case bytes.HasPrefix(data, []byte(magicNew)):
		return parseNew(data)
	case bytes.HasPrefix(data, []byte(magicOld)):
		return parseOldThenNew(data)
	default:
		return nil, fmt.Errorf("%w: unknown magic (want %q or %q)", ErrFormat, magicNew+versionNew, magicOld)
	}
}

// ReadFile reads and parses the cache at path.
func ReadFile(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: %w: larger than %d bytes", path, ErrFormat, MaxFileSize)
	}
	entries, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return entries, nil
}

// parseOldThenNew handles a file starting with the old header: the new
// section follows the old entries when present; otherwise the old entries
// are all there is.
func parseOldThenNew(data []byte) ([]Entry, error) {
	if len(data) < oldHeaderSize {
		return nil, truncated("old header", oldHeaderSize, len(data))
	}
	// The old layout has no byte-order marker: it is the writer's native one.
	nlibs := uint64(binary.NativeEndian.Uint32(data[12:]))
	entriesEnd := oldHeaderSize + nlibs*oldEntrySize
	if entriesEnd > uint64(len(data)) {
		return nil, fmt.Errorf("%w: old header announces %d entries (%d bytes) but the file has %d bytes",
			ErrFormat, nlibs, entriesEnd, len(data))
	}
	newStart := alignUp(entriesEnd, newAlign)
	if newStart+newHeaderSize <= uint64(len(data)) && bytes.HasPrefix(data[newStart:], []byte(magicNew)) {
		entries, err := parseNew(data[newStart:])
		if err != nil {
			return nil, fmt.Errorf("new section at offset %d: %w", newStart, err)
		}
		return entries, nil
	}
	return parseOld(data, int(nlibs))
}

// parseOld decodes the old layout alone: string offsets count from the end
// of the entry array, and strings run to the end of the file.
func parseOld(data []byte, nlibs int) ([]Entry, error) {
	table := newStringTable(data[oldHeaderSize+nlibs*oldEntrySize:], 0)
	entries := make([]Entry, 0, nlibs)
	for i := range nlibs {
		e := data[oldHeaderSize+i*oldEntrySize:]
		flags := binary.NativeEndian.Uint32(e[0:])
		name, err := table.at(binary.NativeEndian.Uint32(e[4:]))
		if err != nil {
			return nil, fmt.Errorf("old entry %d name: %w", i, err)
		}
		path, err := table.at(binary.NativeEndian.Uint32(e[8:]))
		if err != nil {
			return nil, fmt.Errorf("old entry %d path: %w", i, err)
		}
		entries = append(entries, Entry{Name: name, Path: path, Flags: Flags(flags)})
	}
	return entries, nil
}

// parseNew decodes the new layout; data starts at its header. String
// offsets count from the header and must fall in the string table.
func parseNew(data []byte) ([]Entry, error) {
	if len(data) < newHeaderSize {
		return nil, truncated("header", newHeaderSize, len(data))
	}
	if got := string(data[len(magicNew) : len(magicNew)+len(versionNew)]); got != versionNew {
		return nil, fmt.Errorf("%w: unsupported version %q (want %q)", ErrFormat, got, versionNew)
	}
	order, err := byteOrder(data[offNewFlags])
	if err != nil {
		return nil, err
	}
	nlibs := uint64(order.Uint32(data[offNewNLibs:]))
	lenStrings := uint64(order.Uint32(data[offNewLenStrings:]))

	stringsStart := newHeaderSize + nlibs*newEntrySize
	if stringsStart > uint64(len(data)) {
		return nil, fmt.Errorf("%w: header announces %d entries (%d bytes) but the file has %d bytes",
			ErrFormat, nlibs, stringsStart, len(data))
	}
	stringsEnd := stringsStart + lenStrings
	if stringsEnd > uint64(len(data)) {
		return nil, fmt.Errorf("%w: string table of %d bytes at offset %d runs past the end (%d bytes)",
			ErrFormat, lenStrings, stringsStart, len(data))
	}
	table := newStringTable(data[stringsStart:stringsEnd], stringsStart)

	entries := make([]Entry, 0, nlibs)
	for i := range int(nlibs) {
		e := data[newHeaderSize+i*newEntrySize:]
		name, err := table.at(order.Uint32(e[4:]))
		if err != nil {
			return nil, fmt.Errorf("entry %d name: %w", i, err)
		}
		path, err := table.at(order.Uint32(e[8:]))
		if err != nil {
			return nil, fmt.Errorf("entry %d path: %w", i, err)
		}
		entries = append(entries, Entry{
			Name:  name,
			Path:  path,
			Flags: Flags(order.Uint32(e[0:])),
			HWCap: order.Uint64(e[16:]),
		})
	}
	return entries, nil
}

// byteOrder reads the new header's byte-order marker. "Unset" comes from
// ldconfigs that predate the marker and wrote their native order.
func byteOrder(flag byte) (binary.ByteOrder, error) {
	switch flag & 3 {
	case endianLittle:
		return binary.LittleEndian, nil
	case endianBig:
		return binary.BigEndian, nil
	case endianUnset:
		return binary.NativeEndian, nil
	default: // endianInvalid
		return nil, fmt.Errorf("%w: header marks the byte order invalid (flags 0x%02x)", ErrFormat, flag)
	}
}

// maxStringLen bounds one name or path, as PATH_MAX does for ldconfig.
const maxStringLen = 4096

// stringTable resolves string offsets (counted from base) into one string
// holding the whole table: each entry's name and path are substrings of it,
// so however many entries share or overlap strings, the strings cost one
// allocation the size of the table.
type stringTable struct {
	base uint64
	text string
}

// newStringTable makes a table of text, whose first byte is at offset base.
func newStringTable(text []byte, base uint64) stringTable {
	return stringTable{base: base, text: string(text)}
}

func (t stringTable) at(off uint32) (string, error) {
	if uint64(off) < t.base {
		return "", fmt.Errorf("%w: string offset %d lies before the string table (offset %d)", ErrFormat, off, t.base)
	}
	rel := uint64(off) - t.base
	if rel >= uint64(len(t.text)) {
		return "", fmt.Errorf("%w: string offset %d past the end of the string table (offset %d, %d bytes)",
			ErrFormat, off, t.base, len(t.text))
	}
	rest := t.text[rel:]
	n := strings.IndexByte(rest[:min(len(rest), maxStringLen)], 0)
	if n < 0 {
		if len(rest) >= maxStringLen {
			return "", fmt.Errorf("%w: string at offset %d is longer than %d bytes", ErrFormat, off, maxStringLen)
		}
		return "", fmt.Errorf("%w: string at offset %d has no terminating NUL", ErrFormat, off)
	}
	return rest[:n], nil
}

func truncated(what string, want, got int) error {
	return fmt.Errorf("%w: truncated %s: need %d bytes, have %d", ErrFormat, what, want, got)
}

func alignUp(n, align uint64) uint64 {
	return (n + align - 1) &^ (align - 1)
}
