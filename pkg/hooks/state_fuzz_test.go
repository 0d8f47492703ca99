package hooks

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ReadState parses what an engine (or anyone who can run the hook) writes
// on stdin. Whatever it is: no panic, errors say where the problem is, and
// an accepted state has everything the hooks rely on.
func FuzzReadState(f *testing.F) {
	for _, s := range []string{
		`{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":42,"bundle":"/run/b"}`,
		`{"ociVersion":"1.0.2","id":"c1","status":"created","pid":1,"bundle":"/run/b","annotations":{"a":"b"}}`,
		`{"ociVersion":"1.0.2","id":"c1","pid":0,"bundle":"/run/b"}`,
		`{"ociVersion":"1.0.2","id":"c1","pid":-1,"bundle":"/run/b"}`,
		`{"ociVersion":"1.0.2","id":"c1","pid":42,"bundle":"relative"}`,
		`{"ociVersion":"1.0.2","id":"c1","pid":42,"bundle":"/run/b"} {}`,
		`{"ociVersion":"1.0.2","id":"c1","pid":1e3,"bundle":"/run/b"}`,
		`{"ociVersion":"1.0.2","id":"c1","pid":9223372036854775808,"bundle":"/run/b"}`,
		`{"pid":"42"}`, `[]`, `null`, ``, "  \n", `{"ociVersion":"1","id":"\u0000","pid":1,"bundle":"/\n"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ReadState(bytes.NewReader(data))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "OCI state on stdin:") {
				t.Fatalf("error does not say it is about the state: %v", err)
			}
			return
		}
		if st.Version == "" || st.ID == "" || st.Pid <= 0 || !filepath.IsAbs(st.Bundle) {
			t.Fatalf("accepted an unusable state %+v from %q", st, data)
		}
	})
}

// LoadSpec reads a bundle's config.json, which the container's creator
// wrote. Whatever it holds: no panic, errors name the file, and an accepted
// config has a root path.
func FuzzLoadSpec(f *testing.F) {
	for _, s := range []string{
		`{"ociVersion":"1.0.2","root":{"path":"rootfs"},"process":{"args":["sh"],"cwd":"/"}}`,
		`{"ociVersion":"1.0.2","root":{"path":"/abs/rootfs","readonly":true}}`,
		`{"ociVersion":"1.0.2","root":{"path":""}}`,
		`{"ociVersion":"1.0.2"}`,
		`{"root":{"path":"rootfs"},"linux":{"devices":[{"path":"../../etc/shadow","type":"c","major":-1,"minor":99999999999}]}}`,
		`{"root":{"path":"rootfs"},"mounts":[{"destination":"../../etc/shadow","source":"/etc/shadow","options":["bind"]}]}`,
		`{"root":{"path":"rootfs"},"process":{"env":["RDMA_VISIBLE_DEVICES=all\nX=1","=","NCCL_IB_HCA==x"]}}`,
		`{"root":{"path":"rootfs"}} trailing`, `{"root":[]}`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	// One bundle per worker process: inputs run one at a time in it.
	bundle := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := filepath.Join(bundle, "config.json")
		if err := os.WriteFile(cfg, data, 0o644); err != nil {
			t.Fatal(err)
		}
		spec, err := LoadSpec(bundle)
		if err != nil {
			if !strings.Contains(err.Error(), cfg) {
				t.Fatalf("error does not name %s: %v", cfg, err)
			}
			return
		}
		if spec.Root == nil || spec.Root.Path == "" {
			t.Fatalf("accepted a config without root.path: %q", data)
		}
		if p := RootfsPath(bundle, spec); !filepath.IsAbs(p) || p != filepath.Clean(p) {
			t.Fatalf("rootfs path %q is not clean and absolute", p)
		}
	})
}
