package discover

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// One device whose sysfs cannot be read must not cost the node its other
// HCAs: it is left out with a warning naming it and the file, and the
// others are discovered as usual. (Discovery used to fail whole, so that
// list and generate exited and the agents served nothing.)
func TestBrokenDeviceBesideGoodOnes(t *testing.T) {
	const broken = "class/infiniband/mlx5_2"
	cases := []struct {
		name   string
		break_ func(t *testing.T, root string)
		want   string
	}{
		{"link layer the kernel never prints", func(t *testing.T, root string) {
			must(t, os.WriteFile(filepath.Join(root, broken, "ports/1/link_layer"), []byte("Token Ring\n"), 0o644))
		}, `ports/1/link_layer: unknown link layer "Token Ring"`},
		{"unreadable link layer", func(t *testing.T, root string) {
			ll := filepath.Join(root, broken, "ports/1/link_layer")
			must(t, os.Remove(ll))
			must(t, os.Mkdir(ll, 0o755))
		}, "ports/1/link_layer"},
		{"malformed GID", func(t *testing.T, root string) {
			must(t, os.WriteFile(filepath.Join(root, broken, "ports/1/gids/1"), []byte("not-a-gid\n"), 0o644))
		}, "ports/1/gids/1: malformed GID"},
		{"unreadable ports directory", func(t *testing.T, root string) {
			ports := filepath.Join(root, broken, "ports")
			must(t, os.RemoveAll(ports))
			must(t, os.WriteFile(ports, nil, 0o644))
		}, "mlx5_2/ports"},
		{"malformed uverbs dev", func(t *testing.T, root string) {
			must(t, os.WriteFile(filepath.Join(root, "class/infiniband_verbs/uverbs2/dev"), []byte("231\n"), 0o644))
		}, "uverbs2/dev: malformed device number"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := miniTree(t)
			addMiniDevice(t, root, "mlx5_2", "0000:18:00.0", 2)
			addMiniDevice(t, root, "mlx5_3", "0000:19:00.0", 3)
			tc.break_(t, root)
			res, err := discoverTree(root)
			if err != nil {
				t.Fatalf("one broken device failed the node: %v", err)
			}
			if got := strings.Join(res.Node.DeviceNames(), " "); got != "mlx5_1 mlx5_3" {
				t.Errorf("devices %q, want the good ones: mlx5_1 mlx5_3", got)
			}
			for _, d := range res.Node.Devices {
				if len(d.Ports) != 1 || len(d.Ports[0].GIDs) != 2 || d.Verbs == nil {
					t.Errorf("%s read short: %+v", d.Name, d)
				}
			}
			warnings := strings.Join(res.Warnings, "\n")
			if !strings.Contains(warnings, "RDMA device mlx5_2") || !strings.Contains(warnings, tc.want) {
				t.Errorf("warnings %q: want one naming mlx5_2 and %q", warnings, tc.want)
			}
		})
	}
}

// With every device broken there is nothing to serve: an error naming each,
// so that a caller keeps its last good view.
func TestEveryDeviceBrokenIsAnError(t *testing.T) {
	root := miniTree(t)
	addMiniDevice(t, root, "mlx5_2", "0000:18:00.0", 2)
	for _, dev := range []string{"mlx5_1", "mlx5_2"} {
		must(t, os.WriteFile(filepath.Join(root, "class/infiniband", dev, "ports/1/gids/1"), []byte("bad\n"), 0o644))
	}
	_, err := discoverTree(root)
	if err == nil || !strings.Contains(err.Error(), "RDMA device mlx5_1") || !strings.Contains(err.Error(), "RDMA device mlx5_2") {
		t.Fatalf("got %v, want an error naming both devices", err)
	}
}

// The kernel prints "Unknown" for a port that is neither InfiniBand nor
// Ethernet (every AWS EFA port): a port like any other, its link layer
// unspecified, and no warning.
func TestUnknownLinkLayerIsUnspecified(t *testing.T) {
	root := miniTree(t)
	must(t, os.WriteFile(filepath.Join(root, "class/infiniband/mlx5_1/ports/1/link_layer"), []byte("Unknown\n"), 0o644))
	res, err := discoverTree(root)
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Node.Devices; len(d) != 1 || d[0].Ports[0].LinkLayer != model.LinkLayerUnspecified || d[0].Ports[0].State != model.PortActive {
		t.Fatalf("devices %+v, want mlx5_1 with an ACTIVE port of link layer unspecified", d)
	}
	for _, w := range res.Warnings {
		if strings.Contains(w, "link") {
			t.Errorf("unexpected warning: %s", w)
		}
	}
}
