package hooks

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// roceSysfs writes a sysfs tree of two single-port RoCE devices: mlx5_0 on
// eth0 (10.0.0.4) and mlx5_1 on eth1, whose port holds the IPv4 GIDs of
// 10.1.0.5 (indexes 2, 3) and 10.1.0.6 (indexes 4, 5), v1 then v2.
func roceSysfs(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	gid4 := func(a, b, c, d int) string {
		return fmt.Sprintf("0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", a, b, c, d)
	}
	devs := []struct {
		name, pci, netdev string
		uverbs            int
		gids              []string
	}{
		{"mlx5_0", "0000:17:00.0", "eth0", 0, []string{"fe80:0000:0000:0000:0000:00ff:fe00:0001", "fe80:0000:0000:0000:0000:00ff:fe00:0001", gid4(10, 0, 0, 4), gid4(10, 0, 0, 4)}},
		{"mlx5_1", "0000:17:00.1", "eth1", 1, []string{"fe80:0000:0000:0000:0000:00ff:fe00:0002", "fe80:0000:0000:0000:0000:00ff:fe00:0002", gid4(10, 1, 0, 5), gid4(10, 1, 0, 5), gid4(10, 1, 0, 6), gid4(10, 1, 0, 6)}},
	}
	file := func(rel, body string) {
		p := filepath.Join(root, rel)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(body+"\n"), 0o644))
	}
	link := func(rel, target string) {
		p := filepath.Join(root, rel)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.Symlink(target, p))
	}
	for _, d := range devs {
		pci := "devices/pci0000:00/0000:00:01.0/" + d.pci
		dev := pci + "/infiniband/" + d.name
		file(pci+"/numa_node", "0")
		file(dev+"/node_guid", "e8eb:d303:00cc:c92"+d.name[5:])
		file(dev+"/ports/1/state", "4: ACTIVE")
		file(dev+"/ports/1/phys_state", "5: LinkUp")
		file(dev+"/ports/1/link_layer", "Ethernet")
		for i, g := range d.gids {
			file(fmt.Sprintf("%s/ports/1/gids/%d", dev, i), g)
			file(fmt.Sprintf("%s/ports/1/gid_attrs/types/%d", dev, i), []string{"IB/RoCE v1", "RoCE v2"}[i%2])
			file(fmt.Sprintf("%s/ports/1/gid_attrs/ndevs/%d", dev, i), d.netdev)
		}
		for i := len(d.gids); i < 8; i++ {
			file(fmt.Sprintf("%s/ports/1/gids/%d", dev, i), "0000:0000:0000:0000:0000:0000:0000:0000")
		}
		verbs := fmt.Sprintf("uverbs%d", d.uverbs)
		file(pci+"/infiniband_verbs/"+verbs+"/ibdev", d.name)
		file(pci+"/infiniband_verbs/"+verbs+"/dev", fmt.Sprintf("231:%d", 192+d.uverbs))
		link(dev+"/device", "../../../"+d.pci)
		link("class/infiniband/"+d.name, "../../"+dev)
		link("class/infiniband_verbs/"+verbs, "../../"+pci+"/infiniband_verbs/"+verbs)
	}
	return root
}

func uverbs(n int64) specs.LinuxDevice {
	return specs.LinuxDevice{Path: fmt.Sprintf("/dev/infiniband/uverbs%d", n), Type: "c", Major: 231, Minor: 192 + n}
}

// startInNetNS starts the container's process in a fresh network namespace
// where eth1 (a veth) holds addr and carries the default route.
func startInNetNS(t testing.TB, rootfs, addr string) int {
	return startInNetNSOn(t, rootfs, "eth1", addr)
}

func startInNetNSOn(t testing.TB, rootfs, netdev, addr string) int {
	t.Helper()
	needRoot(t)
	script := "ip link add " + netdev + " type veth peer name peer1 && ip addr add " + addr + " dev " + netdev + " && " +
		"ip link set " + netdev + " up && ip link set peer1 up && ip route add default dev " + netdev + " && exec sleep 30"
	p := startInRoot(t, rootfs, "unshare", "--net", "sh", "-c", script)
	// Wait until the namespace is ready: the shell has exec'd sleep.
	for i := 0; i < 200; i++ {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.Process.Pid))
		if strings.TrimSpace(string(comm)) == "sleep" {
			return p.Process.Pid
		}
		sleepMs(10)
	}
	t.Fatal("container process did not set up its network namespace")
	return 0
}

func ncclOpts(t testing.TB) NCCLConfOptions {
	return NCCLConfOptions{NCCL: config.Default().NCCL, Roots: model.Roots{Sysfs: roceSysfs(t), Dev: t.TempDir()}}
}

func ncclBundle(t testing.TB, devices ...specs.LinuxDevice) *testBundle {
	b := newBundle(t)
	b.Spec.Linux.Devices = devices
	b.Spec.Linux.Namespaces = []specs.LinuxNamespace{{Type: specs.NetworkNamespace}}
	b.save(t)
	return b
}

func loadIn(t testing.TB, b *testBundle, pid int) *Container {
	c, err := Load(b.state(pid))
	must(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestNCCLConfOneDeviceInANetNS(t *testing.T) {
	b := ncclBundle(t, uverbs(1))
	c := loadIn(t, b, startInNetNS(t, b.Rootfs, "10.1.0.6/24"))
	log, buf := testLog()
	must(t, WriteNCCLConf(c, ncclOpts(t), log))
	got, err := os.ReadFile(filepath.Join(b.Rootfs, "etc/nccl.conf"))
	must(t, err)
	for _, want := range []string{"NCCL_IB_HCA=mlx5_1:1\n", "NCCL_IB_GID_INDEX=5\n", "NCCL_SOCKET_IFNAME=eth1\n", "NCCL_IB_DISABLE=0\n"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("nccl.conf lacks %q:\n%s\nlog: %s", want, got, buf)
		}
	}
	// The other address of the same port gives the other index.
	b2 := ncclBundle(t, uverbs(1))
	c2 := loadIn(t, b2, startInNetNS(t, b2.Rootfs, "10.1.0.5/24"))
	must(t, WriteNCCLConf(c2, ncclOpts(t), log))
	got2, err := os.ReadFile(filepath.Join(b2.Rootfs, "etc/nccl.conf"))
	must(t, err)
	if !strings.Contains(string(got2), "NCCL_IB_GID_INDEX=3\n") {
		t.Errorf("10.1.0.5: %s", got2)
	}
}

func TestNCCLConfDevicesAndMerge(t *testing.T) {
	b := ncclBundle(t, uverbs(0), uverbs(1), specs.LinuxDevice{Path: "/dev/null", Type: "c", Major: 1, Minor: 3})
	b.Spec.Process.Env = append(b.Spec.Process.Env, "NCCL_IB_GID_INDEX=7", "LD_PRELOAD=/evil.so")
	b.save(t)
	image := "NCCL_DEBUG=INFO\nNCCL_IB_TIMEOUT=18\n"
	b.write(t, "etc/nccl.conf", image)
	c := loadIn(t, b, startInNetNS(t, b.Rootfs, "10.1.0.6/24"))
	opts := ncclOpts(t)
	opts.NCCL.Tunables = map[string]string{"NCCL_IB_TIMEOUT": "22", "NCCL_IB_QPS_PER_CONNECTION": "4"}
	log, _ := testLog()
	must(t, WriteNCCLConf(c, opts, log))
	first, err := os.ReadFile(filepath.Join(b.Rootfs, "etc/nccl.conf"))
	must(t, err)
	s := string(first)
	if !strings.HasPrefix(s, image) {
		t.Errorf("image's lines not kept first:\n%s", s)
	}
	// Both HCAs injected, but the namespace holds only mlx5_1's address:
	// mlx5_0's RoCE GIDs would be refused from it, so it is left out.
	if !strings.Contains(s, "NCCL_IB_HCA=mlx5_1:1\n") || !strings.Contains(s, "NCCL_IB_QPS_PER_CONNECTION=4\n") {
		t.Errorf("want mlx5_1 alone and the tunable:\n%s", s)
	}
	if strings.Contains(s, "NCCL_IB_GID_INDEX") || strings.Count(s, "NCCL_IB_TIMEOUT") != 1 {
		t.Errorf("keys set by process.env or the image were written:\n%s", s)
	}
	// A rerun (restart) replaces the block instead of appending another.
	must(t, WriteNCCLConf(c, opts, log))
	again, err := os.ReadFile(filepath.Join(b.Rootfs, "etc/nccl.conf"))
	must(t, err)
	if string(again) != s {
		t.Errorf("rerun changed the file:\n%s", again)
	}
}

// With the host's network (no network namespace in config.json) the
// container's default route is the node's, and the HCA behind it (the
// management NIC) is left out as on the node.
func TestNCCLConfHostNetworkLeavesOutTheManagementHCA(t *testing.T) {
	b := ncclBundle(t, uverbs(0), uverbs(1))
	b.Spec.Linux.Namespaces = nil
	b.save(t)
	c := loadIn(t, b, startInNetNSOn(t, b.Rootfs, "eth0", "10.0.0.4/24"))
	log, _ := testLog()
	must(t, WriteNCCLConf(c, ncclOpts(t), log))
	got, err := os.ReadFile(filepath.Join(b.Rootfs, "etc/nccl.conf"))
	must(t, err)
	if !strings.Contains(string(got), "NCCL_IB_HCA=mlx5_1:1\n") || !strings.Contains(string(got), "NCCL_SOCKET_IFNAME=eth0\n") {
		t.Fatalf("host network:\n%s", got)
	}
}

func TestNCCLConfNothingToDo(t *testing.T) {
	log, buf := testLog()
	t.Run("no RDMA device", func(t *testing.T) {
		b := ncclBundle(t, specs.LinuxDevice{Path: "/dev/null", Type: "c", Major: 1, Minor: 3})
		must(t, WriteNCCLConf(b.load(t), ncclOpts(t), log))
		if _, err := os.Lstat(filepath.Join(b.Rootfs, "etc/nccl.conf")); !os.IsNotExist(err) {
			t.Errorf("wrote nccl.conf without RDMA devices")
		}
	})
	t.Run("delivery cdi-env", func(t *testing.T) {
		b := ncclBundle(t, uverbs(0))
		opts := ncclOpts(t)
		opts.NCCL.Delivery = "cdi-env"
		must(t, WriteNCCLConf(b.load(t), opts, log))
		if _, err := os.Lstat(filepath.Join(b.Rootfs, "etc/nccl.conf")); !os.IsNotExist(err) {
			t.Errorf("wrote nccl.conf with delivery cdi-env")
		}
	})
	t.Run("read-only root", func(t *testing.T) {
		b := ncclBundle(t, uverbs(0))
		b.Spec.Root.Readonly = true
		b.save(t)
		must(t, WriteNCCLConf(b.load(t), ncclOpts(t), log))
		if _, err := os.Lstat(filepath.Join(b.Rootfs, "etc/nccl.conf")); !os.IsNotExist(err) {
			t.Errorf("wrote into a read-only root")
		}
		if !strings.Contains(buf.String(), "read-only") {
			t.Errorf("log: %s", buf)
		}
	})
}

func TestNCCLConfHostileImage(t *testing.T) {
	needRoot(t)
	b := ncclBundle(t, uverbs(1))
	c := newCanary(t)
	must(t, os.Symlink(c.File, filepath.Join(b.Rootfs, "etc/nccl.conf")))
	before := c.snapshot(t)
	ctr := loadIn(t, b, startInNetNS(t, b.Rootfs, "10.1.0.6/24"))
	log, _ := testLog()
	err := WriteNCCLConf(ctr, ncclOpts(t), log)
	c.assertUntouched(t, before)
	if err == nil || !strings.Contains(err.Error(), "/etc/nccl.conf in container root is a symlink") {
		t.Fatalf("got %v", err)
	}
}

func TestContainerRDMADevicesMatchesNumbersOrPath(t *testing.T) {
	opts := ncclOpts(t)
	node, err := discoverNode(opts)
	must(t, err)
	spec := &specs.Spec{Linux: &specs.Linux{Devices: []specs.LinuxDevice{
		{Path: "/dev/whatever", Type: "c", Major: 231, Minor: 193}, // numbers win over the path
		{Path: "/dev/infiniband/uverbs0", Type: "b", Major: 8, Minor: 0},
	}}}
	if got := ContainerRDMADevices(node, spec); strings.Join(got, ",") != "mlx5_1" {
		t.Fatalf("got %v", got)
	}
	spec.Linux.Devices = append(spec.Linux.Devices, specs.LinuxDevice{Path: "/dev/infiniband/uverbs0", Type: "c"})
	if got := ContainerRDMADevices(node, spec); strings.Join(got, ",") != "mlx5_0,mlx5_1" {
		t.Fatalf("path match: got %v", got)
	}
	if got := ContainerRDMADevices(node, &specs.Spec{}); got != nil {
		t.Fatalf("no linux section: %v", got)
	}
}
