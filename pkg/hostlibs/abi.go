package hostlibs

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// maxLibSize bounds how much of libibverbs is read to find its PABI.
const maxLibSize = 64 << 20

// ProviderFile returns NAME and N for a provider file name
// "lib<NAME>-rdmav<N>.so".
func ProviderFile(file string) (provider string, pabi int, ok bool) {
	stem, ok := strings.CutSuffix(file, ".so")
	if !ok || !strings.HasPrefix(stem, "lib") {
		return "", 0, false
	}
	i := strings.LastIndex(stem, "-rdmav")
	if i <= len("lib") {
		return "", 0, false
	}
	pabi, ok = parsePABI(stem[i+len("-rdmav"):])
	return stem[len("lib"):i], pabi, ok
}

func parsePABI(digits string) (int, bool) {
	if digits == "" || len(digits) > 4 {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil && n >= 0
}

// pabiMarkers are the strings libibverbs carries before its PABI: rdma-core
// exports its private API to providers as symbol version
// IBVERBS_PRIVATE_<N>, and every version formats provider names with
// "rdmav<N>" (older libibverbs, such as MLNX_OFED 4's, only the latter).
var pabiMarkers = [][]byte{[]byte("IBVERBS_PRIVATE_"), []byte("rdmav")}

// libibverbsPABI reads the provider ABI libibverbs (host path p) expects.
func (fs *hostFS) libibverbsPABI(p string) (int, error) {
	f, err := os.Open(fs.hostPath(p))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	data, err := readBounded(f, maxLibSize)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", p, err)
	}
	if n, ok := ProviderABI(data); ok {
		return n, nil
	}
	return 0, fmt.Errorf("cannot tell the provider ABI of %s: neither IBVERBS_PRIVATE_<N> nor rdmav<N> appears in it", p)
}

// readBounded reads at most limit bytes of f in one buffer sized from its
// length (libibverbs is read at every container start).
func readBounded(f *os.File, limit int64) ([]byte, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, min(info.Size(), limit))
	n, err := io.ReadFull(f, buf)
	if err == io.ErrUnexpectedEOF { // the file shrank meanwhile
		err = nil
	}
	return buf[:n], err
}

// findNumberAfter returns the decimal number right after the first
// occurrence of marker that is followed by digits.
func findNumberAfter(data, marker []byte) (int, bool) {
	for {
		i := bytes.Index(data, marker)
		if i < 0 {
			return 0, false
		}
		data = data[i+len(marker):]
		end := 0
		for end < len(data) && end < 5 && data[end] >= '0' && data[end] <= '9' {
			end++
		}
		if n, ok := parsePABI(string(data[:end])); ok {
			return n, true
		}
	}
}

// neededLibs returns the DT_NEEDED sonames of the ELF file at onMachine,
// nil when it is not a readable ELF file (fixtures use plain files).
func neededLibs(onMachine string) []string {
	f, err := elf.Open(onMachine)
	if err != nil {
		return nil
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil
	}
	return libs
}
