package discover

import (
	"golang.org/x/sys/unix"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// checkNode warns when the node under the dev root is missing, is not a char
// device, or has other numbers than sysfs says.
func (s *scan) checkNode(path string, cd *model.CharDevice) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		s.nodeProblem("are missing", path)
		cd.NodeMissing = true
		return
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		s.nodeProblem("are not character devices", path)
		cd.NodeMissing = true
		return
	}
	if unix.Major(st.Rdev) != cd.Major || unix.Minor(st.Rdev) != cd.Minor {
		s.warnf("%s is %d:%d but sysfs says %d:%d", path, unix.Major(st.Rdev), unix.Minor(st.Rdev), cd.Major, cd.Minor)
	}
}
