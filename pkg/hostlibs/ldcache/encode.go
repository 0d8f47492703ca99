package ldcache

import "encoding/binary"

// Encode writes entries in the new layout, little-endian, in the given
// order, as ldconfig would without glibc-hwcaps extensions. It exists to
// build fixture host roots; Parse(Encode(e)) returns e.
func Encode(entries []Entry) []byte {
	stringsStart := newHeaderSize + len(entries)*newEntrySize
	var strtab []byte
	addString := func(s string) uint32 {
		off := uint32(stringsStart + len(strtab))
		strtab = append(strtab, s...)
		strtab = append(strtab, 0)
		return off
	}

	out := make([]byte, stringsStart)
	copy(out, magicNew+versionNew)
	le := binary.LittleEndian
	le.PutUint32(out[offNewNLibs:], uint32(len(entries)))
	out[offNewFlags] = endianLittle
	for i, e := range entries {
		rec := out[newHeaderSize+i*newEntrySize:]
		le.PutUint32(rec[0:], uint32(e.Flags))
		le.PutUint32(rec[4:], addString(e.Name))
		le.PutUint32(rec[8:], addString(e.Path))
		le.PutUint64(rec[16:], e.HWCap)
	}
	le.PutUint32(out[offNewLenStrings:], uint32(len(strtab)))
	return append(out, strtab...)
}
