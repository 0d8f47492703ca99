package discover

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/Mellanox/rdmamap"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// containerDevDir is where device nodes live inside a container, whatever
// the host's dev root.
const containerDevDir = "/dev/infiniband"

// charDevices attaches uverbs to the device and umad/issm to their ports.
// rdmamap finds the class entries whose ibdev names the device; the dev
// numbers and port come from the class entry itself.
func (s *scan) charDevices(dev *model.Device) error {
	for _, hostPath := range rdmamap.GetRdmaCharDevices(dev.Name) {
		base := filepath.Base(hostPath)
		var class string
		switch {
		case strings.HasPrefix(base, "uverbs"):
			class = "class/infiniband_verbs"
		case strings.HasPrefix(base, "umad"), strings.HasPrefix(base, "issm"):
			class = "class/infiniband_mad"
		default:
			continue // rdma_cm is node-wide; ucm is obsolete
		}
		cd, err := s.classCharDevice(filepath.Join(class, base))
		if err != nil {
			return err
		}
		if cd == nil {
			continue
		}
		if strings.HasPrefix(base, "uverbs") {
			dev.Verbs = cd
			continue
		}
		portNum, err := sysfs.ReadAttr(s.sys.Path(class, base, "port"))
		if err != nil {
			return err
		}
		for i := range dev.Ports {
			if strconv.Itoa(dev.Ports[i].Number) != portNum {
				continue
			}
			if strings.HasPrefix(base, "umad") {
				dev.Ports[i].Umad = cd
			} else {
				dev.Ports[i].Issm = cd
			}
		}
	}
	if dev.Verbs == nil {
		s.warnf("%s has no uverbs device: it cannot be used from user space", dev.Name)
	}
	return nil
}

// classCharDevice reads a char device's numbers from its class entry and
// checks the node under the dev root. A missing node is a warning, because
// libibverbs skips such a device.
func (s *scan) classCharDevice(rel string) (*model.CharDevice, error) {
	devPath := s.sys.Path(rel, "dev")
	v, err := sysfs.ReadAttr(devPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	major, minor, err := sysfs.ParseDevNumbers(devPath, v)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(rel)
	cd := &model.CharDevice{Path: containerDevDir + "/" + name, Major: major, Minor: minor}
	s.checkNode(filepath.Join(s.opts.DevRoot, "infiniband", name), cd)
	return cd, nil
}

func (s *scan) rdmaCM() *model.CharDevice {
	devPath := s.sys.Path("class/misc/rdma_cm/dev")
	v, err := sysfs.ReadAttr(devPath)
	if err != nil {
		return nil
	}
	major, minor, err := sysfs.ParseDevNumbers(devPath, v)
	if err != nil {
		s.warnf("%v", err)
		return nil
	}
	cd := &model.CharDevice{Path: containerDevDir + "/rdma_cm", Major: major, Minor: minor}
	s.checkNode(filepath.Join(s.opts.DevRoot, "infiniband/rdma_cm"), cd)
	return cd
}
