package discover

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// miniTree writes a one-device, one-port sysfs tree whose files can then be
// broken one at a time.
func miniTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	addMiniDevice(t, root, "mlx5_1", "0000:17:00.0", 1)
	return root
}

// addMiniDevice writes one one-port RoCE device, as miniTree's, on PCI
// function pciAddr with uverbsN.
func addMiniDevice(t *testing.T, root, name, pciAddr string, uverbsN int) {
	t.Helper()
	pci := "devices/pci0000:00/0000:00:01.0/" + pciAddr
	dev := pci + "/infiniband/" + name
	uverbs := "uverbs" + strconv.Itoa(uverbsN)
	files := map[string]string{
		pci + "/numa_node":                             "1\n",
		dev + "/node_guid":                             "e8eb:d303:00cc:c920\n",
		dev + "/ports/1/state":                         "4: ACTIVE\n",
		dev + "/ports/1/phys_state":                    "5: LinkUp\n",
		dev + "/ports/1/link_layer":                    "Ethernet\n",
		dev + "/ports/1/rate":                          "200 Gb/sec (4X HDR)\n",
		dev + "/ports/1/gids/0":                        "fe80:0000:0000:0000:eaeb:d3ff:fecc:c920\n",
		dev + "/ports/1/gids/1":                        "0000:0000:0000:0000:0000:ffff:190b:8002\n",
		dev + "/ports/1/gids/2":                        "0000:0000:0000:0000:0000:0000:0000:0000\n",
		dev + "/ports/1/gid_attrs/types/0":             "IB/RoCE v1\n",
		dev + "/ports/1/gid_attrs/types/1":             "RoCE v2\n",
		dev + "/ports/1/gid_attrs/ndevs/0":             "eth1\n",
		dev + "/ports/1/gid_attrs/ndevs/1":             "eth1\n",
		pci + "/infiniband_verbs/" + uverbs + "/ibdev": name + "\n",
		pci + "/infiniband_verbs/" + uverbs + "/dev":   fmt.Sprintf("231:%d\n", 192+uverbsN),
	}
	for rel, body := range files {
		p := filepath.Join(root, rel)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(body), 0o644))
	}
	must(t, os.Symlink("../../../"+pciAddr, filepath.Join(root, dev, "device")))
	link(t, root, "class/infiniband/"+name, "../../"+dev)
	link(t, root, "class/infiniband_verbs/"+uverbs, "../../"+pci+"/infiniband_verbs/"+uverbs)
}

func link(t *testing.T, root, rel, target string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755))
	must(t, os.Symlink(target, filepath.Join(root, rel)))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func discoverTree(root string) (Result, error) {
	return Discover(Options{Roots: model.Roots{Sysfs: root, Dev: filepath.Join(root, "no-dev")}, SkipNet: true})
}

func TestMiniTreeReads(t *testing.T) {
	res, err := discoverTree(miniTree(t))
	if err != nil {
		t.Fatal(err)
	}
	d := res.Node.Devices
	if len(d) != 1 || d[0].Name != "mlx5_1" || d[0].PCIAddress != "0000:17:00.0" || d[0].NUMANode != 1 {
		t.Fatalf("device = %+v", d)
	}
	p := d[0].Ports[0]
	if p.State != "ACTIVE" || p.NetDev != "eth1" || p.GIDTableLen != 3 || len(p.GIDs) != 2 || p.GIDs[1].Type != "RoCE v2" {
		t.Fatalf("port = %+v", p)
	}
	if d[0].Verbs == nil || d[0].Verbs.Minor != 193 || d[0].Verbs.Path != "/dev/infiniband/uverbs1" {
		t.Fatalf("verbs = %+v", d[0].Verbs)
	}
	// The dev root has no nodes: discovery says so instead of failing.
	if !strings.Contains(strings.Join(res.Warnings, "\n"), "are missing: uverbs1") {
		t.Fatalf("want a warning about the missing uverbs1 node, got %v", res.Warnings)
	}
}

func TestMalformedAttributesNameTheFile(t *testing.T) {
	dev := "class/infiniband/mlx5_1"
	cases := []struct {
		file, body, want string
	}{
		{dev + "/ports/1/state", "ACTIVE\n", "ports/1/state: malformed state"},
		{dev + "/ports/1/link_layer", "Token Ring\n", `unknown link layer "Token Ring"`},
		{dev + "/ports/1/gids/1", "not-a-gid\n", "ports/1/gids/1: malformed GID"},
		{dev + "/ports/1/gid_attrs/types/1", "RoCE v9\n", `unknown GID type "RoCE v9"`},
		{"class/infiniband_verbs/uverbs1/dev", "231\n", "uverbs1/dev: malformed device number"},
		{dev + "/device/numa_node", "one\n", "numa_node: malformed NUMA node"},
		{dev + "/device/sriov_numvfs", "16x\n", "sriov_numvfs: malformed VF count"},
	}
	for _, tc := range cases {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			root := miniTree(t)
			must(t, os.WriteFile(filepath.Join(root, tc.file), []byte(tc.body), 0o644))
			_, err := discoverTree(root)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "mlx5_1") {
				t.Fatalf("got %v, want an error naming mlx5_1 and containing %q", err, tc.want)
			}
		})
	}
}

func TestUnreadableAttribute(t *testing.T) {
	root := miniTree(t)
	state := filepath.Join(root, "class/infiniband/mlx5_1/ports/1/state")
	must(t, os.Remove(state))
	must(t, os.Mkdir(state, 0o755)) // reading a directory fails like an unreadable attribute
	_, err := discoverTree(root)
	if err == nil || !strings.Contains(err.Error(), "ports/1/state") {
		t.Fatalf("got %v, want an error naming ports/1/state", err)
	}
}

func TestVanishedDeviceIsSkipped(t *testing.T) {
	root := miniTree(t)
	// The class link stays but its target is gone, as when a device is
	// removed between listing class/infiniband and reading it.
	must(t, os.RemoveAll(filepath.Join(root, "devices/pci0000:00/0000:00:01.0/0000:17:00.0/infiniband")))
	res, err := discoverTree(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Node.Devices) != 0 || !strings.Contains(strings.Join(res.Warnings, "\n"), "mlx5_1 vanished") {
		t.Fatalf("devices %v warnings %v", res.Node.Devices, res.Warnings)
	}
}

func TestMissingSysfsRoot(t *testing.T) {
	_, err := discoverTree(filepath.Join(t.TempDir(), "nope"))
	if err == nil || !strings.Contains(err.Error(), "sysfs root") || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("got %v", err)
	}
}

func TestNoRDMAIsNotAnError(t *testing.T) {
	res, err := discoverTree(t.TempDir())
	if err != nil || len(res.Node.Devices) != 0 || res.Node.Devices == nil {
		t.Fatalf("got %+v, %v; want an empty, non-nil device list", res.Node, err)
	}
}

// A large GID table is read by several workers; the result and the error
// must not depend on which worker finishes first.
func TestLargeGIDTableReadInParallel(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	root := miniTree(t)
	port := filepath.Join(root, "class/infiniband/mlx5_1/ports/1")
	for i := 3; i < 256; i++ {
		gid := "0000:0000:0000:0000:0000:0000:0000:0000\n"
		if i%50 == 0 {
			gid = fmt.Sprintf("0000:0000:0000:0000:0000:ffff:0a00:%04x\n", i)
			must(t, os.WriteFile(filepath.Join(port, "gid_attrs/types", strconv.Itoa(i)), []byte("RoCE v2\n"), 0o644))
			must(t, os.WriteFile(filepath.Join(port, "gid_attrs/ndevs", strconv.Itoa(i)), []byte("eth1\n"), 0o644))
		}
		must(t, os.WriteFile(filepath.Join(port, "gids", strconv.Itoa(i)), []byte(gid), 0o644))
	}
	res, err := discoverTree(root)
	must(t, err)
	p := res.Node.Devices[0].Ports[0]
	var got []int
	for _, g := range p.GIDs {
		got = append(got, g.Index)
	}
	if want := []int{0, 1, 50, 100, 150, 200, 250}; !slices.Equal(got, want) || p.GIDTableLen != 256 {
		t.Fatalf("GID indexes %v (table length %d), want %v (256)", got, p.GIDTableLen, want)
	}
	if ip, _ := p.GIDs[3].IPv4(); ip.String() != "10.0.0.100" {
		t.Errorf("GID 100 IPv4 = %v, want 10.0.0.100", ip)
	}

	// Slots in the last and the second chunk broken: always the lower one.
	must(t, os.WriteFile(filepath.Join(port, "gids/250"), []byte("bad\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(port, "gids/100"), []byte("bad\n"), 0o644))
	for range 20 {
		if _, err := discoverTree(root); err == nil || !strings.Contains(err.Error(), "gids/100: malformed GID") {
			t.Fatalf("got %v, want the error of slot 100", err)
		}
	}
}
