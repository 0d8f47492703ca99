package ldcache

import "runtime"

// Flags is an entry's flags word: the low byte is the library type, the
// next byte the architecture variant (glibc's FLAG_* values).
type Flags uint32

// Library types (low byte).
const (
	TypeLibc4     Flags = 0x0000
	TypeELF       Flags = 0x0001
	TypeELFLibc5  Flags = 0x0002
	TypeELFLibc6  Flags = 0x0003
	typeMask      Flags = 0x00ff
	archMask      Flags = 0xff00
	noArchVariant Flags = 0x0000
)

// Architecture variants (second byte).
const (
	ArchSPARCLib64       Flags = 0x0100
	ArchIA64Lib64        Flags = 0x0200
	ArchX8664Lib64       Flags = 0x0300
	ArchS390Lib64        Flags = 0x0400
	ArchPowerPCLib64     Flags = 0x0500
	ArchMIPS64LibN32     Flags = 0x0600
	ArchMIPS64LibN64     Flags = 0x0700
	ArchX8664LibX32      Flags = 0x0800
	ArchARMLibHF         Flags = 0x0900
	ArchAArch64Lib64     Flags = 0x0a00
	ArchARMLibSF         Flags = 0x0b00
	ArchMIPSLib32NaN2008 Flags = 0x0c00
	ArchMIPS64N32NaN2008 Flags = 0x0d00
	ArchMIPS64N64NaN2008 Flags = 0x0e00
	ArchRISCVSoft        Flags = 0x0f00
	ArchRISCVDouble      Flags = 0x1000
	ArchLoongArchSoft    Flags = 0x1100
	ArchLoongArchDouble  Flags = 0x1200
)

// Type is the library type (TypeELFLibc6 for every current library).
func (f Flags) Type() Flags { return f & typeMask }

// Arch is the architecture variant (0 for the plain 32-bit ABI).
func (f Flags) Arch() Flags { return f & archMask }

var typeNames = map[Flags]string{
	TypeLibc4:    "libc4",
	TypeELF:      "ELF",
	TypeELFLibc5: "libc5",
	TypeELFLibc6: "libc6",
}

var archNames = map[Flags]string{
	ArchSPARCLib64:       "64bit",
	ArchIA64Lib64:        "IA-64",
	ArchX8664Lib64:       "x86-64",
	ArchS390Lib64:        "64bit",
	ArchPowerPCLib64:     "64bit",
	ArchMIPS64LibN32:     "N32",
	ArchMIPS64LibN64:     "64bit",
	ArchX8664LibX32:      "x32",
	ArchARMLibHF:         "hard-float",
	ArchAArch64Lib64:     "AArch64",
	ArchARMLibSF:         "soft-float",
	ArchMIPSLib32NaN2008: "nan2008",
	ArchMIPS64N32NaN2008: "N32,nan2008",
	ArchMIPS64N64NaN2008: "64bit,nan2008",
	ArchRISCVSoft:        "soft-float",
	ArchRISCVDouble:      "double-float",
	ArchLoongArchSoft:    "soft-float",
	ArchLoongArchDouble:  "double-float",
}

// String spells the flags as `ldconfig -p` does: "libc6,x86-64".
func (f Flags) String() string {
	s, ok := typeNames[f.Type()]
	if !ok {
		s = "unknown"
	}
	if a := f.Arch(); a != noArchVariant {
		name, ok := archNames[a]
		if !ok {
			name = "unknown"
		}
		s += "," + name
	}
	return s
}

// NativeFlags returns the flags of libraries the running program's
// architecture can load, and false where this package does not know them.
func NativeFlags() (Flags, bool) {
	return flagsFor(runtime.GOARCH)
}

func flagsFor(goarch string) (Flags, bool) {
	switch goarch {
	case "amd64":
		return TypeELFLibc6 | ArchX8664Lib64, true
	case "arm64":
		return TypeELFLibc6 | ArchAArch64Lib64, true
	case "386":
		return TypeELFLibc6, true
	case "ppc64le", "ppc64":
		return TypeELFLibc6 | ArchPowerPCLib64, true
	case "s390x":
		return TypeELFLibc6 | ArchS390Lib64, true
	case "riscv64":
		return TypeELFLibc6 | ArchRISCVDouble, true
	case "loong64":
		return TypeELFLibc6 | ArchLoongArchDouble, true
	default:
		// arm (hard- or soft-float) and others: no single answer.
		return 0, false
	}
}
