package e2e

// Images for the Kubernetes node: the node agent's image that `make image`
// builds with podman from deploy/kubernetes/Containerfile, and the test
// images of `make images`, imported into containerd's k8s.io namespace (or
// loaded into CRI-O's storage on a node with KubeOptions.Runtime "crio").

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// AgentImage is the node agent's image as `make image` left it.
type AgentImage struct {
	Ref     string // e.g. localhost/rdma-cdi:51e10ee
	Archive string // docker-archive tar
}

// agentImageDir is where `make image` writes.
func agentImageDir() string { return filepath.Join(RepoRoot(), "_out", "image") }

// BuiltAgentImage returns the image `make image` built, running it again
// when the image is missing or holds other binaries than bin/ (built first
// when stale), so a test never runs an agent older than the code.
func BuiltAgentImage(t testing.TB) AgentImage {
	t.Helper()
	RequireBinary(t, "podman")
	dir := agentImageDir()
	if !agentImageCurrent(t, dir) {
		cmd := exec.Command("make", "--no-print-directory", "image")
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make image: %v\n%s", err, out)
		}
		if !agentImageCurrent(t, dir) {
			t.Fatalf("make image left %s with other binaries than bin/", dir)
		}
	}
	ref, err := os.ReadFile(filepath.Join(dir, "ref"))
	if err != nil {
		t.Fatal(err)
	}
	return AgentImage{Ref: strings.TrimSpace(string(ref)), Archive: filepath.Join(dir, "rdma-cdi.tar")}
}

// agentImageCurrent: the image's recorded checksums are those of bin/'s
// binaries now.
func agentImageCurrent(t testing.TB, dir string) bool {
	t.Helper()
	recorded, err := os.ReadFile(filepath.Join(dir, "context.sha256"))
	if err != nil || !Exists(filepath.Join(dir, "rdma-cdi.tar")) || !Exists(filepath.Join(dir, "ref")) {
		return false
	}
	var now bytes.Buffer
	for _, name := range []string{"rdma-cdi", "rdma-cdi-hook", "rdma-cdi-ldsandbox", "rdma-cdi-agent", "rdma-cdi-dra"} {
		b, err := os.ReadFile(Binary(t, name))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&now, "%x  %s\n", sha256.Sum256(b), name)
	}
	return now.String() == string(recorded)
}

// imageRefMissing is a helpful error for an image not found after import.
func imageRefMissing(ref, runtime, list string) error {
	return fmt.Errorf("image %s not in %s's images after import; it has:\n%s", ref, runtime, list)
}

// RDMACDIImage imports the node agent's image (BuiltAgentImage) into the
// node's containerd when it changed, and returns its reference.
func (k *KubeEnv) RDMACDIImage(t testing.TB) string {
	t.Helper()
	img := BuiltAgentImage(t)
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.image[img.Ref] {
		k.ImportImage(t, img.Archive, img.Ref)
		k.image[img.Ref] = true
	}
	return img.Ref
}

// ImportImage imports a docker-archive (or OCI) tar into containerd's
// k8s.io namespace (CRI-O's storage); ref, when not "", must be among the
// images afterwards.
func (k *KubeEnv) ImportImage(t testing.TB, archive, ref string) {
	t.Helper()
	if err := k.importArchive(archive); err != nil {
		t.Fatal(err)
	}
	if ref == "" {
		return
	}
	out, err := k.imageRefs()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Fields(out) {
		if l == ref {
			return
		}
	}
	t.Fatal(imageRefMissing(ref, k.Runtime, out))
}

// TagImage gives an imported image a second reference (a "new" image for
// an upgrade, without a registry).
func (k *KubeEnv) TagImage(t testing.TB, ref, newRef string) {
	t.Helper()
	if k.Runtime == RuntimeCRIO {
		if err := k.crioTag(ref, newRef); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, se, err := k.ctr("images", "tag", "--force", ref, newRef); err != nil {
		t.Fatalf("ctr images tag %s %s: %v\n%s", ref, newRef, err, se)
	}
}

// imageRefs are the references of the runtime's images, one a line.
func (k *KubeEnv) imageRefs() (string, error) {
	if k.Runtime == RuntimeCRIO {
		return k.crioImageRefs()
	}
	out, _, err := k.ctr("images", "list", "--quiet")
	return out, err
}

func (k *KubeEnv) importArchive(archive string) error {
	if k.Runtime == RuntimeCRIO {
		return k.crioLoad(archive)
	}
	if _, se, err := k.ctr("images", "import", "--all-platforms", archive); err != nil {
		return fmt.Errorf("import %s: %w\n%s", archive, err, se)
	}
	return nil
}

func (k *KubeEnv) ctr(args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(filepath.Join(EnginesBinDir(), "ctr"), append([]string{"--address", k.Socket, "--namespace", CRINamespace}, args...)...)
	return Run(cmd)
}
