package config

import (
	"fmt"
	"net/netip"
)

// AddrFamily is nccl.addr_family, the family of the GIDs NCCL picks
// (NCCL_IB_ADDR_FAMILY). The zero value is AF_INET, NCCL's own default. It
// is a struct, not an integer, so that the file's every value is read by
// UnmarshalText: go-toml would store an integer (addr_family = 1) as is.
type AddrFamily struct{ ipv6 bool }

var (
	AddrFamilyIPv4 = AddrFamily{}           // AF_INET
	AddrFamilyIPv6 = AddrFamily{ipv6: true} // AF_INET6
)

func (f AddrFamily) String() string {
	if f.ipv6 {
		return "AF_INET6"
	}
	return "AF_INET"
}

func (f AddrFamily) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

func (f *AddrFamily) UnmarshalText(b []byte) error {
	switch string(b) {
	case "AF_INET":
		*f = AddrFamilyIPv4
	case "AF_INET6":
		*f = AddrFamilyIPv6
	default:
		return fmt.Errorf("nccl.addr_family %q: want AF_INET or AF_INET6", b)
	}
	return nil
}

// AddrRange is nccl.addr_range, the CIDR NCCL_IB_ADDR_RANGE limits GIDs
// to. The zero value, written "", is no range.
type AddrRange struct{ Prefix netip.Prefix }

// IsSet reports whether a range was given.
func (r AddrRange) IsSet() bool { return r.Prefix.IsValid() }

func (r AddrRange) String() string {
	if !r.IsSet() {
		return ""
	}
	return r.Prefix.String()
}

func (r AddrRange) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

func (r *AddrRange) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*r = AddrRange{}
		return nil
	}
	p, err := netip.ParsePrefix(string(b))
	if err != nil {
		return fmt.Errorf("nccl.addr_range %q: want a CIDR such as 10.0.0.0/8", b)
	}
	*r = AddrRange{Prefix: p}
	return nil
}
