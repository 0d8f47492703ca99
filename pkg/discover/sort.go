package discover

import (
	"slices"
	"strconv"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// SortNatural sorts names so that numeric runs compare by value:
// mlx5_2 before mlx5_10, as operators read them.
func SortNatural(names []string) {
	slices.SortFunc(names, compareNatural)
}

func compareNatural(a, b string) int {
	for a != "" && b != "" {
		da, db := leadingDigits(a), leadingDigits(b)
		if da != "" && db != "" {
			na, _ := strconv.ParseUint(da, 10, 64)
			nb, _ := strconv.ParseUint(db, 10, 64)
			if na != nb {
				if na < nb {
					return -1
				}
				return 1
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
	end := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		return s
	}
	return s[:end]
}

func sortGIDs(gids []model.GID) {
	slices.SortFunc(gids, func(a, b model.GID) int { return a.Index - b.Index })
}
