package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Unlimited is RLIM_INFINITY.
const Unlimited = math.MaxUint64

// ParseMemlock parses "unlimited", "-1", or a byte size with an optional
// K/M/G/T suffix (binary units, "KiB" and "k" accepted alike).
func ParseMemlock(s string) (uint64, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	if t == "unlimited" || t == "infinity" || t == "-1" {
		return Unlimited, nil
	}
	t = strings.TrimSuffix(strings.TrimSuffix(t, "ib"), "b")
	shift := 0
	if n := len(t); n > 0 {
		if i := strings.IndexByte("kmgt", t[n-1]); i >= 0 {
			shift = 10 * (i + 1)
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseUint(t, 10, 64)
	if err != nil || (shift > 0 && v > math.MaxUint64>>shift) {
		return 0, fmt.Errorf("memlock %q: want unlimited or a size such as 64G", s)
	}
	return v << shift, nil
}

// Memlock is hooks.memlock in bytes (Unlimited for unlimited), parsed when
// the config is read so that a bad size stops the load, not a container.
type Memlock uint64

// UnmarshalText reads the forms ParseMemlock does.
func (m *Memlock) UnmarshalText(b []byte) error {
	v, err := ParseMemlock(string(b))
	if err != nil {
		return fmt.Errorf("hooks.memlock: %w", err)
	}
	*m = Memlock(v)
	return nil
}

// MarshalText writes "unlimited", or the size with the largest suffix that
// divides it ("64G", "65536").
func (m Memlock) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

func (m Memlock) String() string {
	if m == Unlimited {
		return "unlimited"
	}
	v, unit := uint64(m), ""
	for _, u := range []string{"K", "M", "G", "T"} {
		if v == 0 || v%1024 != 0 {
			break
		}
		v, unit = v/1024, u
	}
	return strconv.FormatUint(v, 10) + unit
}
