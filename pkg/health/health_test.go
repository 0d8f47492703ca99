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
		got := Check(c.d, c.ports, c.cm)
		if got != c.want || got.Healthy() != (c.want == Problem{}) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
