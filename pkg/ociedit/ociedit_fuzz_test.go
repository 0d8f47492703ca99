package ociedit

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

const (
	fuzzVendor = "rdma.example.com"
	fuzzClass  = "hca"
)

// checkRequest asserts what every parsed request must be, whatever the
// container's creator wrote: sorted, unique, valid CDI device names that
// can hold no separator, "all" only as a flag, sources iff a request, and
// the same answer twice.
func checkRequest(t *testing.T, spec *specs.Spec) {
	t.Helper()
	req, err := ParseRequest(spec, fuzzVendor, fuzzClass)
	again, err2 := ParseRequest(spec, fuzzVendor, fuzzClass)
	if !reflect.DeepEqual(req, again) || (err == nil) != (err2 == nil) {
		t.Fatalf("not deterministic: %+v %v / %+v %v", req, err, again, err2)
	}
	if !slices.IsSorted(req.Devices) || len(slices.Compact(slices.Clone(req.Devices))) != len(req.Devices) {
		t.Fatalf("devices not sorted and unique: %q", req.Devices)
	}
	for _, d := range req.Devices {
		if d == apis.AllDevices || parser.ValidateDeviceName(d) != nil || strings.ContainsAny(d, "=,/\n\r\x00 ") {
			t.Fatalf("device %q accepted from %+v", d, spec)
		}
	}
	if req.Empty() != (len(req.Sources) == 0) {
		t.Fatalf("request %+v: sources do not match", req)
	}
	if err != nil && len(err.Error()) > 64<<10 {
		t.Fatalf("error of %d bytes: a creator could flood the logs", len(err.Error()))
	}
	// The same config from a Kubernetes container: nothing it wrote is a
	// request, nor an error, and the log line stays short.
	k8s := *spec
	k8s.Annotations = maps.Clone(spec.Annotations)
	if k8s.Annotations == nil {
		k8s.Annotations = map[string]string{}
	}
	k8s.Annotations["io.kubernetes.cri.sandbox-id"] = "x"
	d, derr := Decide(&k8s, fuzzVendor, fuzzClass, Policy{})
	if derr != nil || !d.Request.Empty() || len(d.Request.Sources) != 0 {
		t.Fatalf("a Kubernetes container's own request counted: %+v, %v", d.Request, derr)
	}
	if msg := (Request{Asker: d.Asker, Ignored: d.Ignored}).IgnoredMessage(); len(msg) > 4096 || (len(d.Ignored) > 0) != (msg != "") {
		t.Fatalf("ignored %+v: message of %d bytes", d.Ignored, len(msg))
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add("all", "", "", "")
	f.Add("mlx5_1,mlx5_2", "mlx5_3", "rdma.example.com/hca=mlx5_4", "")
	f.Add("rdma.example.com/hca=mlx5_1, ,none", "void", "nvidia.com/gpu=0,rdma.example.com/hca=mlx5_5", "X=1")
	f.Add("mlx5_1\nRDMA_VISIBLE_DEVICES=all", "a=b=c", "rdma.example.com/hca=../../etc/shadow", "RDMA_VISIBLE_DEVICES=mlx5_9")
	f.Add("other.com/hca=x", "rdma.example.com/hca=", "rdma.example.com/hca=all", "RDMA_VISIBLE_DEVICES")
	f.Add(strings.Repeat("mlx5_1,", 100), "", "", "=")
	f.Fuzz(func(t *testing.T, env, own, cdiAnnot, extraEnv string) {
		spec := &specs.Spec{
			Process: &specs.Process{Env: []string{"PATH=/bin", apis.EnvDevices + "=" + env, extraEnv}},
			Annotations: map[string]string{
				apis.DevicesAnnotation(fuzzVendor): own,
				cdi.AnnotationPrefix + "x":         cdiAnnot,
				"unrelated":                        env,
			},
		}
		checkRequest(t, spec)
	})
}

// FuzzParseRequestConfig feeds whole config.json documents (as the
// precreate hook and the runtime wrapper get them).
func FuzzParseRequestConfig(f *testing.F) {
	for _, s := range []string{
		`{"process":{"env":["RDMA_VISIBLE_DEVICES=all"]}}`,
		`{"process":{"env":["RDMA_VISIBLE_DEVICES=mlx5_1","RDMA_VISIBLE_DEVICES=mlx5_2"]},"annotations":{"rdma.example.com/devices":"mlx5_3"}}`,
		`{"annotations":{"cdi.k8s.io/a":"rdma.example.com/hca=mlx5_1,rdma.example.com/hca=bad name"}}`,
		`{"process":null,"annotations":null}`,
		`{"linux":{"devices":[{"path":"../../etc/shadow","type":"c","major":231,"minor":192}]},"mounts":[{"destination":"../../etc"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var spec specs.Spec
		if json.Unmarshal(data, &spec) != nil {
			return
		}
		checkRequest(t, &spec)
	})
}

// Regression (hostile input): 768 KiB of bad names in RDMA_VISIBLE_DEVICES
// made a 51 MB error, logged on every start attempt. Errors are now
// bounded, and still say where the bad names came from.
func TestParseRequestHugeValuesBoundedErrors(t *testing.T) {
	for _, v := range []string{
		strings.Repeat("x!,", 1<<18),
		strings.Repeat("a\nRDMA_VISIBLE_DEVICES=all,", 1<<15),
		fuzzVendor + "/" + fuzzClass + "=" + strings.Repeat("y", 1<<20),
	} {
		spec := &specs.Spec{
			Process:     &specs.Process{Env: []string{apis.EnvDevices + "=" + v}},
			Annotations: map[string]string{cdi.AnnotationPrefix + "x": v, apis.DevicesAnnotation(fuzzVendor): v},
		}
		req, err := ParseRequest(spec, fuzzVendor, fuzzClass)
		if err == nil || len(err.Error()) > 4096 {
			t.Fatalf("want a short error, got %d bytes", len(err.Error()))
		}
		for _, src := range []string{"env " + apis.EnvDevices, "annotation " + apis.DevicesAnnotation(fuzzVendor)} {
			if !strings.Contains(err.Error(), src) {
				t.Errorf("error does not name %s: %.300s", src, err)
			}
		}
		if req.All || len(req.Devices) != 0 {
			t.Errorf("bad names gave a request: %+v", req)
		}
	}
}
