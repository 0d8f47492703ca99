package model

import (
	"slices"
	"strings"
)

// SortNames sorts names as operators read them: runs of digits compare as
// numbers, so mlx5_2 comes before mlx5_10.
func SortNames(names []string) { slices.SortFunc(names, CompareNames) }

// CompareNames orders device and netdev names with runs of digits compared as numbers:
// mlx5_2 < mlx5_10 < mlx5_bond_0.
func CompareNames(a, b string) int {
	for a != "" && b != "" {
		da, db := leadingDigits(a), leadingDigits(b)
		if da != "" && db != "" {
			if c := compareNumeric(da, db); c != 0 {
				return c
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func leadingDigits(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}

// compareNumeric compares two digit strings by value, then by length so
// that "01" and "1" still have a fixed order.
func compareNumeric(a, b string) int {
	ta, tb := strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(ta) != len(tb) {
		return len(ta) - len(tb)
	}
	if c := strings.Compare(ta, tb); c != 0 {
		return c
	}
	return len(a) - len(b)
}
