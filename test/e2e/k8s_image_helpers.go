package e2e

// Images for the Kubernetes node, written directly as docker-archive tars
// (manifest.json + config + one uncompressed layer) that `ctr images import`
// reads: no registry and no podman needed.

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

const (
	// RDMACDIImageRef is the image that runs deploy/kubernetes/*.yaml in
	// tests (ApplyShipped puts it in place of rdma-cdi:latest).
	RDMACDIImageRef = "localhost/rdma-cdi:test"
	// kubePauseRef is the sandbox image pinned in the node's containerd.
	kubePauseRef = "localhost/pause:local"
	// busyboxPath is busybox-static on the host (`make deps`).
	busyboxPath = "/bin/busybox"
)

// imageEntry is one path in an image layer.
type imageEntry struct {
	Mode    int64  // permission bits (dirs and files)
	Src     string // a host file to copy
	Symlink string // symlink target
	Dir     bool
}

// imageSpec is a one-layer image.
type imageSpec struct {
	Ref   string
	Files map[string]imageEntry // path without leading slash
	Cmd   []string
	Env   []string
}

// busyboxBase returns the layout of a minimal busybox-static image with
// the named applets linked into /bin.
func busyboxBase(applets ...string) map[string]imageEntry {
	files := map[string]imageEntry{
		"bin": {Dir: true, Mode: 0o755}, "etc": {Dir: true, Mode: 0o755}, "dev": {Dir: true, Mode: 0o755},
		"proc": {Dir: true, Mode: 0o755}, "sys": {Dir: true, Mode: 0o755}, "run": {Dir: true, Mode: 0o755},
		"tmp": {Dir: true, Mode: 0o1777}, "usr": {Dir: true, Mode: 0o755}, "usr/local": {Dir: true, Mode: 0o755},
		"usr/local/bin": {Dir: true, Mode: 0o755}, "var": {Dir: true, Mode: 0o755}, "var/run": {Symlink: "../run"},
		"bin/busybox": {Src: busyboxPath, Mode: 0o755},
	}
	for _, a := range applets {
		files["bin/"+a] = imageEntry{Symlink: "busybox"}
	}
	return files
}

// writeDockerArchive writes spec as a docker-archive tar at path.
func writeDockerArchive(path string, spec imageSpec) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	names := make([]string, 0, len(spec.Files))
	for n := range spec.Files {
		names = append(names, n)
	}
	sort.Strings(names) // parents before children
	mtime := time.Unix(0, 0)
	for _, n := range names {
		e := spec.Files[n]
		h := &tar.Header{Name: n, Mode: e.Mode, ModTime: mtime, Format: tar.FormatPAX}
		var data []byte
		switch {
		case e.Dir:
			h.Typeflag, h.Name = tar.TypeDir, n+"/"
		case e.Symlink != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.Symlink, 0o777
		default:
			b, err := os.ReadFile(e.Src)
			if err != nil {
				return err
			}
			data = b
			h.Typeflag, h.Size = tar.TypeReg, int64(len(b))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer.Bytes())
	env := spec.Env
	if env == nil {
		env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Env": env, "Cmd": spec.Cmd},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(layerSum[:])}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := hex.EncodeToString(layerSum[:]) + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": []string{spec.Ref}, "Layers": []string{layerName}}})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	ow := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		data []byte
	}{{configName, config}, {layerName, layer.Bytes()}, {"manifest.json", manifest}} {
		if dir := filepath.Dir(f.name); dir != "." {
			if err := ow.WriteHeader(&tar.Header{Name: dir + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime}); err != nil {
				return err
			}
		}
		if err := ow.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.data)), ModTime: mtime}); err != nil {
			return err
		}
		if _, err := ow.Write(f.data); err != nil {
			return err
		}
	}
	if err := ow.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}

// pauseImageArchive writes the sandbox image: busybox sh as PID 1 that
// exits on SIGTERM (a PID 1 without a handler ignores it).
func pauseImageArchive(dir string) (string, error) {
	p := filepath.Join(dir, "pause.tar")
	return p, writeDockerArchive(p, imageSpec{
		Ref:   kubePauseRef,
		Files: busyboxBase("sh", "sleep"),
		Cmd:   []string{"/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait; done"},
	})
}

// RDMACDIImageArchive writes the image that deploy/kubernetes/daemonset.yaml
// runs, from the current bin/rdma-cdi, bin/rdma-cdi-hook and
// bin/rdma-cdi-dra (built when stale): /usr/local/bin/rdma-cdi, rdma-cdi-hook
// and rdma-cdi-dra
// plus busybox-static with the applets the manifest's initContainer and
// probes use (sh, cp, chmod, mv, ln, test) and a few for debugging. It is
// tagged RDMACDIImageRef and written under dir.
func RDMACDIImageArchive(t testing.TB, dir string) string {
	t.Helper()
	requireFile(t, busyboxPath, "make deps")
	bin := Binary(t, "rdma-cdi")
	files := busyboxBase("sh", "cp", "chmod", "mv", "ln", "test", "[", "cat", "ls", "rm", "mkdir", "sleep", "true", "false", "echo")
	files["usr/local/bin/rdma-cdi"] = imageEntry{Src: bin, Mode: 0o755}
	files["usr/local/bin/rdma-cdi-hook"] = imageEntry{Src: Binary(t, "rdma-cdi-hook"), Mode: 0o755}
	files["usr/local/bin/rdma-cdi-dra"] = imageEntry{Src: Binary(t, "rdma-cdi-dra"), Mode: 0o755}
	p := filepath.Join(dir, "rdma-cdi-image.tar")
	if err := writeDockerArchive(p, imageSpec{Ref: RDMACDIImageRef, Files: files, Cmd: []string{"/usr/local/bin/rdma-cdi"}}); err != nil {
		t.Fatalf("rdma-cdi image: %v", err)
	}
	return p
}

// imageRefMissing is a helpful error for an image not found after import.
func imageRefMissing(ref, list string) error {
	return fmt.Errorf("image %s not in containerd's k8s.io namespace after import; it has:\n%s", ref, list)
}

// RDMACDIImage builds the rdma-cdi image from the current bin/rdma-cdi
// (RDMACDIImageArchive), imports it into the node's containerd when it
// changed, and returns its reference.
func (k *KubeEnv) RDMACDIImage(t testing.TB) string {
	t.Helper()
	p := RDMACDIImageArchive(t, t.TempDir())
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(b))
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.image[sum] {
		k.ImportImage(t, p, RDMACDIImageRef)
		k.image[sum] = true
	}
	return RDMACDIImageRef
}

// ImportImage imports a docker-archive (or OCI) tar into containerd's
// k8s.io namespace; ref, when not "", must be among the images afterwards.
func (k *KubeEnv) ImportImage(t testing.TB, archive, ref string) {
	t.Helper()
	if err := k.importArchive(archive); err != nil {
		t.Fatal(err)
	}
	if ref == "" {
		return
	}
	out, _, err := k.ctr("images", "list", "--quiet")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Fields(out) {
		if l == ref {
			return
		}
	}
	t.Fatal(imageRefMissing(ref, out))
}

func (k *KubeEnv) importArchive(archive string) error {
	if _, se, err := k.ctr("images", "import", "--all-platforms", archive); err != nil {
		return fmt.Errorf("import %s: %w\n%s", archive, err, se)
	}
	return nil
}

func (k *KubeEnv) ctr(args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(filepath.Join(k.BinDir, "ctr"), append([]string{"--address", k.Socket, "--namespace", criNamespace}, args...)...)
	return run(cmd)
}
