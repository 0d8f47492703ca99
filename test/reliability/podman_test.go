package reliability

// Real podman + runc: the precreate hook with a broken spec dir, and starts
// under load while the spec is rewritten.

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// precreateHooksDir writes a hooks.d dir that runs the precreate hook for
// every container, with cfg.
func precreateHooksDir(t *testing.T, n *node, cfg string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "hooks.d")
	must(t, os.MkdirAll(dir, 0o755))
	args := append([]string{"rdma-cdi", "--config", cfg}, n.roots()...)
	args = append(args, "hook", "precreate")
	hook := fmt.Sprintf(`{"version":"1.0.0","hook":{"path":%q,"args":%s,"env":["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],"timeout":30},"when":{"always":true},"stages":["precreate"]}`,
		rdmaBin(t), jsonList(args))
	must(t, os.WriteFile(filepath.Join(dir, "rdma-cdi-precreate.json"), []byte(hook), 0o644))
	return dir
}

func jsonList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ",") + "]"
}

// With the precreate hook installed for every container and the spec dir
// broken, containers that did not ask for RDMA start as before; one that
// asks fails with the reason in the hook log.
func TestFaultPrecreateBrokenSpecDir(t *testing.T) {
	n := newNode(t, "gid-not-3")
	base := e2e.Podman(t)
	cases := []struct {
		name   string
		break_ func(dir string)
	}{
		{"missing", func(dir string) {}},
		{"dangling symlink", func(dir string) { must(t, os.Symlink("/nonexistent-rdma-cdi", dir)) }},
		{"a regular file", func(dir string) { must(t, os.WriteFile(dir, []byte("junk"), 0o644)) }},
		{"garbage and truncated specs", func(dir string) {
			must(t, os.MkdirAll(dir, 0o755))
			must(t, os.WriteFile(filepath.Join(dir, "junk.yaml"), []byte("\x00\x01{{{ not yaml"), 0o644))
			must(t, os.WriteFile(filepath.Join(dir, "half.yaml"), []byte("cdiVersion: 0.5.0\nkind: "+faultVendor+"/hca\ndevices:\n  - name: mlx5_1\n    containerEdits:\n      deviceNodes:\n        - path: \"/dev/infin"), 0o644))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			specDir := filepath.Join(tmp, "cdi")
			tc.break_(specDir)
			logFile := filepath.Join(tmp, "hooks.log")
			cfg := filepath.Join(tmp, "config.toml")
			must(t, os.WriteFile(cfg, []byte(fmt.Sprintf("[cdi]\nvendor = %q\nspec_dir = %q\n[hooks]\nlog_file = %q\n", faultVendor, specDir, logFile)), 0o644))
			p := base.WithHooksDir(precreateHooksDir(t, n, cfg))
			so, se, err := p.Run(e2e.BB.Ref, "echo", "plain ok")
			if err != nil || strings.TrimSpace(so) != "plain ok" {
				t.Fatalf("a container that asked for nothing did not start: %v\n%s", err, se)
			}
			_, se, err = p.Run("-e", "RDMA_VISIBLE_DEVICES=all", e2e.BB.Ref, "true")
			if err == nil {
				t.Fatal("an RDMA request with a broken spec dir started")
			}
			log, _ := os.ReadFile(logFile)
			if !strings.Contains(string(log), "hold no "+faultVendor+"/hca devices") || !strings.Contains(string(log), specDir) ||
				(strings.Contains(tc.name, "garbage") && !strings.Contains(string(log), "CDI spec errors: "+specDir+"/half.yaml")) {
				t.Errorf("hook log does not say why (spec dir %s): %s\n%s", specDir, log, se)
			}
		})
	}
}

// variant is one spec version the rewriter writes: what a container that
// got it must see.
type variant struct {
	name    string
	devs    []string // /dev/infiniband entries, sorted
	libs    []string // library mount destinations, sorted
	ncclOK  func(conf string) error
	genArgs []string
}

func newVariant(t *testing.T, name string, n *node, vendor, cfg string, extra ...string) *variant {
	t.Helper()
	v := &variant{name: name, genArgs: extra}
	r := n.generate(t, e2e.CDIDir, vendor, append([]string{"--config", cfg}, extra...)...)
	if r.code != 0 {
		t.Fatal(r)
	}
	spec, err := cdi.ReadSpec(filepath.Join(e2e.CDIDir, vendor+"-hca.yaml"), 0)
	must(t, err)
	for _, d := range spec.ContainerEdits.DeviceNodes {
		v.devs = append(v.devs, filepath.Base(d.Path))
	}
	v.libs = e2e.LentFiles(spec.Spec)
	for _, d := range spec.Devices {
		for _, dn := range d.ContainerEdits.DeviceNodes {
			v.devs = append(v.devs, filepath.Base(dn.Path))
		}
	}
	sort.Strings(v.devs)
	v.devs = slices.Compact(v.devs)
	sort.Strings(v.libs)
	want := nccl.Compute(n.res.Node, config.Default().NCCL, nccl.Scope{Devices: n.res.Node.DeviceNames(), HeldAddrs: []netip.Addr{}})
	v.ncclOK = func(conf string) error {
		for _, x := range want.Vars {
			if !strings.Contains(conf, "\n"+x.Name+"="+x.Value+"\n") {
				return fmt.Errorf("%s=%s missing", x.Name, x.Value)
			}
		}
		if strings.Count(conf, "NCCL_IB_HCA=") != 1 {
			return fmt.Errorf("NCCL_IB_HCA set %d times", strings.Count(conf, "NCCL_IB_HCA="))
		}
		return nil
	}
	return v
}

const loadProbe = `ls /dev/infiniband | sort | tr '\n' ' '; echo
echo ---; cat /etc/nccl.conf 2>/dev/null; echo ---
awk '{print $5}' /proc/self/mountinfo`

// check classifies one container's probe output: which variant it got,
// or an error when it got a mix or a part.
func checkProbe(out string, vs []*variant, libUnion map[string]bool) (string, error) {
	parts := strings.SplitN(out, "---\n", 3)
	if len(parts) != 3 {
		return "", fmt.Errorf("probe output: %q", out)
	}
	devs := strings.Fields(parts[0])
	var libs []string
	for _, m := range strings.Split(parts[2], "\n") {
		if libUnion[m] {
			libs = append(libs, m)
		}
	}
	sort.Strings(libs)
	for _, v := range vs {
		if !slices.Equal(devs, v.devs) {
			continue
		}
		if !slices.Equal(libs, v.libs) {
			return v.name, fmt.Errorf("devices of %s but libraries %v, want %v", v.name, libs, v.libs)
		}
		if err := v.ncclOK("\n" + parts[1]); err != nil {
			return v.name, fmt.Errorf("devices of %s but /etc/nccl.conf: %v\n%s", v.name, err, parts[1])
		}
		return v.name, nil
	}
	return "", fmt.Errorf("devices %v are no variant's set", devs)
}

// Containers started with --device <vendor>/hca=all and the spec's hooks
// while a loop rewrites the spec every ~300 ms, alternating two nodes
// (9-device seed002 without libraries, 4-device gid-not-3 with them): no
// start fails, every container has exactly one variant's devices and
// libraries, and its /etc/nccl.conf matches the devices it got.
// RDMA_CDI_STRESS=1 runs the long version.
func TestLoadPodmanWhileSpecRewritten(t *testing.T) {
	sequential, rounds, parallel := 20, 5, 2
	if os.Getenv("RDMA_CDI_STRESS") == "1" {
		sequential, rounds, parallel = 500, 50, 4
	}
	a, b := newNode(t, "gid-not-3"), newNode(t, "seed002")
	vendor := e2e.UniqueVendor(t)
	tmp := t.TempDir()
	logFile := filepath.Join(tmp, "hooks.log")
	cfg := filepath.Join(tmp, "config.toml")
	must(t, os.WriteFile(cfg, []byte(fmt.Sprintf("[hooks]\nlog_file = %q\n", logFile)), 0o644))
	specFile := filepath.Join(e2e.CDIDir, vendor+"-hca.yaml")
	t.Cleanup(func() { os.Remove(specFile) })
	va := newVariant(t, "gid-not-3+libs", a, vendor, cfg)
	vb := newVariant(t, "seed002-nolibs", b, vendor, cfg, "--inject-libraries=false")
	if len(va.libs) == 0 {
		e2e.Missing(t, "host RDMA libraries missing (run `make deps`)")
	}
	vs := []*variant{va, vb}
	libUnion := map[string]bool{}
	for _, v := range vs {
		for _, l := range v.libs {
			libUnion[l] = true
		}
	}
	p := e2e.Podman(t)

	stop := make(chan struct{})
	var rewrites, rewriteFails atomic.Int64
	var rwDone sync.WaitGroup
	rwDone.Add(1)
	go func() {
		defer rwDone.Done()
		nodes := []*node{a, b}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			v := vs[i%2]
			if r := nodes[i%2].generate(t, e2e.CDIDir, vendor, append([]string{"--config", cfg}, v.genArgs...)...); r.code != 0 {
				rewriteFails.Add(1)
				t.Errorf("rewrite %d: %s", i, r)
			}
			rewrites.Add(1)
		}
	}()

	var mu sync.Mutex
	got := map[string]int{}
	var starts, failed int
	var durations []time.Duration
	runOne := func(i int) {
		start := time.Now()
		so, se, err := p.Run("--device", vendor+"/hca=all", e2e.BB.Ref, "sh", "-c", loadProbe)
		d := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		starts++
		durations = append(durations, d)
		if err != nil {
			failed++
			log, _ := os.ReadFile(logFile)
			t.Errorf("start %d failed: %v\n%s\nhook log tail: %s", i, err, se, tail(string(log), 2000))
			return
		}
		name, err := checkProbe(so, vs, libUnion)
		if err != nil {
			failed++
			t.Errorf("start %d: %v", i, err)
			return
		}
		got[name]++
	}
	begin := time.Now()
	for i := 0; i < sequential && !t.Failed(); i++ {
		runOne(i)
	}
	for r := 0; r < rounds && !t.Failed(); r++ {
		var wg sync.WaitGroup
		for j := 0; j < parallel; j++ {
			wg.Add(1)
			go func() { defer wg.Done(); runOne(sequential + r*parallel + j) }()
		}
		wg.Wait()
	}
	close(stop)
	rwDone.Wait()
	sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
	pct := func(q float64) time.Duration {
		if len(durations) == 0 {
			return 0
		}
		return durations[int(q*float64(len(durations)-1))].Round(time.Millisecond)
	}
	t.Logf("RESULT load: %d starts (%d sequential, %dx%d concurrent) in %v, %d failed or inconsistent; variants %v; %d spec rewrites (%d failed); start p50 %v p95 %v max %v",
		starts, sequential, rounds, parallel, time.Since(begin).Round(time.Second), failed, got, rewrites.Load(), rewriteFails.Load(), pct(0.5), pct(0.95), pct(1))
	if len(got) < 2 && !t.Failed() {
		t.Logf("note: every container got the same variant")
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
