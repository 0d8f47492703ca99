package node

// The chart as rendered by the real helm, without a cluster: lint, what
// each mode installs, and the config it writes. The cluster-side tests
// (server-side validation, install, upgrade, uninstall) are in
// k8s_helm_test.go.

import (
	"cmp"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// dig walks maps (string keys) and lists (int indexes).
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func strs(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func TestHelmLint(t *testing.T) {
	e2e.RequireHelm(t)
	for _, mode := range e2e.ChartModes {
		cmd := exec.Command(e2e.HelmBinary(), "lint", "--strict", e2e.ChartDir(), "--set", "mode="+mode)
		cmd.Env = e2e.HelmEnv(t.TempDir())
		if out, se, err := e2e.Run(cmd); err != nil {
			t.Errorf("helm lint --strict, mode %s: %v\n%s%s", mode, err, out, se)
		}
	}
}

// TestHelmModes: each mode installs what it needs and no more: the same
// DaemonSet shape (host network, the host's /sys, /dev/infiniband, spec dir
// and what host-stack discovery reads, the install step), its command, the kubelet directories it talks
// through, and API access (RBAC, the per-node policy, DeviceClasses) in
// mode dra alone.
func TestHelmModes(t *testing.T) {
	for _, mode := range e2e.ChartModes {
		t.Run(mode, func(t *testing.T) {
			out, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", mode, nil))
			if err != nil {
				t.Fatal(err)
			}
			docs := e2e.RenderedDocs(t, out)
			var kinds []string
			for k, d := range docs {
				for range d {
					kinds = append(kinds, k)
				}
			}
			sort.Strings(kinds)
			// Every mode: the metrics' reviews (a role and its binding) and
			// the role a Prometheus binds.
			want := []string{"ClusterRole", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "ServiceAccount"}
			if mode == "dra" {
				want = []string{"ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding", "ConfigMap", "DaemonSet",
					"DeviceClass", "DeviceClass", "DeviceClass", "DeviceClass",
					"ServiceAccount", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
					"ValidatingAdmissionPolicyBinding"}
			}
			if !slices.Equal(kinds, want) {
				t.Fatalf("kinds %v, want %v", kinds, want)
			}
			roles := map[string][]string{}
			for _, r := range docs["ClusterRole"] {
				var grants []string
				for _, rule := range dig(r, "rules").([]any) {
					what := dig(rule, "resources")
					if what == nil {
						what = dig(rule, "nonResourceURLs")
					}
					for _, res := range strs(what) {
						grants = append(grants, res+":"+strings.Join(strs(dig(rule, "verbs")), ","))
					}
				}
				roles[dig(r, "metadata", "name").(string)] = grants
			}
			if got := roles["r-rdma-cdi-metrics-auth"]; !slices.Equal(got, []string{"tokenreviews:create", "subjectaccessreviews:create"}) {
				t.Errorf("metrics-auth role grants %v", got)
			}
			if got := roles["r-rdma-cdi-metrics-reader"]; !slices.Equal(got, []string{"/metrics:get"}) {
				t.Errorf("metrics-reader role grants %v", got)
			}
			pod := dig(docs["DaemonSet"][0], "spec", "template", "spec")
			if dig(pod, "hostNetwork") != true || dig(pod, "automountServiceAccountToken") != true {
				t.Errorf("hostNetwork %v, automountServiceAccountToken %v", dig(pod, "hostNetwork"), dig(pod, "automountServiceAccountToken"))
			}
			agent := dig(pod, "containers", 0)
			args := " " + strings.Join(strs(dig(agent, "args")), " ") + " "
			sub := map[string]string{"cdi": " watch ", "device-plugin": " device-plugin ", "dra": " dra-driver "}[mode]
			for _, want := range []string{sub, " --config=/etc/rdma-cdi/kubernetes.toml ", " --host-root=/host ", " --spec-host-root=/ ",
				" --hook-binary=/opt/rdma-cdi/bin/rdma-cdi-hook ", " --ready-file=/run/rdma-cdi/ready ", " --remove-on-exit=true "} {
				if !strings.Contains(args, want) {
					t.Errorf("args %q lack %q", args, want)
				}
			}
			wantCmd := map[string]string{"cdi": "/usr/local/bin/rdma-cdi-agent", "device-plugin": "/usr/local/bin/rdma-cdi-agent", "dra": "/usr/local/bin/rdma-cdi-dra"}[mode]
			if cmd := strs(dig(agent, "command"))[0]; cmd != wantCmd {
				t.Errorf("command %s in mode %s", cmd, mode)
			}
			hostPaths := map[string]string{}
			for _, v := range dig(pod, "volumes").([]any) {
				if p, ok := dig(v, "hostPath", "path").(string); ok {
					hostPaths[dig(v, "name").(string)] = p
				}
			}
			mounts := map[string]string{}
			for _, m := range dig(agent, "volumeMounts").([]any) {
				if p, ok := hostPaths[dig(m, "name").(string)]; ok {
					mounts[dig(m, "mountPath").(string)] = p
				}
			}
			wantMounts := map[string]string{"/sys": "/sys", "/dev/infiniband": "/dev/infiniband", "/var/run/cdi": "/var/run/cdi",
				"/host/etc/ld.so.cache": "/etc/ld.so.cache", "/host/etc/libibverbs.d": "/etc/libibverbs.d",
				"/host/lib": "/lib", "/host/lib64": "/lib64", "/host/usr/lib": "/usr/lib", "/host/usr/lib64": "/usr/lib64",
				"/etc/rdma-cdi": "/etc/rdma-cdi", "/run/rdma-cdi": "/run/rdma-cdi"}
			switch mode {
			case "device-plugin":
				wantMounts["/var/lib/kubelet/device-plugins"] = "/var/lib/kubelet/device-plugins"
			case "dra":
				wantMounts["/var/lib/kubelet/plugins/rdma.example.com"] = "/var/lib/kubelet/plugins/rdma.example.com"
				wantMounts["/var/lib/kubelet/plugins_registry"] = "/var/lib/kubelet/plugins_registry"
			}
			if !reflect.DeepEqual(mounts, wantMounts) {
				t.Errorf("host mounts of the agent %v, want %v", mounts, wantMounts)
			}
			script := strings.Join(strs(dig(pod, "initContainers", 0, "command")), " ")
			for _, want := range []string{"/host-bin/rdma-cdi", "/host-etc/kubernetes.toml"} {
				if !strings.Contains(script, want) {
					t.Errorf("install step does not write %s: %s", want, script)
				}
			}
			if hostPaths["host-bin"] != "/opt/rdma-cdi/bin" || hostPaths["host-config"] != "/etc/rdma-cdi" {
				t.Errorf("install step's host paths: %v", hostPaths)
			}
			if mode != "dra" {
				return
			}
			// Exactly these grants: no wildcard, no deletecollection, no
			// write but to slices and claim statuses.
			if grants, want := roles["r-rdma-cdi"], []string{"resourceslices:get,list,watch,create,update,delete", "resourceclaims:get", "resourceclaims/status:patch",
				"resourceclaims/driver:associated-node:patch", "deviceclasses:get,list", "nodes:get"}; !slices.Equal(grants, want) {
				t.Errorf("ClusterRole grants %v, want %v", grants, want)
			}
			if !strings.Contains(args, " --extended-resource=rdma/hca ") {
				t.Errorf("args %q lack --extended-resource", args)
			}
			match := dig(docs["ValidatingAdmissionPolicy"][0], "spec", "matchConditions", 0, "expression").(string)
			if !strings.Contains(match, `"system:serviceaccount:rdma-cdi:r-rdma-cdi"`) {
				t.Errorf("the per-node policy matches %s, not the agent's service account", match)
			}
		})
	}
}

// TestHelmConfigValues: config values become the config.toml the agent and
// the hooks read, decoded strictly as rdma-cdi does; cdi.vendor renames the
// DeviceClasses and their driver, cdi.spec_dir moves the spec's host dir.
func TestHelmConfigValues(t *testing.T) {
	out, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", "dra", map[string]any{"config": map[string]any{
		"cdi":   map[string]any{"vendor": "rdma.corp.test", "spec_dir": "/etc/cdi"},
		"nccl":  map[string]any{"exclude_hcas": []string{"mlx5_0"}, "roce_version": 2, "tunables": map[string]any{"NCCL_IB_TIMEOUT": "22"}},
		"hooks": map[string]any{"memlock": "unlimited"},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	docs := e2e.RenderedDocs(t, out)
	var cfg config.Config
	toml := dig(docs["ConfigMap"][0], "data", "config.toml").(string)
	if err := config.Decode([]byte(toml), &cfg); err != nil {
		t.Fatalf("config.toml does not decode: %v\n%s", err, toml)
	}
	if cfg.CDI.Vendor != "rdma.corp.test" || cfg.CDI.SpecDir != "/etc/cdi" || !slices.Equal(cfg.NCCL.ExcludeHCAs, []string{"mlx5_0"}) ||
		cfg.NCCL.RoCEVersion != 2 || cfg.NCCL.Tunables["NCCL_IB_TIMEOUT"] != "22" {
		t.Errorf("decoded config %+v\nfrom:\n%s", cfg, toml)
	}
	var names []string
	for _, c := range docs["DeviceClass"] {
		names = append(names, dig(c, "metadata", "name").(string))
		if cel := dig(c, "spec", "selectors", 0, "cel", "expression").(string); !strings.Contains(cel, `device.driver == "rdma.corp.test"`) ||
			!strings.Contains(cel, `device.attributes["rdma.corp.test"]`) {
			t.Errorf("class selector %s", cel)
		}
	}
	if !slices.Equal(names, []string{"hca.rdma.corp.test", "roce.rdma.corp.test", "shared.rdma.corp.test", "shared-pool.rdma.corp.test"}) {
		t.Errorf("DeviceClasses %v", names)
	}
	pod := dig(docs["DaemonSet"][0], "spec", "template", "spec")
	var specDirs []string
	for _, v := range dig(pod, "volumes").([]any) {
		if dig(v, "name") == "cdi" {
			specDirs = append(specDirs, dig(v, "hostPath", "path").(string))
		}
	}
	for _, m := range dig(pod, "containers", 0, "volumeMounts").([]any) {
		if dig(m, "name") == "cdi" {
			specDirs = append(specDirs, dig(m, "mountPath").(string))
		}
	}
	if !slices.Equal(specDirs, []string{"/etc/cdi", "/etc/cdi"}) {
		t.Errorf("spec dir volume and mount: %v", specDirs)
	}
	// A config change rolls the pods: the template carries its checksum.
	again, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", "dra", nil))
	if err != nil {
		t.Fatal(err)
	}
	sum := func(m string) any {
		return dig(e2e.RenderedDocs(t, m)["DaemonSet"][0], "spec", "template", "metadata", "annotations", "checksum/config")
	}
	if sum(out) == nil || sum(out) == sum(again) {
		t.Errorf("checksum/config %v with config, %v without", sum(out), sum(again))
	}
}

// TestHelmRefusesBadValues: the schema stops a bad mode, a relative host
// path, or a careless operator's read path that would hand the agent the
// host's / (or /etc, /proc, the kubelet's dir) again, before anything
// reaches a node; the templates stop, naming the value, a path that only
// looks narrow: a read path under the node's secrets, devices or
// runtime sockets, a bin or config dir that is a system directory (the
// install step mounts it read-write), a spec dir outside the CDI
// directories, a config file name the install step's shell would run.
func TestHelmRefusesBadValues(t *testing.T) {
	const image = "localhost/rdma-cdi:t"
	host := func(key string, v any) map[string]any {
		return e2e.AgentValues(image, "cdi", map[string]any{"host": map[string]any{key: v}})
	}
	readPaths := func(key string, paths ...string) map[string]any { return host(key, paths) }
	specDir := func(dir string) map[string]any {
		return e2e.AgentValues(image, "cdi", map[string]any{"config": map[string]any{"cdi": map[string]any{"spec_dir": dir}}})
	}
	for name, c := range map[string]struct {
		values map[string]any
		want   string // in helm's error
	}{
		"mode":                   {e2e.AgentValues(image, "sriov", nil), "/mode"},
		"image short name":       {e2e.AgentValues("rdma-cdi:t", "cdi", nil), "/image/repository"},
		"metrics host with YAML": {e2e.AgentValues(image, "cdi", map[string]any{"metrics": map[string]any{"host": "0.0.0.0\n  privileged: true"}}), "/metrics/host"},
		"kubelet dir with ..":    {host("kubeletDir", "/var/lib/kubelet/../../etc"), "/host/kubeletDir"},
		"kubelet dir with space": {host("kubeletDir", "/var/lib/kube let"), "/host/kubeletDir"},
		"image digest a tag":     {e2e.AgentValues(image, "cdi", map[string]any{"image": map[string]any{"repository": "localhost/rdma-cdi", "digest": "latest"}}), "/image/digest"},
		"bin dir":                {host("binDir", "opt/rdma-cdi"), "/host/binDir"},
		"resource":               {e2e.AgentValues(image, "device-plugin", map[string]any{"devicePlugin": map[string]any{"resources": []string{"rdma/hca"}}}), "/devicePlugin/resources/0"},
		"read path /":            {readPaths("extraReadPaths", "/"), "/host/extraReadPaths/0"},
		"read path /etc":         {readPaths("extraReadPaths", "/etc"), "/host/extraReadPaths/0"},
		"read path /proc":        {readPaths("extraReadPaths", "/proc"), "/host/extraReadPaths/0"},
		"read path /usr/":        {readPaths("libraryDirs", "/usr/"), "/host/libraryDirs/0"},
		"read path /usr/lib/..":  {readPaths("libraryDirs", "/usr/lib/.."), "/host/libraryDirs/0"},
		"read path kubelet":      {readPaths("extraReadPaths", "/var/lib/kubelet"), "/host/extraReadPaths/0"},
		"read path relative":     {readPaths("libraryDirs", "usr/lib"), "/host/libraryDirs/0"},

		// Under a sensitive directory, not only the directory itself.
		"read path /etc/kubernetes/pki":  {readPaths("extraReadPaths", "/etc/kubernetes/pki"), `host.extraReadPaths "/etc/kubernetes/pki"`},
		"read path kubelet pods":         {readPaths("extraReadPaths", "/var/lib/kubelet/pods"), `host.extraReadPaths "/var/lib/kubelet/pods"`},
		"read path /etc/kubernetes/x":    {readPaths("libraryDirs", "/etc/kubernetes/manifests"), `host.libraryDirs "/etc/kubernetes/manifests"`},
		"read path /root/keys":           {readPaths("extraReadPaths", "/root/keys"), `host.extraReadPaths "/root/keys"`},
		"read path /home/alice":          {readPaths("libraryDirs", "/home/alice/lib"), `host.libraryDirs "/home/alice/lib"`},
		"read path /etc/shadow":          {readPaths("extraReadPaths", "/etc/shadow"), `host.extraReadPaths "/etc/shadow"`},
		"read path /etc/shadow-":         {readPaths("extraReadPaths", "/etc/shadow-"), `host.extraReadPaths "/etc/shadow-"`},
		"read path /etc/ssh":             {readPaths("extraReadPaths", "/etc/ssh/ssh_host_ed25519_key"), `host.extraReadPaths "/etc/ssh/ssh_host_ed25519_key"`},
		"read path /proc/1/root":         {readPaths("extraReadPaths", "/proc/1/root"), `host.extraReadPaths "/proc/1/root"`},
		"read path /sys/kernel":          {readPaths("extraReadPaths", "/sys/kernel"), `host.extraReadPaths "/sys/kernel"`},
		"read path /sys":                 {readPaths("extraReadPaths", "/sys"), `host.extraReadPaths "/sys"`},
		"read path /dev/sda":             {readPaths("extraReadPaths", "/dev/sda"), `host.extraReadPaths "/dev/sda"`},
		"read path containerd socket":    {readPaths("extraReadPaths", "/run/containerd"), `host.extraReadPaths "/run/containerd"`},
		"read path /var/run/crio":        {readPaths("libraryDirs", "/var/run/crio"), `host.libraryDirs "/var/run/crio"`},
		"read path custom kubelet":       {e2e.AgentValues(image, "cdi", map[string]any{"host": map[string]any{"kubeletDir": "/data/kubelet", "extraReadPaths": []string{"/data/kubelet/pods"}}}), `host.extraReadPaths "/data/kubelet/pods"`},
		"read path with .. in a name":    {readPaths("extraReadPaths", "/usr/lib/x..y"), `host.extraReadPaths "/usr/lib/x..y"`},
		"config dir /":                   {host("configDir", "/"), "/host/configDir"},
		"config dir /etc":                {host("configDir", "/etc"), `host.configDir "/etc"`},
		"config dir /etc/":               {host("configDir", "/etc/"), `host.configDir "/etc/"`},
		"config dir /usr":                {host("configDir", "/usr"), `host.configDir "/usr"`},
		"config dir /var/lib":            {host("configDir", "/var/lib"), `host.configDir "/var/lib"`},
		"config dir /usr/local":          {host("configDir", "/usr/local"), `host.configDir "/usr/local"`},
		"config dir /etc/kubernetes/pki": {host("configDir", "/etc/kubernetes/pki"), `host.configDir "/etc/kubernetes/pki"`},
		"config dir /root/rdma":          {host("configDir", "/root/rdma-cdi"), `host.configDir "/root/rdma-cdi"`},
		"config dir kubelet":             {host("configDir", "/var/lib/kubelet"), `host.configDir "/var/lib/kubelet"`},
		"config dir /etc/rdma-cdi/..":    {host("configDir", "/etc/rdma-cdi/.."), "/host/configDir"},
		"config dir /etc/rdma..cdi":      {host("configDir", "/etc/rdma..cdi"), `host.configDir "/etc/rdma..cdi"`},
		"config dir relative":            {host("configDir", "etc/rdma-cdi"), "/host/configDir"},
		"bin dir /":                      {host("binDir", "/"), "/host/binDir"},
		"bin dir /opt":                   {host("binDir", "/opt"), `host.binDir "/opt"`},
		"bin dir /bin":                   {host("binDir", "/bin"), `host.binDir "/bin"`},
		"bin dir /sbin":                  {host("binDir", "/sbin"), `host.binDir "/sbin"`},
		"bin dir /lib64":                 {host("binDir", "/lib64"), `host.binDir "/lib64"`},
		"bin dir /boot":                  {host("binDir", "/boot"), `host.binDir "/boot"`},
		"bin dir /home":                  {host("binDir", "/home"), `host.binDir "/home"`},
		"bin dir /run":                   {host("binDir", "/run"), `host.binDir "/run"`},
		"bin dir /var/run":               {host("binDir", "/var/run"), `host.binDir "/var/run"`},
		"bin dir /usr/bin":               {host("binDir", "/usr/bin"), `host.binDir "/usr/bin"`},
		"bin dir /run/containerd":        {host("binDir", "/run/containerd"), `host.binDir "/run/containerd"`},
		"spec dir /etc":                  {specDir("/etc"), `config.cdi.spec_dir "/etc"`},
		"spec dir /":                     {specDir("/"), `config.cdi.spec_dir "/"`},
		"spec dir /var/lib/kubelet":      {specDir("/var/lib/kubelet"), `config.cdi.spec_dir "/var/lib/kubelet"`},
		"spec dir /etc/cdi/..":           {specDir("/etc/cdi/.."), `config.cdi.spec_dir "/etc/cdi/.."`},
		"spec dir /etc/cdi/../ssh":       {specDir("/etc/cdi/../ssh"), `config.cdi.spec_dir "/etc/cdi/../ssh"`},
		"spec dir /etc/cdix":             {specDir("/etc/cdix"), `config.cdi.spec_dir "/etc/cdix"`},
		"spec dir relative":              {specDir("etc/cdi"), `config.cdi.spec_dir "etc/cdi"`},
		"config file shell":              {host("configFile", "x.toml; touch /host-bin/pwned #"), "/host/configFile"},
		"config file command":            {host("configFile", "$(reboot).toml"), "/host/configFile"},
		"config file path":               {host("configFile", "../kubernetes.toml"), "/host/configFile"},
		"config file not toml":           {host("configFile", "kubernetes.conf"), "/host/configFile"},
	} {
		if _, err := e2e.HelmTemplate(t, c.values); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: helm template accepted %v, or refused it without %q (%v)", name, c.values, c.want, err)
		}
	}
}

// TestHelmAcceptsNarrowHostPaths: what TestHelmRefusesBadValues refuses
// stops there: narrow paths beside the refused ones render, where the
// values put them.
func TestHelmAcceptsNarrowHostPaths(t *testing.T) {
	out, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", "dra", map[string]any{
		"host": map[string]any{
			"binDir": "/usr/local/rdma-cdi/bin/", "configDir": "/etc/rdma-cdi-site", "configFile": "site_v2.toml",
			"libraryDirs":    []string{"/usr/lib", "/usr/local/lib", "/opt/mellanox/lib"},
			"extraReadPaths": []string{"/etc/infiniband", "/etc/kubernetes-not", "/etc/sshd-banner-dir", "/runner/lib"},
		},
		"config": map[string]any{"cdi": map[string]any{"spec_dir": "/var/run/cdi/rdma"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	pod := dig(e2e.RenderedDocs(t, out)["DaemonSet"][0], "spec", "template", "spec")
	var paths []string
	for _, v := range dig(pod, "volumes").([]any) {
		if p, ok := dig(v, "hostPath", "path").(string); ok {
			paths = append(paths, p)
		}
	}
	for _, want := range []string{"/usr/local/rdma-cdi/bin", "/etc/rdma-cdi-site", "/opt/mellanox/lib", "/etc/kubernetes-not", "/runner/lib", "/var/run/cdi/rdma"} {
		if !slices.Contains(paths, want) {
			t.Errorf("no host path %s among %v", want, paths)
		}
	}
	script := strings.Join(strs(dig(pod, "initContainers", 0, "command")), "\n")
	if !strings.Contains(script, "'/host-etc/site_v2.toml'") {
		t.Errorf("the install step does not single-quote host.configFile:\n%s", script)
	}
}

// TestHelmUserNodeSelectorTermsKeepControlPlaneExclusion: Helm replaces
// the default nodeSelectorTerms with a user's list; every term the chart
// renders still keeps the agent off control-plane nodes (the terms are
// ORed: one without the exclusion would let it on), the user's own
// expressions and fields kept, and so does a null affinity.
func TestHelmUserNodeSelectorTermsKeepControlPlaneExclusion(t *testing.T) {
	gpu := map[string]any{"key": "nvidia.com/gpu.present", "operator": "In", "values": []string{"true"}}
	field := map[string]any{"key": "metadata.name", "operator": "NotIn", "values": []string{"login-0"}}
	for name, affinity := range map[string]any{
		"user terms": map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
			"nodeSelectorTerms": []any{
				map[string]any{"matchExpressions": []any{gpu}},
				map[string]any{"matchFields": []any{field}},
			},
		}}},
		"null affinity": nil,
		"no node affinity": map[string]any{"nodeAffinity": nil, "podAntiAffinity": map[string]any{
			"preferredDuringSchedulingIgnoredDuringExecution": []any{},
		}},
		"empty terms": map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
			"nodeSelectorTerms": []any{},
		}}},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", "dra", map[string]any{"affinity": affinity}))
			if err != nil {
				t.Fatal(err)
			}
			pod := dig(e2e.RenderedDocs(t, out)["DaemonSet"][0], "spec", "template", "spec")
			checkPodLeastPrivilege(t, pod)
			terms := asList(dig(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"))
			if name != "user terms" {
				return
			}
			if len(terms) != 2 {
				t.Fatalf("node selector terms %v, want the user's two", terms)
			}
			if e := asList(dig(terms[0], "matchExpressions")); len(e) != 2 || dig(e[0], "key") != "nvidia.com/gpu.present" {
				t.Errorf("first term's expressions %v, want the user's, then the exclusion", e)
			}
			if f := asList(dig(terms[1], "matchFields")); len(f) != 1 || dig(f[0], "key") != "metadata.name" {
				t.Errorf("second term's fields %v, want the user's", f)
			}
		})
	}
}

// TestHelmMetrics: metrics on (the default) give the agent its address, the
// port and the scrape annotations, and never the host's PID namespace (a
// container's liveness is its cgroup's, under /sys); off, none of them.
// Either way the probes are HTTP on the probes' own loopback listener
// (--probe-address=127.0.0.1:probes.port), whatever metrics.host says, and
// in every mode the agent alone mounts the host's /run/rdma-cdi, writable,
// at the same path (the hooks' socket, the ready file).
func TestHelmMetrics(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		out, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", "device-plugin", map[string]any{
			"metrics": map[string]any{"enabled": enabled, "port": 9555},
		}))
		if err != nil {
			t.Fatal(err)
		}
		ds := e2e.RenderedDocs(t, out)["DaemonSet"][0]
		pod := dig(ds, "spec", "template", "spec")
		agent := dig(pod, "containers", 0)
		args := strings.Join(strs(dig(agent, "args")), " ")
		ann, _ := dig(ds, "spec", "template", "metadata", "annotations").(map[string]any)
		hostPID, _ := dig(pod, "hostPID").(bool)
		checkProbes(t, fmt.Sprintf("metrics.enabled=%v", enabled), agent)
		if enabled {
			if !strings.Contains(args, "--metrics-address=:9555") || ann["prometheus.io/port"] != "9555" || hostPID ||
				fmt.Sprint(dig(agent, "ports", 0, "containerPort")) != "9555" {
				t.Errorf("metrics on: args %s, annotations %v, hostPID %v", args, ann, hostPID)
			}
		} else if strings.Contains(args, "--metrics-address") || ann["prometheus.io/scrape"] != nil || hostPID {
			t.Errorf("metrics off: args %s, annotations %v, hostPID %v", args, ann, hostPID)
		}
		if enabled {
			for host, want := range map[string]string{"10.0.0.5": "10.0.0.5:9555", "fd00::5": "[fd00::5]:9555"} {
				out, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", "cdi", map[string]any{
					"metrics": map[string]any{"port": 9555, "host": host},
				}))
				if err != nil {
					t.Fatal(err)
				}
				agent := dig(e2e.RenderedDocs(t, out)["DaemonSet"][0], "spec", "template", "spec", "containers", 0)
				if args := strs(dig(agent, "args")); !slices.Contains(args, "--metrics-address="+want) {
					t.Errorf("metrics.host %s: args %v", host, args)
				}
				checkProbes(t, "metrics.host "+host, agent)
			}
		}
		// Every mode has the run volume, metrics on or off (the ready file).
		for _, mode := range e2e.ChartModes {
			out, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", mode, map[string]any{"metrics": map[string]any{"enabled": enabled}}))
			if err != nil {
				t.Fatal(err)
			}
			checkRunVolume(t, fmt.Sprintf("mode %s, metrics.enabled=%v", mode, enabled), dig(e2e.RenderedDocs(t, out)["DaemonSet"][0], "spec", "template", "spec"))
		}
	}
}

// checkRunVolume: the pod has the host's /run/rdma-cdi as volume "run"
// (made when missing), and the agent alone mounts it, writable, at the same
// path: the hooks the engines run on the host send their reports to the
// default hook socket there, where the agent listens, and the agent writes
// its ready file there (the exec probe's, with metrics off).
func checkRunVolume(t *testing.T, what string, pod any) {
	t.Helper()
	const runDir = "/run/rdma-cdi"
	if dir := filepath.Dir(config.Default().Metrics.HookSocket); dir != runDir {
		t.Fatalf("the default hook socket is in %s, not %s: the chart's volume follows it", dir, runDir)
	}
	var runs []any
	volumes, _ := dig(pod, "volumes").([]any)
	for _, v := range volumes {
		if dig(v, "name") == "run" || dig(v, "hostPath", "path") == runDir {
			runs = append(runs, v)
		}
	}
	want := map[string]any{"name": "run", "hostPath": map[string]any{"path": runDir, "type": "DirectoryOrCreate"}}
	if len(runs) != 1 || !reflect.DeepEqual(runs[0], want) {
		t.Errorf("%s: volumes named run or of the host's %s: %v; want exactly %v", what, runDir, runs, want)
	}
	containers, _ := dig(pod, "containers").([]any)
	if len(containers) == 0 {
		t.Fatalf("%s: the DaemonSet has no container", what)
	}
	agent := containers[0]
	var mounts []any
	agentMounts, _ := dig(agent, "volumeMounts").([]any)
	for _, m := range agentMounts {
		if dig(m, "name") == "run" || dig(m, "mountPath") == runDir {
			mounts = append(mounts, m)
		}
	}
	// Not readOnly: the agent binds the socket and writes the ready file.
	wantMount := map[string]any{"name": "run", "mountPath": runDir}
	if len(mounts) == 1 && dig(mounts[0], "readOnly") == false {
		m := maps.Clone(mounts[0].(map[string]any))
		delete(m, "readOnly")
		mounts[0] = m
	}
	if len(mounts) != 1 || !reflect.DeepEqual(mounts[0], wantMount) {
		t.Errorf("%s: the agent's mounts of volume run or at %s: %v; want exactly %v (writable)", what, runDir, mounts, wantMount)
	}
	if args := strs(dig(agent, "args")); !slices.Contains(args, "--ready-file="+runDir+"/ready") {
		t.Errorf("%s: agent args %v; want --ready-file=%s/ready, in the run volume", what, args, runDir)
	}
	inits, _ := dig(pod, "initContainers").([]any)
	for _, c := range append(slices.Clone(inits), containers[1:]...) {
		ms, _ := dig(c, "volumeMounts").([]any)
		for _, m := range ms {
			if dig(m, "name") == "run" {
				t.Errorf("%s: container %v mounts volume run; only the agent listens there", what, dig(c, "name"))
			}
		}
	}
}

// forbiddenHostPaths are host paths no mode may mount: each hands the agent
// far more of the node than it reads (the kubelet's keys, every pod's
// tokens, other drivers' and CSI's sockets, the host's processes).
var forbiddenHostPaths = []string{"/", "/proc", "/etc", "/usr", "/var", "/run", "/var/run", "/var/lib",
	"/var/lib/kubelet", "/var/lib/kubelet/plugins", "/var/lib/kubelet/pods", "/dev", "/root", "/boot"}

// forbiddenHostTrees are host trees no mount may reach into: credentials
// and other pods' data.
var forbiddenHostTrees = []string{"/etc/kubernetes", "/var/lib/kubelet/pods", "/var/lib/kubelet/pki", "/var/lib/etcd",
	"/root", "/home", "/proc", "/boot", "/etc/ssh", "/var/lib/containerd", "/var/lib/containers", "/var/lib/docker"}

// writableHostPaths are the only host paths the agent may mount
// read-write, by container: its outputs and sockets (SECURITY.md's table).
var writableHostPaths = map[string][]string{
	"install": {"/opt/rdma-cdi/bin", "/etc/rdma-cdi"},
	"agent": {"/var/run/cdi", "/run/rdma-cdi", "/var/lib/kubelet/device-plugins", "/var/lib/kubelet/plugins/rdma.example.com",
		"/var/lib/kubelet/plugins_registry", "/var/run/nri"},
}

// underAny tells whether p is one of trees or inside one.
func underAny(p string, trees []string) bool {
	return slices.ContainsFunc(trees, func(tree string) bool { return p == tree || strings.HasPrefix(p, tree+"/") })
}

// TestHelmLeastPrivilege renders every mode, with metrics on and off, and
// more host paths and settings than the defaults, and fails on any
// privileged container, capability kept or added, writable root file
// system, privilege escalation, seccomp other than RuntimeDefault, a broad
// host path or one inside a credentials tree, a host path mounted
// read-write but the named outputs, /sys without recursiveReadOnly, the
// host's PID or IPC namespace, a toleration of every taint, or a scheduling
// that reaches control-plane nodes.
func TestHelmLeastPrivilege(t *testing.T) {
	for _, mode := range e2e.ChartModes {
		for _, metricsOn := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/metrics=%v", mode, metricsOn), func(t *testing.T) {
				values := map[string]any{"metrics": map[string]any{"enabled": metricsOn, "auth": "kubernetes"},
					"host": map[string]any{"extraReadPaths": []any{"/etc/infiniband"}, "libraryDirs": []any{"/usr/lib", "/opt/mellanox/lib"}}}
				if mode != "dra" {
					values["config"] = map[string]any{"device_plugin": map[string]any{"allocation": "annotations"}}
				}
				out, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", mode, values))
				if err != nil {
					t.Fatal(err)
				}
				pod := dig(e2e.RenderedDocs(t, out)["DaemonSet"][0], "spec", "template", "spec")
				checkPodLeastPrivilege(t, pod)
			})
		}
	}
}

func checkPodLeastPrivilege(t *testing.T, pod any) {
	t.Helper()
	for _, ns := range []string{"hostPID", "hostIPC"} {
		if dig(pod, ns) == true {
			t.Errorf("%s: true", ns)
		}
	}
	podSeccomp := dig(pod, "securityContext", "seccompProfile", "type")
	var containers []any
	for _, list := range []string{"initContainers", "containers"} {
		if l, ok := dig(pod, list).([]any); ok {
			containers = append(containers, l...)
		}
	}
	for _, c := range containers {
		name, sc := dig(c, "name"), dig(c, "securityContext")
		if dig(sc, "privileged") != false || dig(sc, "allowPrivilegeEscalation") != false || dig(sc, "readOnlyRootFilesystem") != true {
			t.Errorf("container %s: privileged %v, allowPrivilegeEscalation %v, readOnlyRootFilesystem %v", name,
				dig(sc, "privileged"), dig(sc, "allowPrivilegeEscalation"), dig(sc, "readOnlyRootFilesystem"))
		}
		if drop, _ := dig(sc, "capabilities", "drop").([]any); len(drop) != 1 || drop[0] != "ALL" {
			t.Errorf("container %s drops %v, want [ALL]", name, drop)
		}
		if add := dig(sc, "capabilities", "add"); add != nil {
			t.Errorf("container %s adds capabilities %v: no mode needs one (SECURITY.md)", name, add)
		}
		if seccomp := cmp.Or(dig(sc, "seccompProfile", "type"), podSeccomp); seccomp != "RuntimeDefault" {
			t.Errorf("container %s: seccomp %v, want RuntimeDefault", name, seccomp)
		}
	}
	hostPaths := map[string]string{}
	for _, v := range dig(pod, "volumes").([]any) {
		p, ok := dig(v, "hostPath", "path").(string)
		if !ok {
			continue
		}
		p = filepath.Clean(p)
		hostPaths[fmt.Sprint(dig(v, "name"))] = p
		if slices.Contains(forbiddenHostPaths, p) || underAny(p, forbiddenHostTrees) {
			t.Errorf("volume %s mounts the host's %s", dig(v, "name"), p)
		}
	}
	// Every host path read-only, /sys all the way down, but the named outputs.
	for _, c := range containers {
		allowed := writableHostPaths["agent"]
		if dig(c, "name") == "install" {
			allowed = writableHostPaths["install"]
		}
		for _, m := range asList(dig(c, "volumeMounts")) {
			p, ok := hostPaths[fmt.Sprint(dig(m, "name"))]
			if !ok {
				continue
			}
			if dig(m, "readOnly") != true && !slices.Contains(allowed, p) {
				t.Errorf("container %s mounts the host's %s read-write", dig(c, "name"), p)
			}
			if p == "/sys" && dig(m, "recursiveReadOnly") != "Enabled" {
				t.Errorf("container %s mounts /sys without recursiveReadOnly: its cgroup and other submounts stay writable", dig(c, "name"))
			}
		}
	}
	for _, tol := range asList(dig(pod, "tolerations")) {
		if dig(tol, "key") == nil && dig(tol, "operator") == "Exists" {
			t.Errorf("toleration %v tolerates every taint", tol)
		}
	}
	terms := asList(dig(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"))
	if len(terms) == 0 {
		t.Error("no required node affinity: the agent would run on control-plane nodes")
	}
	for _, term := range terms {
		excluded := false
		for _, e := range asList(dig(term, "matchExpressions")) {
			excluded = excluded || dig(e, "key") == "node-role.kubernetes.io/control-plane" && dig(e, "operator") == "DoesNotExist"
		}
		if !excluded {
			t.Errorf("node selector term %v does not exclude control-plane nodes", term)
		}
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// renderedConfig decodes the config.toml of a rendering strictly, as
// rdma-cdi does, over the defaults.
func renderedConfig(t *testing.T, out string) config.Config {
	t.Helper()
	cfg := config.Default()
	toml := dig(e2e.RenderedDocs(t, out)["ConfigMap"][0], "data", "config.toml").(string)
	if err := config.Decode([]byte(toml), &cfg); err != nil {
		t.Fatalf("config.toml does not decode: %v\n%s", err, toml)
	}
	return cfg
}

// TestHelmPodNetworkPrivilege: podNetwork.enabled adds a pod-network
// container, and it alone holds CAP_NET_ADMIN, CAP_NET_RAW and
// CAP_SYS_ADMIN (SECURITY.md says why): it runs rdma-cdi-agent
// pod-network-worker with the netns directory read-only (HostToContainer)
// and the socket's emptyDir, and nothing else: no port, no service account
// token, no /sys, no NRI socket, no env. The dra or device-plugin
// container keeps no capability: it gets the NRI socket's directory, the
// socket's emptyDir, the worker's socket on its command line and the
// service account's token, mounted into it alone (the pod mounts none);
// the device plugin also the kubelet's pod-resources directory read-only,
// and its state in /run/rdma-cdi. Everything else stays as least privilege
// wants it. The value reaches the config file as pod_network.enabled,
// where the agent and the container hooks read it. Mode cdi refuses the
// value.
func TestHelmPodNetworkPrivilege(t *testing.T) {
	const socketDir, tokenDir = "/run/rdma-cdi-netns", "/var/run/secrets/kubernetes.io/serviceaccount"
	for _, mode := range []string{"dra", "device-plugin"} {
		t.Run(mode, func(t *testing.T) {
			values := e2e.AgentValues("localhost/rdma-cdi:t", mode, map[string]any{"podNetwork": map[string]any{"enabled": true}})
			out, err := e2e.HelmTemplate(t, values)
			if err != nil {
				t.Fatal(err)
			}
			pod := dig(e2e.RenderedDocs(t, out)["DaemonSet"][0], "spec", "template", "spec")
			for _, c := range asList(dig(pod, "initContainers")) {
				if add := dig(c, "securityContext", "capabilities", "add"); add != nil {
					t.Errorf("init container %s adds %v", dig(c, "name"), add)
				}
			}
			if dig(pod, "automountServiceAccountToken") != false {
				t.Errorf("automountServiceAccountToken %v: the token would reach every container", dig(pod, "automountServiceAccountToken"))
			}
			containers := asList(dig(pod, "containers"))
			if len(containers) != 2 || dig(containers[0], "name") != mode || dig(containers[1], "name") != "pod-network" {
				t.Fatalf("containers %v, want %s and pod-network", containers, mode)
			}
			agent, worker := containers[0], containers[1]
			volumes := map[string]any{}
			for _, v := range asList(dig(pod, "volumes")) {
				volumes[fmt.Sprint(dig(v, "name"))] = v
			}
			mountsOf := func(c any) map[string]any {
				mounts := map[string]any{}
				for _, m := range asList(dig(c, "volumeMounts")) {
					mounts[fmt.Sprint(dig(m, "mountPath"))] = m
				}
				return mounts
			}

			if add := dig(agent, "securityContext", "capabilities", "add"); add != nil {
				t.Errorf("%s container adds %v, want none", mode, add)
			}
			if drop := fmt.Sprint(dig(agent, "securityContext", "capabilities", "drop")); drop != "[ALL]" {
				t.Errorf("%s container drops %s", mode, drop)
			}
			mounts := mountsOf(agent)
			if mounts["/var/run/netns"] != nil {
				t.Errorf("the %s container mounts the netns directory: %v", mode, mounts["/var/run/netns"])
			}
			if mounts["/var/run/nri"] == nil {
				t.Errorf("no mount of the NRI socket's directory: %v", mounts)
			}
			if mounts[socketDir] == nil {
				t.Errorf("the %s container does not mount the worker's socket directory %s", mode, socketDir)
			}
			token := mounts[tokenDir]
			if dig(token, "readOnly") != true || dig(volumes[fmt.Sprint(dig(token, "name"))], "projected", "sources", 0, "serviceAccountToken", "path") != "token" {
				t.Errorf("the %s container's token mount %v: want the projected service account token, read-only", mode, token)
			}
			if args := strs(dig(agent, "args")); !slices.Contains(args, "--pod-network-worker-socket="+socketDir+"/worker.sock") {
				t.Errorf("the %s container is not told the worker's socket: %v", mode, args)
			}
			podResources := mounts["/var/lib/kubelet/pod-resources"]
			if mode == "device-plugin" && dig(podResources, "readOnly") != true {
				t.Errorf("pod-resources mount %v: want read-only", podResources)
			}
			if mode == "dra" && podResources != nil {
				t.Errorf("the DRA driver mounts pod-resources: %v", podResources)
			}

			if add := fmt.Sprint(dig(worker, "securityContext", "capabilities", "add")); add != "[NET_ADMIN NET_RAW SYS_ADMIN]" {
				t.Errorf("pod-network container adds %s, want [NET_ADMIN NET_RAW SYS_ADMIN]", add)
			}
			if drop := fmt.Sprint(dig(worker, "securityContext", "capabilities", "drop")); drop != "[ALL]" {
				t.Errorf("pod-network container drops %s", drop)
			}
			if cmd, args := strs(dig(worker, "command")), strs(dig(worker, "args")); !slices.Equal(cmd, []string{"/usr/local/bin/rdma-cdi-agent"}) ||
				!slices.Contains(args, "pod-network-worker") || !slices.Contains(args, "--socket="+socketDir+"/worker.sock") ||
				slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "metrics") || strings.Contains(a, "probe") }) {
				t.Errorf("pod-network container runs %v %v, want rdma-cdi-agent pod-network-worker on the shared socket, no listener", cmd, args)
			}
			for _, key := range []string{"ports", "env", "readinessProbe"} {
				if v := dig(worker, key); v != nil {
					t.Errorf("pod-network container has %s %v", key, v)
				}
			}
			// Its liveness is a ping on the socket it shares, not a listener.
			wantPing := []string{"/usr/local/bin/rdma-cdi-agent", "pod-network-worker", "--socket=" + socketDir + "/worker.sock", "--ping=5s"}
			if ping := strs(dig(worker, "livenessProbe", "exec", "command")); !slices.Equal(ping, wantPing) {
				t.Errorf("pod-network container's liveness probe runs %v, want %v", ping, wantPing)
			}
			wm := mountsOf(worker)
			if m := wm["/var/run/netns"]; dig(m, "readOnly") != true || dig(m, "mountPropagation") != "HostToContainer" {
				t.Errorf("pod-network container's netns mount %v: want read-only, HostToContainer", m)
			}
			if len(wm) != 2 || wm[socketDir] == nil {
				t.Errorf("pod-network container mounts %v, want the netns directory and %s alone", slices.Sorted(maps.Keys(wm)), socketDir)
			}
			if dig(volumes[fmt.Sprint(dig(wm[socketDir], "name"))], "emptyDir", "medium") != "Memory" {
				t.Errorf("the socket's volume %v: want an emptyDir in memory", volumes[fmt.Sprint(dig(wm[socketDir], "name"))])
			}
			// pod_network.enabled is in the config file, which the agent
			// and the container hooks read: a hook that did not know would
			// let a pod's container start before its sandbox has its
			// interfaces (after a reboot or this install, no list yet).
			if cfg := renderedConfig(t, out); !cfg.PodNetwork.Enabled || cfg.PodNetwork.StateDir != "/run/rdma-cdi" {
				t.Errorf("config.toml's pod_network %+v, want enabled, state_dir /run/rdma-cdi", cfg.PodNetwork)
			}
			if strings.Contains(out, "- --pod-network\n") {
				t.Error("the agent is given --pod-network: the file alone, which the hooks read, must say it")
			}
			off, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", mode, nil))
			if err != nil {
				t.Fatal(err)
			}
			if cfg := renderedConfig(t, off); cfg.PodNetwork.Enabled {
				t.Error("pod_network.enabled in config.toml without podNetwork.enabled")
			}
		})
	}
	// The config key is the chart's to write: one that disagrees with
	// podNetwork.enabled, or a state dir the agent does not mount, stops
	// the render.
	for name, values := range map[string]map[string]any{
		"config on, value off": {"config": map[string]any{"pod_network": map[string]any{"enabled": true}}},
		"config off, value on": {"podNetwork": map[string]any{"enabled": true}, "config": map[string]any{"pod_network": map[string]any{"enabled": false}}},
		"another state dir":    {"podNetwork": map[string]any{"enabled": true}, "config": map[string]any{"pod_network": map[string]any{"state_dir": "/var/lib/x"}}},
	} {
		if _, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", "dra", values)); err == nil || !strings.Contains(err.Error(), "config.pod_network.") {
			t.Errorf("%s: %v, want a refusal naming config.pod_network", name, err)
		}
	}
	// The socket's directory is mounted read-write: only NRI's may be.
	for key, bad := range map[string]string{"nriSocket": "/x.sock", "netnsDir": "/run/../etc"} {
		v := e2e.AgentValues("localhost/rdma-cdi:t", "dra", map[string]any{"podNetwork": map[string]any{"enabled": true, key: bad}})
		if _, err := e2e.HelmTemplate(t, v); err == nil {
			t.Errorf("podNetwork.%s %s accepted", key, bad)
		}
	}
	if _, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", "cdi", map[string]any{"podNetwork": map[string]any{"enabled": true}})); err == nil || !strings.Contains(err.Error(), "needs mode dra or device-plugin") {
		t.Errorf("mode cdi with podNetwork.enabled: %v, want a refusal", err)
	}
}

// TestHelmPodAddresses: with podNetwork.enabled, each node registers the
// addresses it hands out as Leases in the release's namespace: a Role on
// Leases there (nothing else, nowhere else), get on Nodes (their owner; the
// DRA driver's role has it already), the service account's token, the
// node's name and namespace from the downward API, and podNetwork.pools,
// blockSize and reclaimAfter in config.toml, as rdma-cdi decodes them.
// Without podNetwork.enabled none of it is rendered, and the config keys
// are the chart's to write.
func TestHelmPodAddresses(t *testing.T) {
	for _, mode := range []string{"dra", "device-plugin"} {
		t.Run(mode, func(t *testing.T) {
			out, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", mode, map[string]any{
				"metrics":    map[string]any{"auth": "none"},
				"podNetwork": map[string]any{"enabled": true, "pools": []string{"10.0.61.128/25", "fd00::/120"}, "blockSize": "/28", "reclaimAfter": "90m"},
			}))
			if err != nil {
				t.Fatal(err)
			}
			docs := e2e.RenderedDocs(t, out)
			if n := len(docs["Role"]); n != 1 {
				t.Fatalf("%d Roles, want the pod addresses' one", n)
			}
			role := docs["Role"][0]
			if ns := dig(role, "metadata", "namespace"); ns != e2e.AgentNamespace {
				t.Errorf("Role in namespace %v", ns)
			}
			rules := asList(dig(role, "rules"))
			if len(rules) != 1 || fmt.Sprint(dig(rules[0], "apiGroups")) != "[coordination.k8s.io]" || fmt.Sprint(dig(rules[0], "resources")) != "[leases]" ||
				fmt.Sprint(dig(rules[0], "verbs")) != "[get list watch create update delete]" {
				t.Errorf("Role rules %v", rules)
			}
			binding := docs["RoleBinding"][0]
			if dig(binding, "roleRef", "name") != dig(role, "metadata", "name") || dig(binding, "subjects", 0, "name") != "r-rdma-cdi" {
				t.Errorf("RoleBinding %v", binding)
			}
			nodesGet := false
			for _, r := range docs["ClusterRole"] {
				for _, rule := range asList(dig(r, "rules")) {
					if fmt.Sprint(dig(rule, "resources")) == "[nodes]" && fmt.Sprint(dig(rule, "verbs")) == "[get]" {
						nodesGet = true
					}
				}
			}
			if !nodesGet {
				t.Error("no ClusterRole grants get on nodes: the Leases' owner")
			}
			pod := dig(docs["DaemonSet"][0], "spec", "template", "spec")
			agent := asList(dig(pod, "containers"))[0]
			tokenMounted := false
			for _, m := range asList(dig(agent, "volumeMounts")) {
				tokenMounted = tokenMounted || dig(m, "mountPath") == "/var/run/secrets/kubernetes.io/serviceaccount"
			}
			if !tokenMounted {
				t.Error("no service account token in the agent's container for the Leases")
			}
			env := map[string]any{}
			for _, e := range asList(dig(agent, "env")) {
				env[fmt.Sprint(dig(e, "name"))] = dig(e, "valueFrom", "fieldRef", "fieldPath")
			}
			if env["NODE_NAME"] != "spec.nodeName" || env["POD_NAMESPACE"] != "metadata.namespace" {
				t.Errorf("env %v, want NODE_NAME and POD_NAMESPACE from the downward API", env)
			}
			args := " " + strings.Join(strs(dig(agent, "args")), " ") + " "
			for _, want := range []string{" --namespace=$(POD_NAMESPACE) ", " --node-name=$(NODE_NAME) "} {
				if !strings.Contains(args, want) {
					t.Errorf("args %q lack %q", args, want)
				}
			}
			cfg := renderedConfig(t, out).PodNetwork
			if pools, _ := cfg.Pools.MarshalText(); string(pools) != "10.0.61.128/25,fd00::/120" || cfg.BlockSize.String() != "/28" ||
				cfg.ReclaimAfter.Duration != 90*time.Minute {
				t.Errorf("config.toml's pools %s, block size %s, reclaim after %v", pools, cfg.BlockSize, cfg.ReclaimAfter)
			}
			off, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", mode, map[string]any{"podNetwork": map[string]any{"pools": []string{"10.0.61.128/25"}}}))
			if err != nil {
				t.Fatal(err)
			}
			if docs := e2e.RenderedDocs(t, off); len(docs["Role"]) != 0 || strings.Contains(off, "POD_NAMESPACE") || len(renderedConfig(t, off).PodNetwork.Pools) != 0 {
				t.Error("pod addresses rendered without podNetwork.enabled")
			}
		})
	}
	for key, v := range map[string]any{"pools": []string{"10.0.61.0/24"}, "block_size": 8, "reclaim_after": "2h"} {
		values := map[string]any{"podNetwork": map[string]any{"enabled": true}, "config": map[string]any{"pod_network": map[string]any{key: v}}}
		if _, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", "dra", values)); err == nil || !strings.Contains(err.Error(), "config.pod_network."+key+": set podNetwork.") {
			t.Errorf("config.pod_network.%s: %v, want a refusal naming the value to set", key, err)
		}
	}
	for key, bad := range map[string]any{"blockSize": "sixteen", "reclaimAfter": "forever", "pools": "10.0.61.0/24"} {
		v := e2e.AgentValues("localhost/rdma-cdi:t", "dra", map[string]any{"podNetwork": map[string]any{"enabled": true, key: bad}})
		if _, err := e2e.HelmTemplate(t, v); err == nil {
			t.Errorf("podNetwork.%s %v accepted", key, bad)
		}
	}
}

// TestHelmImageDigest: image.digest pins the agent's image (every
// container's) as repository@digest, whatever the tag says.
func TestHelmImageDigest(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	out, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", "dra", map[string]any{
		"image": map[string]any{"repository": "localhost/rdma-cdi", "tag": "t", "digest": digest}}))
	if err != nil {
		t.Fatal(err)
	}
	pod := dig(e2e.RenderedDocs(t, out)["DaemonSet"][0], "spec", "template", "spec")
	for _, list := range []string{"initContainers", "containers"} {
		for _, c := range asList(dig(pod, list)) {
			if got := dig(c, "image"); got != "localhost/rdma-cdi@"+digest {
				t.Errorf("container %s: image %v, want localhost/rdma-cdi@%s", dig(c, "name"), got, digest)
			}
		}
	}
}

// checkProbes: the agent's readiness and liveness probes ask /readyz and
// /healthz of the probes' listener on the node's loopback, which the agent
// is told to bind (the chart's default probes.port, 9478).
func checkProbes(t *testing.T, what string, agent any) {
	t.Helper()
	if args := strs(dig(agent, "args")); !slices.Contains(args, "--probe-address=127.0.0.1:9478") {
		t.Errorf("%s: args %v, want --probe-address=127.0.0.1:9478", what, args)
	}
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		get := dig(agent, probe, "httpGet")
		if dig(get, "path") != path || dig(get, "host") != "127.0.0.1" || fmt.Sprint(dig(get, "port")) != "9478" {
			t.Errorf("%s: %s %v, want GET %s of 127.0.0.1:9478", what, probe, dig(agent, probe), path)
		}
	}
}

// TestHelmNodeFeatureDiscovery: nodeFeatureDiscovery.enabled gives the
// agent NFD's features.d directory, read-write, and the flag naming its
// file there; nothing else changes (no capability, no API access). Off by
// default. The directory may be NFD's own under /etc/kubernetes, never
// another path there or under the other sensitive trees, and the file's
// config key is the chart's to set.
func TestHelmNodeFeatureDiscovery(t *testing.T) {
	const dir = "/etc/kubernetes/node-feature-discovery/features.d"
	agentOf := func(out string) (agent, pod any) {
		pod = dig(e2e.RenderedDocs(t, out)["DaemonSet"][0], "spec", "template", "spec")
		return asList(dig(pod, "containers"))[0], pod
	}
	for _, mode := range e2e.ChartModes {
		t.Run(mode, func(t *testing.T) {
			out, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", mode, map[string]any{"nodeFeatureDiscovery": map[string]any{"enabled": true}}))
			if err != nil {
				t.Fatal(err)
			}
			agent, pod := agentOf(out)
			if args := strs(dig(agent, "args")); !slices.Contains(args, "--topology-features-file="+dir+"/r-rdma-cdi") {
				t.Errorf("args %v lack --topology-features-file=%s/r-rdma-cdi", args, dir)
			}
			var volume, mount any
			for _, v := range asList(dig(pod, "volumes")) {
				if dig(v, "hostPath", "path") == dir {
					volume = v
				}
			}
			for _, m := range asList(dig(agent, "volumeMounts")) {
				if dig(m, "mountPath") == dir {
					mount = m
				}
			}
			if dig(volume, "hostPath", "type") != "DirectoryOrCreate" || mount == nil || dig(mount, "name") != dig(volume, "name") || dig(mount, "readOnly") == true {
				t.Errorf("features.d volume %v mounted as %v: want the host's %s, read-write, at the same path", volume, mount, dir)
			}
			if add := dig(agent, "securityContext", "capabilities", "add"); add != nil {
				t.Errorf("the agent adds %v for NFD's file, which needs none", add)
			}
			off, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", mode, nil))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(off, "features.d") || strings.Contains(off, "--topology-features-file") {
				t.Error("NFD's directory or file in the default render")
			}
		})
	}
	for name, values := range map[string]map[string]any{
		"config key":     {"config": map[string]any{"topology": map[string]any{"features_file": dir + "/x"}}},
		"under pki":      {"nodeFeatureDiscovery": map[string]any{"enabled": true, "featuresDir": "/etc/kubernetes/pki/features.d"}},
		"under /run":     {"nodeFeatureDiscovery": map[string]any{"enabled": true, "featuresDir": "/run/features.d"}},
		"not features.d": {"nodeFeatureDiscovery": map[string]any{"enabled": true, "featuresDir": "/opt/nfd"}},
		"with ..":        {"nodeFeatureDiscovery": map[string]any{"enabled": true, "featuresDir": "/opt/../etc/features.d"}},
	} {
		if _, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", "dra", values)); err == nil {
			t.Errorf("%s: %v accepted", name, values)
		}
	}
}

// TestHelmDeviceMetadataSwitch: device metadata is the driver's default
// (no flag); dra.deviceMetadata false turns it off on the command line.
func TestHelmDeviceMetadataSwitch(t *testing.T) {
	for _, tc := range []struct {
		values map[string]any
		want   bool
	}{
		{nil, false},
		{map[string]any{"dra": map[string]any{"deviceMetadata": true}}, false},
		{map[string]any{"dra": map[string]any{"deviceMetadata": false}}, true},
	} {
		out, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", "dra", tc.values))
		if err != nil {
			t.Fatal(err)
		}
		agent := dig(e2e.RenderedDocs(t, out)["DaemonSet"][0], "spec", "template", "spec", "containers", 0)
		args := strs(dig(agent, "args"))
		if got := slices.Contains(args, "--dra-device-metadata=false"); got != tc.want {
			t.Errorf("values %v: args %v; --dra-device-metadata=false there: %v, want %v", tc.values, args, got, tc.want)
		}
	}
}

// TestHelmPodNetworkIPAM: podNetwork.ipam reaches config.toml as
// [[pod_network.ipam]] tables whose config is the plugin's JSON, as
// rdma-cdi decodes them, with cniBinDir as pod_network.cni_bin_dirs; the
// agent's container alone gets cniBinDir and ipamHostPaths, read-only (the
// pod-network container runs no plugin). Mode device-plugin, a sensitive
// path, a type that is a path and the config keys under config are
// refused, each naming why.
func TestHelmPodNetworkIPAM(t *testing.T) {
	ipam := func(more map[string]any) map[string]any {
		pn := map[string]any{"enabled": true, "ipamHostPaths": []string{"/etc/cni/net.d/whereabouts.d"}, "ipam": []map[string]any{{
			"subnet": "10.0.61.0/24", "config": map[string]any{"type": "whereabouts", "range": "10.0.61.128/25"},
		}}}
		maps.Copy(pn, more)
		return map[string]any{"podNetwork": pn}
	}
	out, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", "dra", ipam(nil)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := renderedConfig(t, out)
	if len(cfg.PodNetwork.IPAM) != 1 || cfg.PodNetwork.IPAM[0].Subnet != "10.0.61.0/24" || cfg.PodNetwork.IPAM[0].Config != `{"range":"10.0.61.128/25","type":"whereabouts"}` ||
		!slices.Equal(cfg.PodNetwork.CNIBinDirs, []string{"/opt/cni/bin"}) {
		t.Fatalf("pod_network.ipam %+v, cni_bin_dirs %v", cfg.PodNetwork.IPAM, cfg.PodNetwork.CNIBinDirs)
	}
	pod := dig(e2e.RenderedDocs(t, out)["DaemonSet"][0], "spec", "template", "spec")
	hostPaths := map[string]string{} // volume name: host path
	for _, v := range asList(dig(pod, "volumes")) {
		if p, ok := dig(v, "hostPath", "path").(string); ok {
			hostPaths[dig(v, "name").(string)] = p
		}
	}
	for _, c := range asList(dig(pod, "containers")) {
		mounted := map[string]bool{}
		for _, m := range asList(dig(c, "volumeMounts")) {
			p := hostPaths[dig(m, "name").(string)]
			if p != "/opt/cni/bin" && p != "/etc/cni/net.d/whereabouts.d" {
				continue
			}
			mounted[p] = true
			if dig(m, "readOnly") != true || dig(m, "mountPath") != p {
				t.Errorf("container %v mounts %s as %v: want it read-only at the same path", dig(c, "name"), p, m)
			}
		}
		if want := dig(c, "name") != "pod-network"; mounted["/opt/cni/bin"] != want || mounted["/etc/cni/net.d/whereabouts.d"] != want {
			t.Errorf("container %v mounts %v of the plugin's paths", dig(c, "name"), mounted)
		}
	}
	for name, tc := range map[string]struct {
		mode   string
		values map[string]any
		want   string
	}{
		"device-plugin":     {"device-plugin", ipam(nil), "podNetwork.ipam needs mode dra"},
		"bin dir in /root":  {"dra", ipam(map[string]any{"cniBinDir": "/root/cni"}), `podNetwork "/root/cni": it is /root or under it`},
		"the kubelet's pki": {"dra", ipam(map[string]any{"ipamHostPaths": []string{"/etc/kubernetes/pki"}}), `podNetwork "/etc/kubernetes/pki": it is /etc/kubernetes`},
		"a path with ..":    {"dra", ipam(map[string]any{"ipamHostPaths": []string{"/etc/cni/../kubernetes"}}), "/podNetwork/ipamHostPaths/0"},
		"a type that is a path": {"dra", map[string]any{"podNetwork": map[string]any{"enabled": true, "ipam": []map[string]any{{
			"subnet": "10.0.61.0/24", "config": map[string]any{"type": "../../bin/sh"}}}}}, "/podNetwork/ipam/0/config/type"},
		"under config": {"dra", map[string]any{"podNetwork": map[string]any{"enabled": true},
			"config": map[string]any{"pod_network": map[string]any{"cni_bin_dirs": []string{"/tmp"}}}}, "config.pod_network.cni_bin_dirs: set podNetwork.cniBinDir instead"},
	} {
		_, err := e2e.HelmTemplate(t, e2e.AgentValues("localhost/rdma-cdi:t", tc.mode, tc.values))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal containing %q", name, err, tc.want)
		}
	}
}
