// Package deploy holds no Go code: these tests check the deployment files
// themselves (sample config, systemd units, Kubernetes manifests).
package deploy

import (
	"bytes"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
)

// TestSampleConfigDocumentsTheDefaults uncomments every "# key = value"
// line of the sample config: the result must decode strictly and equal the
// built-in defaults, so the file never lies about them.
func TestSampleConfigDocumentsTheDefaults(t *testing.T) {
	data, err := os.ReadFile("bootstrap/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	var asIs config.Config
	if err := config.Decode(data, &asIs); err != nil {
		t.Fatalf("sample config as shipped: %v", err)
	}
	keyLine := regexp.MustCompile(`(?m)^# ([a-z_]+ = .*)$`)
	uncommented := keyLine.ReplaceAll(data, []byte("$1"))
	if n := len(keyLine.FindAll(data, -1)); n < 20 {
		t.Fatalf("only %d documented keys", n)
	}
	got := config.Default()
	got.NCCL.Tunables = nil
	if err := config.Decode(uncommented, &got); err != nil {
		t.Fatalf("uncommented sample config: %v\n%s", err, uncommented)
	}
	want := config.Default()
	// TOML empty arrays decode as empty slices.
	for _, s := range []*[]string{&got.NCCL.IncludeHCAs, &got.NCCL.ExcludeHCAs, &got.CDI.ExtraLibraries} {
		if len(*s) == 0 {
			*s = nil
		}
	}
	if len(got.NCCL.Tunables) == 0 {
		got.NCCL.Tunables = want.NCCL.Tunables
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("documented defaults differ:\n got %+v\nwant %+v", got, want)
	}
}

func TestSystemdUnitsAreHardened(t *testing.T) {
	for _, unit := range []string{"systemd/rdma-cdi-watch.service", "systemd/rdma-cdi-generate.service"} {
		data, err := os.ReadFile(unit)
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]string{}
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
				keys[k] = v
			}
		}
		for k, v := range map[string]string{
			"ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes", "NoNewPrivileges": "yes",
			"CapabilityBoundingSet": "", "RestrictAddressFamilies": "AF_NETLINK AF_UNIX",
			"ReadWritePaths": "/run/cdi /var/log/rdma-cdi", "RuntimeDirectory": "cdi", "RuntimeDirectoryPreserve": "yes",
		} {
			if got, ok := keys[k]; !ok || got != v {
				t.Errorf("%s: %s=%q, want %q", unit, k, got, v)
			}
		}
		if !strings.HasPrefix(keys["ExecStart"], "/usr/bin/rdma-cdi --config /etc/rdma-cdi/config.toml ") {
			t.Errorf("%s: ExecStart=%s", unit, keys["ExecStart"])
		}
	}
}

func TestDaemonSet(t *testing.T) {
	data, err := os.ReadFile("kubernetes/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var ds map[string]any
	kinds := []string{}
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			break
		}
		kinds = append(kinds, doc["kind"].(string))
		if doc["kind"] == "DaemonSet" {
			ds = doc
		}
	}
	if strings.Join(kinds, ",") != "Namespace,ServiceAccount,DaemonSet" || ds == nil {
		t.Fatalf("documents: %v", kinds)
	}
	get := func(v any, path ...any) any {
		for _, p := range path {
			switch k := p.(type) {
			case string:
				v = v.(map[string]any)[k]
			case int:
				v = v.([]any)[k]
			}
		}
		return v
	}
	pod := get(ds, "spec", "template", "spec")
	if get(pod, "hostNetwork") != true {
		t.Error("hostNetwork is not true: netdevs and routes would be the pod's")
	}
	watch := get(pod, "containers", 0)
	if get(watch, "securityContext", "privileged") != true {
		t.Error("device-plugin container not privileged")
	}
	args := strings.Join(toStrings(get(watch, "args")), " ")
	// device-plugin keeps the spec current as watch does.
	for _, want := range []string{"--host-root=/host", "--spec-host-root=/", " device-plugin ", "--hook-binary=/opt/rdma-cdi/bin/rdma-cdi-hook", "--ready-file=/run/rdma-cdi/ready"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	probe := strings.Join(toStrings(get(watch, "readinessProbe", "exec", "command")), " ")
	if probe != "test -f /run/rdma-cdi/ready" {
		t.Errorf("readiness probe %q", probe)
	}
	volumes := map[string]string{}
	for _, v := range get(pod, "volumes").([]any) {
		if hp, ok := v.(map[string]any)["hostPath"]; ok {
			volumes[v.(map[string]any)["name"].(string)] = hp.(map[string]any)["path"].(string)
		}
	}
	mounts := map[string]map[string]any{}
	for _, m := range get(watch, "volumeMounts").([]any) {
		mm := m.(map[string]any)
		mounts[mm["mountPath"].(string)] = mm
	}
	for path, want := range map[string]struct {
		host string
		ro   bool
	}{"/sys": {"/sys", true}, "/dev": {"/dev", false}, "/var/run/cdi": {"/var/run/cdi", false}, "/host": {"/", true}} {
		m, ok := mounts[path]
		if !ok {
			t.Errorf("no mount at %s", path)
			continue
		}
		if volumes[m["name"].(string)] != want.host || (m["readOnly"] == true) != want.ro {
			t.Errorf("mount %s: host %s readOnly %v, want %s %v", path, volumes[m["name"].(string)], m["readOnly"], want.host, want.ro)
		}
	}
	init := get(pod, "initContainers", 0)
	script := strings.Join(toStrings(get(init, "command")), " ")
	if !strings.Contains(script, "/host-bin/rdma-cdi") || volumes["host-bin"] != "/opt/rdma-cdi/bin" {
		t.Errorf("initContainer does not install the binary at /opt/rdma-cdi/bin: %s", script)
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestDRAManifests: the DRA driver's DaemonSet reads the host as the device
// plugin's does, names its node, reaches the kubelet's plugin directories,
// and its role allows what the kubelet plugin helper does; the classes
// match only the driver's active, non-management HCAs.
func TestDRAManifests(t *testing.T) {
	data, err := os.ReadFile("kubernetes/dra-driver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			break
		}
		docs[doc["kind"].(string)] = doc
	}
	for _, kind := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"} {
		if docs[kind] == nil {
			t.Fatalf("dra-driver.yaml has no %s", kind)
		}
	}
	pod := docs["DaemonSet"]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	ctr := pod["containers"].([]any)[0].(map[string]any)
	args := " " + strings.Join(toStrings(ctr["args"]), " ") + " "
	for _, want := range []string{" --host-root=/host ", " --spec-host-root=/ ", " dra-driver ", " --node-name=$(NODE_NAME) ", " --hook-binary=/opt/rdma-cdi/bin/rdma-cdi-hook "} {
		if !strings.Contains(args, want) {
			t.Errorf("dra-driver args %q lack %q", args, want)
		}
	}
	hostPaths := map[string]bool{}
	for _, v := range pod["volumes"].([]any) {
		if hp, ok := v.(map[string]any)["hostPath"]; ok {
			hostPaths[hp.(map[string]any)["path"].(string)] = true
		}
	}
	for _, p := range []string{"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry", "/var/run/cdi", "/opt/rdma-cdi/bin", "/"} {
		if !hostPaths[p] {
			t.Errorf("no hostPath volume %s", p)
		}
	}
	rules, _ := yaml.Marshal(docs["ClusterRole"]["rules"])
	for _, want := range []string{"resourceslices", "resourceclaims", "nodes"} {
		if !strings.Contains(string(rules), want) {
			t.Errorf("ClusterRole rules lack %s:\n%s", want, rules)
		}
	}
	classes, err := os.ReadFile("kubernetes/deviceclasses.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"name: hca.rdma.example.com", "name: roce.rdma.example.com", "extendedResourceName: rdma/hca",
		`portState == "ACTIVE"`, `!device.attributes["rdma.example.com"].defaultRoute`, `linkLayer == "Ethernet"`} {
		if !strings.Contains(string(classes), want) {
			t.Errorf("deviceclasses.yaml lacks %s", want)
		}
	}
}
