package networker

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis/rdma/v1alpha1"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/attach"
)

// lostAnswers is a worker whose Apply answers never come back; Release
// leaves what left says.
type lostAnswers struct {
	left     bool
	released int
}

func (l *lostAnswers) PodLinkNames(string) (map[string]bool, error) { return map[string]bool{}, nil }
func (l *lostAnswers) Plan(_ string, plans []podnetwork.Attachment) ([]attach.Record, error) {
	var out []attach.Record
	for _, a := range plans {
		out = append(out, attach.Record{Attachment: a})
	}
	return out, nil
}
func (l *lostAnswers) Apply(string, string, []attach.Record) ([]attach.Record, error) {
	return nil, ErrOutcomeUnknown
}
func (l *lostAnswers) Release(_, _ string, records []attach.Record) ([]attach.Record, error) {
	l.released++
	if l.left {
		return records, errors.New("eth3 is in neither namespace")
	}
	return nil, nil
}
func (l *lostAnswers) Gone(string, string) (bool, error) { return false, nil }
func (l *lostAnswers) Ready(context.Context) error       { return nil }

// TestLostApplyIsGivenBack: when the worker's answer to an Apply is lost,
// the networker gives back everything recorded, fails the pod's start,
// and keeps what it could not give back for RetryGiveBacks.
func TestLostApplyIsGivenBack(t *testing.T) {
	for _, left := range []bool{false, true} {
		ops := &lostAnswers{left: left}
		log := logrus.New()
		log.SetOutput(io.Discard)
		n := &Networker{
			Plan: func(context.Context, Sandbox, podnetwork.Allocator) ([]podnetwork.Attachment, error) {
				return []podnetwork.Attachment{{Device: "mlx5_3", HostNetDev: "eth3", Mode: v1alpha1.ModeMove, PodInterface: "eth3"}}, nil
			},
			Namespaces: ops, Sysfs: t.TempDir(), IndexDir: t.TempDir(), Log: log,
		}
		n.Restore(t.TempDir())
		s := Sandbox{ID: "sb", UID: "uid", Namespace: "ns", Name: "pod", NetNS: "/var/run/netns/x"}
		err := n.Started(context.Background(), s)
		if err == nil || !strings.Contains(err.Error(), ErrOutcomeUnknown.Error()) || ops.released != 1 {
			t.Fatalf("left %v: Started: %v, %d give-backs; want the lost answer, one give-back", left, err, ops.released)
		}
		if _, kept := n.sandboxes[s.ID]; kept != left || n.ended[s.ID] != left {
			t.Errorf("left %v: sandbox kept %v, to retry %v", left, kept, n.ended[s.ID])
		}
		if pending := n.RetryGiveBacks(); left && (pending != 1 || ops.released != 2) {
			t.Errorf("RetryGiveBacks: %d pending after %d give-backs, want 1 after 2", pending, ops.released)
		}
	}
}
