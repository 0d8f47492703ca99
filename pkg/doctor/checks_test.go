package doctor

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/userspace"
)

func verbs(n uint32) *model.CharDevice {
	return &model.CharDevice{Path: "/dev/infiniband/uverbs" + string(rune('0'+n)), Major: 231, Minor: 192 + n}
}

func goodFacts() Facts {
	node := model.Node{
		Devices: []model.Device{
			{Name: "mlx5_0", Verbs: verbs(0), Ports: []model.Port{{Number: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: model.LinkLayerEthernet}}},
			{Name: "mlx5_1", Verbs: verbs(1), Ports: []model.Port{{Number: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: model.LinkLayerEthernet}}},
		},
		RDMACM:    &model.CharDevice{Path: "/dev/infiniband/rdma_cm", Major: 10, Minor: 58},
		NetNSMode: "shared",
	}
	spec := []byte("cdiVersion: 0.5.0\nkind: rdma.example.com/hca\n")
	return Facts{
		SysfsRoot: "/sys", DevRoot: "/dev", Node: node,
		DevNodes: map[string]DevNode{
			"/dev/infiniband/uverbs0": {HostPath: "/dev/infiniband/uverbs0", Exists: true, Char: true, Major: 231, Minor: 192},
			"/dev/infiniband/uverbs1": {HostPath: "/dev/infiniband/uverbs1", Exists: true, Char: true, Major: 231, Minor: 193},
			"/dev/infiniband/rdma_cm": {HostPath: "/dev/infiniband/rdma_cm", Exists: true, Char: true, Major: 10, Minor: 58},
		},
		Stack: model.UserStack{Flavor: "rdma-core", LibraryDirs: []string{"/usr/lib/x86_64-linux-gnu"}, Files: []model.HostFile{
			{Path: "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0", Role: "libibverbs"},
			{Path: "/usr/lib/x86_64-linux-gnu/libibverbs.so.1", Symlink: "libibverbs.so.1.14.44.0", Role: "libibverbs"},
			{Path: "/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so", Role: "provider"},
			{Path: "/etc/libibverbs.d/mlx5.driver", Role: "driver-config"},
		}},
		InjectLibraries:  true,
		UserSpaceDefault: model.UserSpaceAuto,
		WantMemlock:      config.Unlimited,
		Services:         []Service{{Name: "dockerd", PID: 812, Soft: config.Unlimited, Hard: config.Unlimited}},
		Engines:          []Engine{{Name: "podman", Version: "4.3.1"}},
		Spec: Spec{Path: "/var/run/cdi/rdma.example.com-hca.yaml", Exists: true, Version: "0.5.0",
			Devices:  []string{"rdma.example.com/hca=mlx5_1", "rdma.example.com/hca=all", "rdma.example.com/hca=mlx5_0"},
			Rendered: spec, OnDisk: spec},
	}
}

// find returns the results named name.
func find(results []Result, name string) []Result {
	var out []Result
	for _, r := range results {
		if r.Name == name {
			out = append(out, r)
		}
	}
	return out
}

func TestCheckAllGood(t *testing.T) {
	results := Check(goodFacts())
	for _, r := range results {
		if r.Status != Pass {
			t.Errorf("%s", r)
		}
	}
	want := []string{
		"PASS rdma-devices: 2 device(s), active ports: mlx5_0:1, mlx5_1:1",
		"PASS uverbs-nodes: /dev/infiniband/uverbs0 231:192, /dev/infiniband/uverbs1 231:193, /dev/infiniband/rdma_cm 10:58",
		"PASS rdma-core: rdma-core: 4 file(s), 1 provider(s), 1 driver config(s) in /usr/lib/x86_64-linux-gnu; lent to images without a stack of their own (cdi.user_space = auto)",
		"PASS memlock: memlock soft/hard: dockerd (pid 812) unlimited/unlimited",
		"PASS cdi-podman: podman 4.3.1: CDI on by default; reads cdiVersion <= 0.5.0, spec is 0.5.0",
		"PASS cdi-spec: /var/run/cdi/rdma.example.com-hca.yaml (cdiVersion 0.5.0): rdma.example.com/hca=all, rdma.example.com/hca=mlx5_0, rdma.example.com/hca=mlx5_1",
		"PASS cdi-spec-current: /var/run/cdi/rdma.example.com-hca.yaml matches what would be rendered now",
	}
	var got bytes.Buffer
	if err := WriteText(&got, results); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(got.String(), w+"\n") {
			t.Errorf("missing line %q in:\n%s", w, got.String())
		}
	}
	if Failed(results) {
		t.Fatal("Failed() on all-PASS results")
	}
}

func TestChecks(t *testing.T) {
	tru, fls := true, false
	tests := []struct {
		name   string
		mut    func(*Facts)
		check  string
		status Status
		detail string // substring
		fix    string // substring
	}{
		{"discovery error", func(f *Facts) { f.DiscoverErr = "sysfs root: stat /nope: no such file" }, "rdma-devices", Fail, "discovery failed: sysfs root", "--sysfs-root"},
		{"no devices", func(f *Facts) { f.Node.Devices = nil }, "rdma-devices", Fail, "no RDMA devices under /sys/class/infiniband", "modprobe"},
		{"no active port", func(f *Facts) {
			for i := range f.Node.Devices {
				f.Node.Devices[i].Ports[0].State, f.Node.Devices[i].Ports[0].PhysState = "DOWN", "Disabled"
			}
		}, "rdma-devices", Fail, "no ACTIVE port (mlx5_0:1 DOWN/Disabled, mlx5_1:1 DOWN/Disabled)", "cables"},
		{"one port down", func(f *Facts) { f.Node.Devices[1].Ports[0].State = "INIT" }, "rdma-devices", Warn, "active: mlx5_0:1; not active: mlx5_1:1 INIT/LinkUp", "exclude_hcas"},
		{"uverbs missing", func(f *Facts) { delete(f.DevNodes, "/dev/infiniband/uverbs1") }, "uverbs-nodes", Fail, "mlx5_1: /dev/infiniband/uverbs1 missing (sysfs says 231:193)", "ib_uverbs"},
		{"uverbs wrong numbers", func(f *Facts) {
			f.DevNodes["/dev/infiniband/uverbs1"] = DevNode{HostPath: "/fx/dev/infiniband/uverbs1", Exists: true, Char: true, Major: 231, Minor: 200}
		}, "uverbs-nodes", Fail, "mlx5_1: /fx/dev/infiniband/uverbs1 is 231:200 but sysfs says 231:193", ""},
		{"uverbs regular file", func(f *Facts) {
			f.DevNodes["/dev/infiniband/uverbs0"] = DevNode{HostPath: "/dev/infiniband/uverbs0", Exists: true}
		}, "uverbs-nodes", Fail, "/dev/infiniband/uverbs0 is not a char device", ""},
		{"no uverbs in sysfs", func(f *Facts) { f.Node.Devices[0].Verbs = nil }, "uverbs-nodes", Fail, "no uverbs device in sysfs for mlx5_0", ""},
		{"no rdma_cm", func(f *Facts) { f.Node.RDMACM = nil }, "uverbs-nodes", Warn, "no rdma_cm device", "rdma_ucm"},
		{"exclusive netns", func(f *Facts) { f.Node.NetNSMode = "exclusive" }, "rdma-netns-mode", Warn, "exclusive", "rdma system set netns shared"},
		{"unknown netns", func(f *Facts) { f.Node.NetNSMode = "" }, "rdma-netns-mode", Warn, "unknown", ""},
		{"shared netns", func(*Facts) {}, "rdma-netns-mode", Pass, "shared: every network namespace sees every RDMA device", ""},
		{"no stack", func(f *Facts) { f.Stack = model.UserStack{} }, "rdma-core", Fail, "no RDMA user-space stack", "ibverbs-providers"},
		{"no stack, not injected", func(f *Facts) { f.Stack = model.UserStack{}; f.InjectLibraries = false }, "rdma-core", Warn, "no RDMA user-space stack", ""},
		{"stack problems", func(f *Facts) {
			f.Stack.Problems = []string{"provider libmlx5-rdmav25.so has ABI 25, libibverbs wants 34"}
		}, "rdma-core", Fail, "provider libmlx5-rdmav25.so has ABI 25, libibverbs wants 34", "consistent rdma-core"},
		{"low memlock", func(f *Facts) {
			f.Services = []Service{{Name: "dockerd", PID: 9, Soft: 8 << 20, Hard: 8 << 20}, {Name: "containerd.service", Soft: config.Unlimited, Hard: config.Unlimited}}
		}, "memlock", Warn, "low memlock from dockerd (pid 9) 8MiB/8MiB", "LimitMEMLOCK=infinity"},
		{"memlock met by config", func(f *Facts) {
			f.WantMemlock = 4 << 20
			f.Services = []Service{{Name: "crio", PID: 9, Soft: 8 << 20, Hard: 8 << 20}}
		}, "memlock", Pass, "crio (pid 9) 8MiB/8MiB", ""},
		{"no engines running", func(f *Facts) { f.Services = nil }, "memlock", Warn, "no running container engine", ""},
		{"podman too old for spec", func(f *Facts) { f.Spec.Version = "0.6.0" }, "cdi-podman", Fail,
			"podman 4.3.1 reads cdiVersion <= 0.5.0 but /var/run/cdi/rdma.example.com-hca.yaml is 0.6.0", `cdi.max_version = "0.5.0"`},
		{"podman 5.5", func(f *Facts) { f.Engines[0].Version = "5.5.2"; f.Spec.Version = "0.7.0" }, "cdi-podman", Pass, "reads cdiVersion <= 1.0.0, spec is 0.7.0", ""},
		{"podman without CDI", func(f *Facts) { f.Engines[0].Version = "3.4.4" }, "cdi-podman", Warn, "podman 3.4.4 has no CDI support", "rdma-container-runtime"},
		{"docker 20.10", func(f *Facts) { f.Engines = []Engine{{Name: "docker", Version: "20.10.24"}} }, "cdi-docker", Warn, "no CDI support", "--add-runtime"},
		{"docker 25 off", func(f *Facts) {
			f.Engines = []Engine{{Name: "docker", Version: "25.0.3", ConfigPath: "/etc/docker/daemon.json"}}
		}, "cdi-docker", Warn, "CDI off by default, not enabled in /etc/docker/daemon.json", `"features": {"cdi": true}`},
		{"docker 25 on", func(f *Facts) {
			f.Engines = []Engine{{Name: "docker", Version: "25.0.3", CDIConfig: &tru, ConfigPath: "/etc/docker/daemon.json"}}
		}, "cdi-docker", Pass, "CDI set to true in /etc/docker/daemon.json; reads cdiVersion <= 0.6.0, spec is 0.5.0", ""},
		{"docker 28.2 switched off", func(f *Facts) {
			f.Engines = []Engine{{Name: "docker", Version: "28.2.1", CDIConfig: &fls, ConfigPath: "/etc/docker/daemon.json"}}
		}, "cdi-docker", Warn, "CDI set to false in /etc/docker/daemon.json", ""},
		{"containerd 1.7 off", func(f *Facts) {
			f.Engines = []Engine{{Name: "containerd", Version: "1.7.24", ConfigPath: "/etc/containerd/config.toml"}}
		}, "cdi-containerd", Warn, "off by default", "enable_cdi = true"},
		{"containerd 1.7 on, spec too new", func(f *Facts) {
			f.Engines = []Engine{{Name: "containerd", Version: "1.7.24", CDIConfig: &tru, ConfigPath: "/etc/containerd/config.toml"}}
			f.Spec.Version = "0.7.0"
		}, "cdi-containerd", Fail, "reads cdiVersion <= 0.5.0", ""},
		{"containerd 2.4", func(f *Facts) { f.Engines = []Engine{{Name: "containerd", Version: "2.4.2"}} }, "cdi-containerd", Pass, "on by default; reads cdiVersion <= 1.1.0", ""},
		{"crio 1.24 reads 0.3.0 only", func(f *Facts) { f.Engines = []Engine{{Name: "crio", Version: "1.24.6"}} }, "cdi-crio", Fail, "crio 1.24.6 reads cdiVersion <= 0.3.0", ""},
		{"crio 1.34 (tested)", func(f *Facts) { f.Engines = []Engine{{Name: "crio", Version: "1.34.0"}} }, "cdi-crio", Pass, "on by default; reads cdiVersion <= 1.0.0", ""},
		{"crio 1.34, spec too new", func(f *Facts) {
			f.Engines = []Engine{{Name: "crio", Version: "1.34.0"}}
			f.Spec.Version = "1.1.0"
		}, "cdi-crio", Fail, "crio 1.34.0 reads cdiVersion <= 1.0.0", ""},
		{"crio 1.28 reads 0.6.0", func(f *Facts) {
			f.Engines = []Engine{{Name: "crio", Version: "1.28.4"}}
			f.Spec.Version = "0.7.0"
		}, "cdi-crio", Fail, "reads cdiVersion <= 0.6.0", ""},
		{"engine version unknown", func(f *Facts) { f.Engines = []Engine{{Name: "crio", VersionErr: "exit status 1"}} }, "cdi-crio", Warn, "version unknown: exit status 1", ""},
		{"no engines", func(f *Facts) { f.Engines = nil }, "cdi-engines", Warn, "no container engine", ""},
		{"config usable", func(f *Facts) { f.ConfigPath = "/etc/rdma-cdi/config.toml" }, "config", Pass, "/etc/rdma-cdi/config.toml: usable", ""},
		{"config from a newer version", func(f *Facts) {
			f.ConfigWarnings = []string{"config /etc/rdma-cdi/config.toml: unknown key cdi.future ignored (from a newer rdma-cdi?)"}
		}, "config", Warn, "unknown key cdi.future", "upgrade rdma-cdi"},
		{"config broken", func(f *Facts) {
			f.ConfigErr = "config /etc/rdma-cdi/config.toml: line 1 column 5: toml: expected ']'"
		}, "config", Fail, "containers that ask for RDMA are refused (others start)", "move it away"},
		{"spec missing", func(f *Facts) { f.Spec.Exists = false }, "cdi-spec", Fail, "does not exist", "rdma-cdi generate"},
		{"spec missing, no devices", func(f *Facts) { f.Spec.Exists = false; f.Node.Devices = nil }, "cdi-spec", Warn, "no RDMA devices to describe", ""},
		{"spec invalid", func(f *Facts) {
			f.Spec.LoadErrors = []string{`failed to load CDI Spec invalid device, empty device edits`}
			f.Spec.Devices = nil
		}, "cdi-spec", Fail, "rejected by the CDI library: failed to load CDI Spec invalid device", ""},
		{"spec resolves nothing", func(f *Facts) { f.Spec.Devices = nil }, "cdi-spec", Fail, "resolves no devices", ""},
		{"spec stale", func(f *Facts) {
			f.Spec.Rendered = []byte("cdiVersion: 0.5.0\nkind: rdma.example.com/hca\nNCCL_IB_GID_INDEX=5\n")
			f.Spec.OnDisk = []byte("cdiVersion: 0.5.0\nkind: rdma.example.com/hca\nNCCL_IB_GID_INDEX=3\n")
		}, "cdi-spec-current", Fail, `is stale: line 3 is "NCCL_IB_GID_INDEX=3" on disk, "NCCL_IB_GID_INDEX=5" now`, "rdma-cdi-watch.service"},
		{"render fails", func(f *Facts) { f.Spec.RenderErr = "sysfs gone" }, "cdi-spec-current", Fail, "cannot render the spec now: sysfs gone", ""},
		{"spec but nothing to render", func(f *Facts) { f.Spec.Rendered = nil }, "cdi-spec-current", Fail, "nothing would be rendered now", ""},
		{"no spec, nothing to render", func(f *Facts) { f.Spec.Exists = false; f.Spec.Rendered = nil }, "cdi-spec-current", Pass, "no spec expected", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := goodFacts()
			tc.mut(&f)
			results := Check(f)
			got := find(results, tc.check)
			if len(got) != 1 {
				t.Fatalf("%d results named %s in %v", len(got), tc.check, results)
			}
			r := got[0]
			if r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) || !strings.Contains(r.Fix, tc.fix) {
				t.Fatalf("got  %s\nwant %s ...%s... (fix ...%s...)", r, tc.status, tc.detail, tc.fix)
			}
			if r.Status != Pass && tc.status != Pass && r.Fix == "" && tc.fix != "" {
				t.Fatalf("no fix hint: %s", r)
			}
			alsoFails := tc.name == "spec missing, no devices" || tc.name == "no spec, nothing to render"
			if Failed(results) != (tc.status == Fail || alsoFails) {
				t.Fatalf("Failed() = %v with %s", Failed(results), r)
			}
		})
	}
}

func TestWriteJSON(t *testing.T) {
	f := goodFacts()
	f.Node.NetNSMode = "exclusive"
	f.Spec.Exists = false
	var buf bytes.Buffer
	if err := WriteJSON(&buf, Check(f)); err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(buf.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if rep.OK || rep.Summary.Fail != 2 || rep.Summary.Warn != 1 || rep.Summary.Pass != len(rep.Checks)-3 {
		t.Fatalf("report %+v", rep)
	}
	if rep.Checks[2].Name != "rdma-netns-mode" || rep.Checks[2].Status != Warn || rep.Checks[2].Fix == "" {
		t.Fatalf("check 2: %+v", rep.Checks[2])
	}
}

func TestParsers(t *testing.T) {
	limits := []byte(`Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max locked memory         8388608              unlimited            bytes
Max address space         unlimited            unlimited            bytes
`)
	soft, hard, ok := ParseMemlockLimit(limits)
	if !ok || soft != 8<<20 || hard != config.Unlimited {
		t.Fatalf("ParseMemlockLimit = %d %d %v", soft, hard, ok)
	}
	if _, _, ok := ParseMemlockLimit([]byte("Max cpu time unlimited unlimited seconds\n")); ok {
		t.Fatal("no memlock row accepted")
	}
	s, ok := ParseUnitLimits("docker.service", "LoadState=loaded\nLimitMEMLOCK=infinity\nLimitMEMLOCKSoft=65536\n")
	if !ok || s.Soft != 64<<10 || s.Hard != config.Unlimited || s.Name != "docker.service" {
		t.Fatalf("ParseUnitLimits = %+v %v", s, ok)
	}
	if _, ok := ParseUnitLimits("crio.service", "LoadState=not-found\nLimitMEMLOCK=8388608\n"); ok {
		t.Fatal("a unit that is not loaded was accepted")
	}
	for in, want := range map[string]string{`{"features":{"cdi":true}}`: "true", `{"features":{"cdi":false}}`: "false", `{"debug":true}`: "nil"} {
		v, errText := DockerCDIFeature([]byte(in))
		got := "nil"
		if v != nil {
			got = map[bool]string{true: "true", false: "false"}[*v]
		}
		if got != want || errText != "" {
			t.Errorf("DockerCDIFeature(%s) = %s %q, want %s", in, got, errText, want)
		}
	}
	if _, errText := DockerCDIFeature([]byte("{")); !strings.Contains(errText, "daemon.json") {
		t.Errorf("bad daemon.json error %q", errText)
	}
	v, errText := ContainerdCDI([]byte("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = true\n  cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]\n"))
	if v == nil || !*v || errText != "" {
		t.Fatalf("ContainerdCDI = %v %q", v, errText)
	}
	if v, _ := ContainerdCDI([]byte("version = 2\n")); v != nil {
		t.Fatal("enable_cdi found in an empty config")
	}
	for in, want := range map[string]semver{"v2.4.2": {2, 4, 2}, "20.10.24+dfsg1": {20, 10, 24}, "1.7": {1, 7, 0}} {
		if got, ok := parseSemver(in); !ok || got != want {
			t.Errorf("parseSemver(%q) = %v %v", in, got, ok)
		}
	}
}

func TestCheckUserSpace(t *testing.T) {
	own := userspace.ImageStack{Libibverbs: "/usr/lib64/libibverbs.so.1", FoundBy: "the image's /etc/ld.so.cache", PABI: 34,
		ProviderDir: "/usr/lib64/libibverbs", Providers: map[string]int{"mlx5": 34}, DriverConfigs: map[string]bool{"mlx5": true}}
	auto := userspace.Choice{Mode: model.UserSpaceAuto, Source: "node config cdi.user_space"}
	cases := []struct {
		name        string
		u           UserSpaceFacts
		brokenHost  bool
		status      Status
		detail, fix string
	}{
		{"own stack", UserSpaceFacts{Image: own, Choice: auto}, false, Pass, "gets its own stack: the image carries libibverbs.so.1 at /usr/lib64/libibverbs.so.1", ""},
		{"no stack", UserSpaceFacts{Choice: auto}, false, Pass, "gets the host's stack", ""},
		{"no stack, broken host", UserSpaceFacts{Choice: auto}, true, Fail, "no usable RDMA user space to lend", ""},
		{"own stack without providers", UserSpaceFacts{Image: userspace.ImageStack{Libibverbs: "/x/libibverbs.so.1", ProviderDir: "/x/libibverbs"}, Choice: auto},
			false, Fail, "has no providers in /x/libibverbs", "RDMA_CDI_USER_SPACE=host"},
		{"bad override", UserSpaceFacts{ChoiceErr: `container env RDMA_CDI_USER_SPACE: RDMA user-space mode "hots": want auto, host or image`}, false, Fail,
			"the hook refuses such a container", "to auto, host or image"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := goodFacts()
			f.Node.Devices[0].Driver, f.Node.Devices[1].Driver = "mlx5_core", "mlx5_core"
			if tc.brokenHost {
				f.Stack.Problems = []string{"provider of another ABI"}
			}
			tc.u.Target = "image root /img"
			f.UserSpace = &tc.u
			got := find(Check(f), "user-space")
			if len(got) != 1 {
				t.Fatalf("user-space results %+v", got)
			}
			r := got[0]
			if r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) || !strings.Contains(r.Fix, tc.fix) || !strings.HasPrefix(r.Detail, "image root /img") {
				t.Errorf("%s", r)
			}
		})
	}
	if got := find(Check(goodFacts()), "user-space"); len(got) != 0 {
		t.Errorf("a user-space check without an image: %+v", got)
	}
}

// The container's NCCL_* env against the node: what keeps NCCL off the
// HCAs or off the computed GID fails, naming the variable.
func TestCheckContainerNCCL(t *testing.T) {
	withGIDs := func(f *Facts) {
		v4 := netip.MustParseAddr("::ffff:10.0.0.5")
		for i := range f.Node.Devices {
			f.Node.Devices[i].Ports[0].GIDTableLen = 16
			f.Node.Devices[i].Ports[0].GIDs = []model.GID{
				{Index: 0, GID: netip.MustParseAddr("fe80::1"), Type: model.GIDTypeRoCEv1},
				{Index: 2, GID: v4, Type: model.GIDTypeRoCEv1}, {Index: 3, GID: v4, Type: model.GIDTypeRoCEv2},
			}
		}
		f.NCCL = config.Default().NCCL
	}
	cases := []struct {
		env    []string
		status Status
		detail string
	}{
		{nil, Pass, "sets no NCCL_* variable: NCCL takes the hook's /etc/nccl.conf"},
		{[]string{"PATH=/bin", "NCCL_IB_GID_INDEX=3", "NCCL_IB_HCA=mlx5_1:1"}, Pass, "sets NCCL_IB_GID_INDEX=3 NCCL_IB_HCA=mlx5_1:1, which agree with this node"},
		{[]string{"NCCL_IB_DISABLE=1"}, Fail, "sets NCCL_IB_DISABLE=1: NCCL leaves the HCAs alone and runs over TCP sockets"},
		{[]string{"NCCL_NET=Socket"}, Fail, "sets NCCL_NET=Socket: NCCL runs over TCP sockets, not the HCAs"},
		{[]string{"NCCL_IB_GID_INDEX=1"}, Fail, "sets NCCL_IB_GID_INDEX=1, which beats the node's 3"},
		{[]string{"NCCL_IB_HCA=mlx5_2,mlx5_3:1"}, Fail, "sets NCCL_IB_HCA=mlx5_2,mlx5_3:1, naming mlx5_2, mlx5_3, which this node does not have"},
		{[]string{"NCCL_IB_HCA==mlx5"}, Fail, "naming mlx5, which this node does not have"},
		{[]string{"NCCL_IB_HCA=mlx5"}, Pass, "which agree with this node"},
		{[]string{"NCCL_IB_HCA=^mlx5_9"}, Pass, "which agree with this node"},
	}
	for _, tc := range cases {
		f := goodFacts()
		withGIDs(&f)
		f.UserSpace = &UserSpaceFacts{Target: "container process 42", Env: tc.env, Choice: userspace.Choice{Mode: model.UserSpaceAuto}}
		got := find(Check(f), "nccl-env")
		if len(got) != 1 || got[0].Status != tc.status || got[0].Detail != "container process 42 "+tc.detail && !strings.Contains(got[0].Detail, tc.detail) {
			t.Errorf("env %q: %+v, want %s %q", tc.env, got, tc.status, tc.detail)
		}
		if tc.status == Fail && !strings.Contains(got[0].Fix, "remove it from the container's env") {
			t.Errorf("env %q: fix %q", tc.env, got[0].Fix)
		}
	}
}

// A running container's memlock: low without CAP_IPC_LOCK fails.
func TestCheckContainerMemlock(t *testing.T) {
	for _, tc := range []struct {
		p      ProcessFacts
		status Status
		detail string
	}{
		{ProcessFacts{PID: 7, Soft: 64 << 10, Hard: 64 << 10}, Fail, "container process 7 has memlock 64KiB/64KiB and no CAP_IPC_LOCK"},
		{ProcessFacts{PID: 7, Soft: 64 << 10, Hard: 64 << 10, IPCLock: true}, Pass, "has CAP_IPC_LOCK"},
		{ProcessFacts{PID: 7, Soft: config.Unlimited, Hard: config.Unlimited}, Pass, "may pin unlimited"},
		{ProcessFacts{PID: 7, ProcErr: "open /proc/7/limits: permission denied"}, Warn, "permission denied"},
	} {
		f := goodFacts()
		f.UserSpace = &UserSpaceFacts{Target: "container process 7", Process: &tc.p, Choice: userspace.Choice{Mode: model.UserSpaceAuto}}
		got := find(Check(f), "container-memlock")
		if len(got) != 1 || got[0].Status != tc.status || !strings.Contains(got[0].Detail, tc.detail) {
			t.Errorf("%+v: %+v, want %s %q", tc.p, got, tc.status, tc.detail)
		}
	}
	if got := find(Check(goodFacts()), "container-memlock"); len(got) != 0 {
		t.Errorf("a memlock check without a container: %+v", got)
	}
	status := []byte("Name:\tsleep\nCapInh:\t0000000000000000\nCapEff:\t0000000000004000\n")
	if caps, ok := capEff(status); !ok || caps != 1<<14 {
		t.Errorf("capEff = %x %v", caps, ok)
	}
}

// The host's stack mounted over an image's own is a warning that names
// the symptom.
func TestCheckUserSpaceHostOverImage(t *testing.T) {
	f := goodFacts()
	f.UserSpace = &UserSpaceFacts{Target: "image root /img",
		Image:  userspace.ImageStack{Libibverbs: "/usr/lib/libibverbs.so.1", Providers: map[string]int{"mlx5": 34}},
		Choice: userspace.Choice{Mode: model.UserSpaceHost, Source: "container env RDMA_CDI_USER_SPACE"}}
	got := find(Check(f), "user-space")
	if len(got) != 1 || got[0].Status != Warn || !strings.Contains(got[0].Detail, "MLX5_1.25") || !strings.Contains(got[0].Fix, "container env RDMA_CDI_USER_SPACE") {
		t.Errorf("%+v", got)
	}
}
