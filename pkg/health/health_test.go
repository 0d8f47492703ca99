package health

import (
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

func TestCheck(t *testing.T) {
	verbs := &model.CharDevice{Path: "/dev/infiniband/uverbs1"}
	active := model.Port{Number: 1, State: "ACTIVE"}
	down := model.Port{Number: 2, State: "DOWN"}
	cm := &model.CharDevice{Path: "/dev/infiniband/rdma_cm"}
	for _, c := range []struct {
		name  string
		d     model.Device
		ports []model.Port
		cm    *model.CharDevice
		want  Problem
	}{
		{"healthy", model.Device{Verbs: verbs}, []model.Port{down, active}, cm, Problem{}},
		{"no rdma_cm in sysfs is no problem", model.Device{Verbs: verbs}, []model.Port{active}, nil, Problem{}},
		{"every port down", model.Device{Verbs: verbs}, []model.Port{down}, cm, Problem{CodeNoActivePort, "no ACTIVE port"}},
		{"ARMED is not ACTIVE", model.Device{Verbs: verbs}, []model.Port{{Number: 1, State: "ARMED"}}, cm, Problem{CodeNoActivePort, "no ACTIVE port"}},
		{"no port selected", model.Device{Verbs: verbs}, nil, cm, Problem{CodeNoActivePort, "no ACTIVE port"}},
		{"no uverbs", model.Device{}, []model.Port{active}, cm, Problem{CodeNoVerbsDevice, "no uverbs device"}},
		{"uverbs node missing", model.Device{Verbs: &model.CharDevice{Path: "/dev/infiniband/uverbs1", NodeMissing: true}}, []model.Port{active}, cm,
			Problem{CodeVerbsNodeMissing, "/dev/infiniband/uverbs1 is missing"}},
		{"rdma_cm node missing", model.Device{Verbs: verbs}, []model.Port{active}, &model.CharDevice{Path: "/dev/infiniband/rdma_cm", NodeMissing: true},
			Problem{CodeRDMACMNodeMissing, "/dev/infiniband/rdma_cm is missing"}},
	} {
		got := Check(model.Node{RDMACM: c.cm}, c.d, c.ports)
		if got != c.want || got.Healthy() != (c.want == Problem{}) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestCheckVFFollowsItsPF(t *testing.T) {
	verbs := &model.CharDevice{Path: "/dev/infiniband/uverbs0"}
	active := []model.Port{{Number: 1, State: "ACTIVE"}}
	down := []model.Port{{Number: 1, State: "DOWN"}}
	pf := model.Device{Name: "mlx5_0", PCIAddress: "0000:3b:00.0", NumVFs: 2, Verbs: verbs, Ports: active}
	vf := model.Device{Name: "mlx5_2", PCIAddress: "0000:3b:00.2", PhysFn: "0000:3b:00.0", Verbs: verbs, Ports: active}
	orphan := model.Device{Name: "mlx5_9", PCIAddress: "0000:5e:00.2", PhysFn: "0000:5e:00.0", Verbs: verbs, Ports: active}
	pfDown := pf
	pfDown.Ports = down
	vfDown := vf
	vfDown.Ports = down
	for _, c := range []struct {
		name string
		node model.Node
		d    model.Device
		want Problem
	}{
		{"PF and VF up", model.Node{Devices: []model.Device{pf, vf}}, vf, Problem{}},
		{"PF down, VF port still ACTIVE", model.Node{Devices: []model.Device{pfDown, vf}}, vf,
			Problem{CodePFNotActive, "its PF mlx5_0 (0000:3b:00.0) has no ACTIVE port"}},
		{"PF down names the PF before the VF's own port", model.Node{Devices: []model.Device{pfDown, vfDown}}, vfDown,
			Problem{CodePFNotActive, "its PF mlx5_0 (0000:3b:00.0) has no ACTIVE port"}},
		{"PF up, VF port down", model.Node{Devices: []model.Device{pf, vfDown}}, vfDown, Problem{CodeNoActivePort, "no ACTIVE port"}},
		{"PF itself is judged by its ports", model.Node{Devices: []model.Device{pfDown, vf}}, pfDown, Problem{CodeNoActivePort, "no ACTIVE port"}},
		{"PF not an RDMA device here", model.Node{Devices: []model.Device{orphan}}, orphan, Problem{}},
		{"VM's VF without physfn", model.Node{Devices: []model.Device{{Name: "mlx5_0", Verbs: verbs, Ports: active}}},
			model.Device{Name: "mlx5_0", Verbs: verbs, Ports: active}, Problem{}},
	} {
		if got := Check(c.node, c.d, c.d.Ports); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
