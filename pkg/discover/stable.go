package discover

import (
	"errors"
	"os"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// maxDeviceTries bounds the rescans of a device that was replaced while it
// was read.
const maxDeviceTries = 3

// stableDevice reads a device whose sysfs directory may go away or be
// replaced (hot unplug, replug, driver reload) while it is read. The
// directory's identity is taken before and after the read: a device gone
// by the end is errVanished; one replaced meanwhile is read again, the
// warnings of the torn read dropped (and after maxDeviceTries torn reads it
// counts as vanished). A read error on a directory that
// stayed the same is the attribute's own fault and is returned.
func (s *scan) stableDevice(name string) (model.Device, error) {
	dir := s.sys.Path("class/infiniband", name)
	for try := 1; ; try++ {
		before, err := os.Stat(dir)
		if errors.Is(err, os.ErrNotExist) {
			return model.Device{}, errVanished
		}
		mark := s.mark()
		dev, err := s.device(name)
		after, serr := os.Stat(dir)
		if errors.Is(serr, os.ErrNotExist) {
			s.rewind(mark)
			return dev, errVanished
		}
		if before == nil || serr != nil || os.SameFile(before, after) {
			return dev, err
		}
		if try == maxDeviceTries {
			// Replugged on every read: skipped like a device that went
			// away, so it cannot block the others.
			s.rewind(mark)
			return dev, errVanished
		}
		s.rewind(mark)
	}
}

// scanMark is how far the warnings went, to drop those of a torn read.
type scanMark struct {
	warnings int
	nodes    map[string]int
}

func (s *scan) mark() scanMark {
	m := scanMark{warnings: len(s.warnings), nodes: map[string]int{}}
	for reason, names := range s.badNodes {
		m.nodes[reason] = len(names)
	}
	return m
}

func (s *scan) rewind(m scanMark) {
	s.warnings = s.warnings[:m.warnings]
	for reason, names := range s.badNodes {
		if n, ok := m.nodes[reason]; ok {
			s.badNodes[reason] = names[:n]
		} else {
			delete(s.badNodes, reason)
		}
	}
}
