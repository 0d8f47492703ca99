package hostlibs

import (
	"slices"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/hostlibs/ldcache"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// AMD's ionic provider (Pensando, Pollara) ships as a real shared library,
// libionic.so.1 (ionicdv), which libibverbs/libionic-rdmav34.so points to:
// both are the ionic provider's, as mlx5's are mlx5's.
func TestDiscoverIonicProvider(t *testing.T) {
	r := rdmaCoreRoot(t)
	r.file(debLib+"/libionic.so.1.1.57.0", "ionic")
	r.link(debLib+"/libionic.so.1", "libionic.so.1.1.57.0")
	r.link(debLib+"/libibverbs/libionic-rdmav34.so", "../libionic.so.1.1.57.0")
	r.file("/etc/libibverbs.d/ionic.driver", "driver ionic\n")
	r.cache(
		ldcache.Entry{Name: "libibverbs.so.1", Path: "/lib/x86_64-linux-gnu/libibverbs.so.1"},
		ldcache.Entry{Name: "libmlx5.so.1", Path: "/lib/x86_64-linux-gnu/libmlx5.so.1"},
		ldcache.Entry{Name: "libionic.so.1", Path: "/lib/x86_64-linux-gnu/libionic.so.1"},
	)
	stack := discover(t, r)
	for _, want := range []string{
		"/etc/libibverbs.d/ionic.driver", debLib + "/libibverbs/libionic-rdmav34.so",
		debLib + "/libionic.so.1", debLib + "/libionic.so.1.1.57.0",
	} {
		i := slices.IndexFunc(stack.Files, func(f model.HostFile) bool { return f.Path == r.dir+want || f.Path == want })
		if i < 0 {
			t.Errorf("%s not found; files %+v", want, stack.Files)
			continue
		}
		if f := stack.Files[i]; f.Provider != "ionic" {
			t.Errorf("%s: provider %q, want ionic", want, f.Provider)
		}
	}
}
