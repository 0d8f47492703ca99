package e2e

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// seed002Listing is the seed's numbered block, numbers taken off.
func seed002Listing(t *testing.T) []string {
	t.Helper()
	lines, _ := seed002Lines(t)
	return lines
}

// The seed as printed is not the seed's structure: every line but the top
// level's sits one space in, so a YAML parser sees something else (or
// nothing it accepts).
func TestSeed002ListingAsPrintedIsFlat(t *testing.T) {
	lines := seed002Listing(t)
	if len(lines) != 121 {
		t.Fatalf("seed 002's listing has %d lines, want 121", len(lines))
	}
	flat := strings.Join(lines, "\n")
	first := splitDocuments(flat + "\n")[0]
	var job seedPyTorchJob
	if err := yaml.Unmarshal([]byte(first), &job); err == nil && len(job.Spec.PyTorchReplicaSpecs) == 2 {
		t.Fatalf("the flat listing parsed into a job with both replica specs; the re-indenter would not be needed")
	} else {
		t.Logf("the listing as printed: %v (replica specs: %d)", err, len(job.Spec.PyTorchReplicaSpecs))
	}
}

func TestSeed002Documents(t *testing.T) {
	job, pv, pvc := Seed002Documents(t)
	t.Logf("the PyTorchJob, re-indented:\n%s", job)

	// Every line is the seed's, unchanged but for its indentation.
	lines := seed002Listing(t)
	out := strings.Split(strings.TrimSuffix(job+"---\n"+pv+"---\n"+pvc, "\n"), "\n")
	if len(out) != len(lines) {
		t.Fatalf("%d lines out, %d in the seed", len(out), len(lines))
	}
	for i := range lines {
		if strings.TrimSpace(lines[i]) == "" {
			continue
		}
		if got, want := strings.TrimLeft(out[i], " "), strings.TrimLeft(lines[i], " "); got != want {
			t.Errorf("line %d: %q, the seed has %q", i+1, got, want)
		}
	}

	var j seedPyTorchJob
	if err := yaml.Unmarshal([]byte(job), &j); err != nil {
		t.Fatalf("the PyTorchJob: %v", err)
	}
	if j.APIVersion != "kubeflow.org/v1" || j.Kind != "PyTorchJob" || j.Name != "pytorch-swin-transformer-nccl" {
		t.Errorf("job header: %s %s %s", j.APIVersion, j.Kind, j.Name)
	}
	if len(j.Spec.PyTorchReplicaSpecs) != 2 {
		t.Fatalf("replica specs: %v, want Master and Worker", reflect.ValueOf(j.Spec.PyTorchReplicaSpecs).MapKeys())
	}
	wantAddr := map[string]string{"Master": "$HOSTNAME", "Worker": "$MASTER_ADDR"}
	for _, rt := range []string{"Master", "Worker"} {
		rs := j.Spec.PyTorchReplicaSpecs[rt]
		if rs == nil {
			t.Fatalf("no %s replica spec", rt)
		}
		if rs.Replicas == nil || *rs.Replicas != 1 || rs.RestartPolicy != "OnFailure" {
			t.Errorf("%s: replicas %v restartPolicy %q", rt, rs.Replicas, rs.RestartPolicy)
		}
		tpl := rs.Template
		if tpl.Annotations["sidecar.istio.io/inject"] != "false" {
			t.Errorf("%s: annotations %v", rt, tpl.Annotations)
		}
		ps := tpl.Spec
		if ps.SchedulerName != "volcano" {
			t.Errorf("%s: schedulerName %q", rt, ps.SchedulerName)
		}
		if len(ps.Containers) != 1 {
			t.Fatalf("%s: %d containers", rt, len(ps.Containers))
		}
		c := ps.Containers[0]
		if c.Name != "pytorch" || c.Image != "registry.baidubce.com/cce-ai-native/swin-transformer-torch:v2.0" || c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s: container %q image %q pull %q", rt, c.Name, c.Image, c.ImagePullPolicy)
		}
		if len(c.Command) != 3 || c.Command[0] != "/bin/sh" || c.Command[1] != "-c" ||
			!strings.HasPrefix(c.Command[2], "python -m torch.distributed.launch --nproc_per_node 8 --nnodes $WORLD_SIZE --node_rank $RANK --master_addr "+wantAddr[rt]+" --master_port $MASTER_PORT main.py --cfg ") ||
			!strings.HasSuffix(c.Command[2], " --data-path /imagenet --batch-size 128 --accumulation-steps 2") {
			t.Errorf("%s: command %q", rt, c.Command)
		}
		wantEnv := []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}, {Name: "NCCL_IB_DISABLE", Value: "0"}}
		if !reflect.DeepEqual(c.Env, wantEnv) {
			t.Errorf("%s: env %v", rt, c.Env)
		}
		if sc := c.SecurityContext; sc == nil || sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Add, []corev1.Capability{"IPC_LOCK"}) {
			t.Errorf("%s: securityContext %+v", rt, sc)
		}
		wantLimits := corev1.ResourceList{"baidu.com/a100_80g_cgpu": resource.MustParse("8"), "rdma/hca": resource.MustParse("1")}
		if len(c.Resources.Limits) != 2 || len(c.Resources.Requests) != 0 {
			t.Errorf("%s: resources %v", rt, c.Resources)
		}
		for name, q := range wantLimits {
			if got, ok := c.Resources.Limits[name]; !ok || got.Cmp(q) != 0 {
				t.Errorf("%s: limit %s = %v, want %v", rt, name, got.String(), q.String())
			}
		}
		wantMounts := []corev1.VolumeMount{{Name: "dataset", MountPath: "/imagenet"}, {Name: "cache-volume", MountPath: "/dev/shm"}}
		if !reflect.DeepEqual(c.VolumeMounts, wantMounts) {
			t.Errorf("%s: volumeMounts %+v", rt, c.VolumeMounts)
		}
		if len(ps.Volumes) != 2 {
			t.Fatalf("%s: %d volumes", rt, len(ps.Volumes))
		}
		v0, v1 := ps.Volumes[0], ps.Volumes[1]
		if v0.Name != "dataset" || v0.PersistentVolumeClaim == nil || v0.PersistentVolumeClaim.ClaimName != "imagenet-22k-pvc" || v0.EmptyDir != nil {
			t.Errorf("%s: volume 0 %+v", rt, v0)
		}
		if v1.Name != "cache-volume" || v1.EmptyDir == nil || v1.EmptyDir.Medium != corev1.StorageMediumMemory || v1.PersistentVolumeClaim != nil {
			t.Errorf("%s: volume 1 %+v", rt, v1)
		}
	}

	var claim corev1.PersistentVolumeClaim
	if err := yaml.Unmarshal([]byte(pvc), &claim); err != nil {
		t.Fatalf("the PVC: %v", err)
	}
	if claim.Kind != "PersistentVolumeClaim" || claim.Name != "imagenet-22k-pvc" || claim.Namespace != "default" ||
		!reflect.DeepEqual(claim.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) ||
		claim.Spec.StorageClassName != nil {
		t.Errorf("PVC: %+v", claim)
	}
	if q := claim.Spec.Resources.Requests[corev1.ResourceStorage]; len(claim.Spec.Resources.Requests) != 1 || q.Cmp(resource.MustParse("100Gi")) != 0 {
		t.Errorf("PVC requests: %v", claim.Spec.Resources.Requests)
	}

	var vol corev1.PersistentVolume
	if err := yaml.Unmarshal([]byte(pv), &vol); err != nil {
		t.Fatalf("the PV: %v", err)
	}
	if vol.Kind != "PersistentVolume" || vol.Name != "imagenet-22k-pv" || vol.Spec.StorageClassName != "" ||
		!reflect.DeepEqual(vol.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) {
		t.Errorf("PV: %+v", vol)
	}
	if q := vol.Spec.Capacity[corev1.ResourceStorage]; q.Cmp(resource.MustParse("100Gi")) != 0 {
		t.Errorf("PV capacity: %v", vol.Spec.Capacity)
	}
	csi := vol.Spec.CSI
	wantAttrs := map[string]string{"parentDir": "/", "path": "", "clusterIP": "", "clusterPort": "8888", "clientID": ""}
	if csi == nil || csi.Driver != "csi-clusterfileplugin" || csi.VolumeHandle != "data-id" || !reflect.DeepEqual(csi.VolumeAttributes, wantAttrs) {
		t.Errorf("PV csi: %+v", csi)
	}
	if !strings.Contains(pv, "      parentDir: / #Required, custom path\n") {
		t.Errorf("the PV's comments are not on their lines:\n%s", pv)
	}
}

// Strict decoding: the re-indented documents have no field their types lack
// (for the job: our mirror of the operator's top levels, and corev1 below).
func TestSeed002DocumentsStrict(t *testing.T) {
	job, pv, pvc := Seed002Documents(t)
	for _, c := range []struct {
		name string
		doc  string
		into any
	}{
		{"PyTorchJob", job, &seedPyTorchJob{}},
		{"PersistentVolume", pv, &corev1.PersistentVolume{}},
		{"PersistentVolumeClaim", pvc, &corev1.PersistentVolumeClaim{}},
	} {
		if err := yaml.UnmarshalStrict([]byte(c.doc), c.into); err != nil {
			t.Errorf("%s: strict: %v", c.name, err)
		}
	}
}

// The re-indenter on listings of its own: what closes a mapping, a map of
// scalars, list items of scalars and of mappings, and what it refuses.
func TestReindentSeedListing(t *testing.T) {
	in := []string{
		"apiVersion: v1",
		"kind: PersistentVolumeClaim",
		"metadata:",
		" name: c",
		" labels:",
		" a: b # a comment",
		" annotations:",
		" x: \"y\"",
		"spec:",
		" accessModes:",
		" - ReadWriteOnce",
		" - ReadOnlyMany",
		" resources:",
		" limits:",
		" storage: 1Gi",
		" requests:",
		" storage: 1Gi",
		" selector:",
		" matchExpressions:",
		" - key: k",
		" operator: In",
		" values:",
		" - v1",
		" - key: k2",
		" operator: Exists",
		" volumeName: pv0",
	}
	want := `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: c
  labels:
    a: b # a comment
  annotations:
    x: "y"
spec:
  accessModes:
    - ReadWriteOnce
    - ReadOnlyMany
  resources:
    limits:
      storage: 1Gi
    requests:
      storage: 1Gi
  selector:
    matchExpressions:
      - key: k
        operator: In
        values:
          - v1
      - key: k2
        operator: Exists
  volumeName: pv0
`
	got, err := reindentSeedListing(in)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	var c corev1.PersistentVolumeClaim
	if err := yaml.UnmarshalStrict([]byte(got), &c); err != nil {
		t.Fatal(err)
	}
	if c.Spec.VolumeName != "pv0" || len(c.Spec.Selector.MatchExpressions) != 2 || c.Labels["a"] != "b" {
		t.Errorf("parsed: %+v", c)
	}

	for name, bad := range map[string][]string{
		"unknown kind":      {"apiVersion: v1", "kind: Gadget"},
		"unknown field":     {"apiVersion: v1", "kind: PersistentVolumeClaim", "spec:", " nonsense: 1"},
		"item with no list": {"apiVersion: v1", "kind: PersistentVolumeClaim", "metadata:", " - x"},
	} {
		if _, err := reindentSeedListing(bad); err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func TestStripComment(t *testing.T) {
	for in, want := range map[string]string{
		` / #Required, custom path`: ` / `,
		` "" #Required. x`:          ` "" `,
		` "a # b"`:                  ` "a # b"`,
		` a#b`:                      ` a#b`,
		`#only`:                     ``,
	} {
		if got := stripComment(in); got != want {
			t.Errorf("stripComment(%q) = %q, want %q", in, got, want)
		}
	}
}
