package deviceplugin

import (
	"cmp"
	"slices"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
)

// Preferred picks size units out of available, mustInclude first. For an
// exclusive resource it keeps a container's HCAs on one NUMA node, then
// behind one PCIe root, choosing the best-fitting group at each level (the
// smallest that holds what is still needed), so that larger groups stay
// whole for later pods, and it passes over a PF or VF whose VF or PF
// another container holds (Blocked). Shared units are identical: the
// first ones do.
func (p Pool) Preferred(available, mustInclude []string, size int) []string {
	chosen := slices.Clone(mustInclude)
	blocked := p.Blocked(p.Held(available, mustInclude))
	var candidates []HCA
	for _, id := range available {
		if _, no := blocked[id]; no || slices.Contains(chosen, id) {
			continue
		}
		if p.Resource.Mode != config.ModeExclusive {
			candidates = append(candidates, HCA{Name: id})
			continue
		}
		if h, ok := p.HCA(id); ok && h.Healthy() {
			candidates = append(candidates, h)
		}
	}
	need := size - len(chosen)
	if need <= 0 {
		return chosen
	}
	if p.Resource.Mode == config.ModeExclusive {
		p.orderByLocality(candidates, chosen, need)
	}
	for _, h := range candidates[:min(need, len(candidates))] {
		chosen = append(chosen, h.Name)
	}
	return chosen
}

// orderByLocality sorts candidates NUMA group by NUMA group, and within
// one, PCIe root by PCIe root, each in best-fit order; groups already
// used by chosen come first.
func (p Pool) orderByLocality(candidates []HCA, chosen []string, need int) {
	var chosenNUMA []int
	var chosenRoots []string
	for _, id := range chosen {
		if h, ok := p.HCA(id); ok {
			chosenNUMA = append(chosenNUMA, h.NUMANode)
			chosenRoots = append(chosenRoots, h.PCIeRoot)
		}
	}
	numaRank := bestFit(candidates, need, chosenNUMA, func(h HCA) int { return h.NUMANode })
	rootRank := map[int]map[string]int{}
	for numa := range numaRank {
		var inNUMA []HCA
		for _, h := range candidates {
			if h.NUMANode == numa {
				inNUMA = append(inNUMA, h)
			}
		}
		rootRank[numa] = bestFit(inNUMA, need, chosenRoots, func(h HCA) string { return h.PCIeRoot })
	}
	order := map[string]int{}
	for i, h := range p.HCAs {
		order[h.Name] = i
	}
	slices.SortStableFunc(candidates, func(a, b HCA) int {
		return cmp.Or(
			cmp.Compare(numaRank[a.NUMANode], numaRank[b.NUMANode]),
			cmp.Compare(rootRank[a.NUMANode][a.PCIeRoot], rootRank[b.NUMANode][b.PCIeRoot]),
			cmp.Compare(order[a.Name], order[b.Name]))
	})
}

// bestFit ranks the groups that key puts candidates in: groups holding
// one of first before all others, then groups that can hold need alone,
// smallest first, then the rest, largest first; ties by key.
func bestFit[K cmp.Ordered](candidates []HCA, need int, first []K, key func(HCA) K) map[K]int {
	size := map[K]int{}
	for _, h := range candidates {
		size[key(h)]++
	}
	keys := make([]K, 0, len(size))
	for k := range size {
		keys = append(keys, k)
	}
	tier := func(k K) int {
		switch {
		case slices.Contains(first, k):
			return 0
		case size[k] >= need:
			return 1
		}
		return 2
	}
	slices.SortFunc(keys, func(a, b K) int {
		ta, tb := tier(a), tier(b)
		if ta != tb {
			return cmp.Compare(ta, tb)
		}
		if ta == 1 {
			return cmp.Or(cmp.Compare(size[a], size[b]), cmp.Compare(a, b))
		}
		return cmp.Or(cmp.Compare(size[b], size[a]), cmp.Compare(a, b))
	})
	rank := make(map[K]int, len(keys))
	for i, k := range keys {
		rank[k] = i
	}
	return rank
}
