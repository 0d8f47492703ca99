package discover

import (
	"slices"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

func sortGIDs(gids []model.GID) {
	slices.SortFunc(gids, func(a, b model.GID) int { return a.Index - b.Index })
}
