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

// charDevices attaches uverbs to the device and umad/issm to their ports:
// the class entries whose ibdev names the device (see charDevIndex); the
// dev numbers and port come from the class entry itself.
func (s *scan) charDevices(dev *model.Device) error {
	if s.charDevs == nil {
		s.charDevs = s.charDevIndex()
	}
	for _, base := range s.charDevs[dev.Name] {
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
		portNum, err := s.rd.Read(s.sys.Path(class, base, "port"))
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

// charDevIndex maps each RDMA device name to its char device class entries
// (issmN, umadN, uverbsN), reading every entry's ibdev once. It finds what
// rdmamap.GetRdmaCharDevices finds, in the same order (issm, umad, then
// uverbs entries, each in directory order), but that lists the class
// directories and reads every ibdev again for each device, which is
// quadratic in the number of devices (seconds on a 256-device node).
func (s *scan) charDevIndex() map[string][]string {
	index := map[string][]string{}
	classes := []struct{ class, prefix string }{
		{"class/infiniband_mad", rdmamap.RdmaIssmFilePrefix},
		{"class/infiniband_mad", rdmamap.RdmaUmadFilxPrefix},
		{"class/infiniband_verbs", rdmamap.RdmaUverbsFilxPrefix},
	}
	if s.opts.NCCLOnly {
		classes = classes[2:] // uverbs alone
	}
	for _, c := range classes {
		dir := s.sys.Path(c.class)
		for _, name := range s.classEntries(dir) {
			if !strings.Contains(name, c.prefix) {
				continue
			}
			ibdev, err := s.rd.Read(dir + "/" + name + "/ibdev")
			if err != nil {
				continue
			}
			ibdev = strings.Trim(ibdev, "\n")
			index[ibdev] = append(index[ibdev], name)
		}
	}
	return index
}

// classEntries lists a class directory once per scan, in directory order.
func (s *scan) classEntries(dir string) []string {
	if names, ok := s.classDirs[dir]; ok {
		return names
	}
	var names []string
	if f, err := os.Open(dir); err == nil {
		names, _ = f.Readdirnames(-1)
		_ = f.Close()
	}
	if s.classDirs == nil {
		s.classDirs = map[string][]string{}
	}
	s.classDirs[dir] = names
	return names
}

// classCharDevice reads a char device's numbers from its class entry and
// checks the node under the dev root. A missing node is a warning, because
// libibverbs skips such a device.
func (s *scan) classCharDevice(rel string) (*model.CharDevice, error) {
	devPath := s.sys.Path(rel, "dev")
	v, err := s.rd.Read(devPath)
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
	s.checkNode(filepath.Join(s.opts.Dev, "infiniband", name), cd)
	return cd, nil
}

func (s *scan) rdmaCM() *model.CharDevice {
	devPath := s.sys.Path("class/misc/rdma_cm/dev")
	v, err := s.rd.Read(devPath)
	if err != nil {
		return nil
	}
	major, minor, err := sysfs.ParseDevNumbers(devPath, v)
	if err != nil {
		s.warnf("%v", err)
		return nil
	}
	cd := &model.CharDevice{Path: containerDevDir + "/rdma_cm", Major: major, Minor: minor}
	s.checkNode(filepath.Join(s.opts.Dev, "infiniband/rdma_cm"), cd)
	return cd
}
