package model

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is major.minor.patch, as CDI versions and the engines' release
// numbers are written; pre-release and build parts have no place in it.
type Version [3]int

// Less reports whether v comes before o.
func (v Version) Less(o Version) bool {
	for i := range v {
		if v[i] != o[i] {
			return v[i] < o[i]
		}
	}
	return false
}

// ParseVersion accepts "0.5.0", "v0.5.0" and "0.5" (= 0.5.0).
func ParseVersion(s string) (Version, error) {
	var v Version
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if len(parts) < 2 || len(parts) > 3 {
		return v, fmt.Errorf("want a version like 0.5.0")
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, fmt.Errorf("want a version like 0.5.0, %q is not a number", p)
		}
		v[i] = n
	}
	return v, nil
}
