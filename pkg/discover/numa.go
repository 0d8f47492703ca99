package discover

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// numaNodes reads devices/system/node: the online nodes, which of them
// have CPUs (has_cpu) and memory (has_memory), and each one's SLIT row
// (nodeN/distance, one entry per online node in the online list's
// order). nil where the kernel lists no node (no CONFIG_NUMA, a fixture
// without them) or one of the three lists cannot be read: a node taken
// as CPU-less for want of has_cpu would pass for GPU memory. A distance
// row that cannot be read or does not fit the list is left out.
func (g gdrScan) numaNodes() []model.NUMANode {
	lists := map[string][]int{}
	for _, name := range []string{"online", "has_cpu", "has_memory"} {
		path := g.sys.Path("devices/system/node", name)
		s, err := g.rd.Read(path)
		if err != nil {
			return nil
		}
		if lists[name], err = sysfs.ParseList(path, s); err != nil {
			return nil
		}
	}
	online := lists["online"]
	if len(online) == 0 {
		return nil
	}
	out := make([]model.NUMANode, 0, len(online))
	for _, id := range online {
		n := model.NUMANode{ID: id, CPUs: slices.Contains(lists["has_cpu"], id), Memory: slices.Contains(lists["has_memory"], id)}
		path := g.sys.Path("devices/system/node", "node"+strconv.Itoa(id), "distance")
		if s, err := g.rd.Read(path); err == nil {
			if row, err := sysfs.ParseDistances(path, s); err == nil && len(row) == len(online) {
				n.Distance = make(map[int]int, len(row))
				for i, d := range row {
					n.Distance[online[i]] = d
				}
			}
		}
		out = append(out, n)
	}
	return out
}

// midr reads MIDR_EL1 of the first online CPU, which arm64 kernels show
// in sysfs and others do not have: "" off arm64.
func (g gdrScan) midr() string {
	first := 0
	if s, err := g.rd.Read(g.sys.Path("devices/system/cpu/online")); err == nil {
		if cpus, err := sysfs.ParseList("online", s); err == nil && len(cpus) > 0 {
			first = cpus[0]
		}
	}
	v, _ := g.rd.ReadOptional(g.sys.Path("devices/system/cpu", fmt.Sprintf("cpu%d", first), "regs/identification/midr_el1"))
	return strings.TrimSpace(v)
}
