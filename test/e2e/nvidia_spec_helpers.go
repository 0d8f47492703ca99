package e2e

// A GPU CDI spec shaped like the one `nvidia-ctk cdi generate` writes
// (GPU nodes give one container NVIDIA's spec and ours), with the
// facts of bench/peer.sh: the NVIDIA container toolkit's own nvidia-cdi-hook
// at NvidiaHookVersion running its four createContainer hooks, five GPU
// device nodes (mknod'ed, never opened: there is no GPU here) and seven
// driver libraries, real ELF shared objects with the driver's sonames built
// with gcc, so that update-ldcache and create-symlinks have their real work
// to do in the container.

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"
)

const (
	// NvidiaHookVersion is the NVIDIA container toolkit release whose
	// nvidia-cdi-hook the spec runs (bench/peer.sh's PEER_HOOK_VERSION).
	NvidiaHookVersion = "v1.20.1"
	// NvidiaDriver is the driver version the fake libraries' file names carry.
	NvidiaDriver = "570.86.15"
	// NvidiaLibDir is where the spec mounts the driver libraries in the
	// container (Debian's multiarch dir, as nvidia-ctk finds them on such a
	// host).
	NvidiaLibDir = "/usr/lib/x86_64-linux-gnu"
	// nvidiaHookPackage is the command `go install` builds.
	nvidiaHookPackage = "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook"
	// nvidiaDriverSymbol is the function every fake driver library exports:
	// it returns "LIB VERSION", so a probe can tell which file it loaded.
	NVIDIADriverSymbol = "rdma_cdi_fake_nvidia_driver"
)

// NvidiaLibs are the driver libraries the spec mounts, each as
// LIB.so.NvidiaDriver with soname LIB.so.1.
var NvidiaLibs = []string{"libcuda", "libcudadebugger", "libnvidia-ml", "libnvidia-ptxjitcompiler", "libnvidia-nvvm", "libnvidia-opencl", "libnvidia-cfg"}

// nvidiaNodes are the GPU device nodes, char devices with the driver's
// numbers: nvidia0 is the device's own node, the others every GPU's.
var nvidiaNodes = []struct {
	name         string
	major, minor uint32
}{
	{"nvidia0", 195, 0}, {"nvidiactl", 195, 255}, {"nvidia-modeset", 195, 254},
	{"nvidia-uvm", 509, 0}, {"nvidia-uvm-tools", 509, 1},
}

// NvidiaNodePaths are the container paths of the spec's device nodes.
func NvidiaNodePaths() []string {
	var out []string
	for _, n := range nvidiaNodes {
		out = append(out, "/dev/"+n.name)
	}
	return out
}

// NvidiaSpec is an NVIDIA-style GPU spec installed in /var/run/cdi.
type NvidiaSpec struct {
	Vendor string
	Path   string            // the spec file
	Hook   string            // the nvidia-cdi-hook binary its hooks run
	LibSum map[string]string // library (e.g. "libcuda") -> md5 of its host file
}

// Device is the spec's one GPU, VENDOR/gpu=0.
func (s *NvidiaSpec) Device() string { return s.Vendor + "/gpu=0" }

// nvidiaFiles are the host side of the spec: libraries and device nodes,
// made once per test binary.
type nvidiaFiles struct {
	libDir, devDir string
	sums           map[string]string
}

// NewNvidiaSpec installs an NVIDIA-style GPU spec of a vendor of this test
// in /var/run/cdi (removed when the test ends). Needs root, gcc, and the
// nvidia-cdi-hook that NvidiaCDIHook builds.
func NewNvidiaSpec(t testing.TB) *NvidiaSpec {
	t.Helper()
	RequireRoot(t)
	gcc := RequireBinary(t, "gcc")
	hook := NvidiaCDIHook(t)
	files := GetShared(t, "nvidia-gpu-files", func(c Cleaner) (*nvidiaFiles, error) {
		return makeNvidiaFiles(c, gcc)
	})
	s := &NvidiaSpec{Vendor: UniqueID("nv") + ".rdma-cdi.test", Hook: hook, LibSum: files.sums}
	data, err := json.MarshalIndent(nvidiaSpec(s.Vendor, hook, files), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	s.Path = InstallSpecData(t, s.Vendor+"-gpu", ".json", data)
	return s
}

// nvidiaSpec is the spec itself: device 0 has its own node, while the
// control nodes, the libraries and the hooks are the spec's common edits,
// as nvidia-ctk writes them.
func nvidiaSpec(vendor, hook string, f *nvidiaFiles) *cdispecs.Spec {
	var nodes []*cdispecs.DeviceNode
	for _, n := range nvidiaNodes {
		nodes = append(nodes, &cdispecs.DeviceNode{Path: "/dev/" + n.name, HostPath: filepath.Join(f.devDir, n.name)})
	}
	var mounts []*cdispecs.Mount
	for _, lib := range NvidiaLibs {
		file := lib + ".so." + NvidiaDriver
		mounts = append(mounts, &cdispecs.Mount{
			HostPath:      filepath.Join(f.libDir, file),
			ContainerPath: filepath.Join(NvidiaLibDir, file),
			Options:       []string{"ro", "nosuid", "nodev", "rbind", "rprivate"},
		})
	}
	hookEnv := []string{"NVIDIA_CTK_DEBUG=false"}
	newHook := func(args ...string) *cdispecs.Hook {
		return &cdispecs.Hook{HookName: "createContainer", Path: hook, Args: append([]string{"nvidia-cdi-hook"}, args...), Env: hookEnv}
	}
	return &cdispecs.Spec{
		Version: "0.5.0", // device nodes with hostPath; podman 4.3 reads no newer
		Kind:    vendor + "/gpu",
		Devices: []cdispecs.Device{{Name: "0", ContainerEdits: cdispecs.ContainerEdits{DeviceNodes: nodes[:1]}}},
		ContainerEdits: cdispecs.ContainerEdits{
			Env:         []string{"NVIDIA_VISIBLE_DEVICES=void"},
			DeviceNodes: nodes[1:],
			Mounts:      mounts,
			Hooks: []*cdispecs.Hook{
				newHook("enable-cuda-compat", "--host-driver-version="+NvidiaDriver),
				newHook("create-symlinks", "--link", "libcuda.so.1::"+filepath.Join(NvidiaLibDir, "libcuda.so")),
				newHook("update-ldcache", "--folder", NvidiaLibDir),
				newHook("disable-device-node-modification"),
			},
		},
	}
}

// makeNvidiaFiles builds the fake driver libraries and makes the device
// nodes in a scratch dir of c.
func makeNvidiaFiles(c Cleaner, gcc string) (*nvidiaFiles, error) {
	dir, err := ScratchDir(c, "nvidia")
	if err != nil {
		return nil, err
	}
	f := &nvidiaFiles{libDir: filepath.Join(dir, "lib"), devDir: filepath.Join(dir, "dev"), sums: map[string]string{}}
	for _, d := range []string{f.libDir, f.devDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	for _, lib := range NvidiaLibs {
		src := filepath.Join(dir, lib+".c")
		code := fmt.Sprintf("const char *%s(void) { return \"%s %s\"; }\n", NVIDIADriverSymbol, lib, NvidiaDriver)
		if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
			return nil, err
		}
		out := filepath.Join(f.libDir, lib+".so."+NvidiaDriver)
		if b, err := exec.Command(gcc, "-shared", "-fPIC", "-Wl,-soname,"+lib+".so.1", "-o", out, src).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("gcc %s: %v\n%s", lib, err, b)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			return nil, err
		}
		sum := md5.Sum(data)
		f.sums[lib] = hex.EncodeToString(sum[:])
	}
	for _, n := range nvidiaNodes {
		if err := unix.Mknod(filepath.Join(f.devDir, n.name), unix.S_IFCHR|0o666, int(unix.Mkdev(n.major, n.minor))); err != nil {
			return nil, fmt.Errorf("mknod %s: %w", n.name, err)
		}
	}
	return f, nil
}

var nvidiaHookMu sync.Mutex

// NvidiaCDIHook returns nvidia-cdi-hook at NvidiaHookVersion, built once
// per machine with `go install` (the Go module proxy; cgo, so gcc) into the
// engines cache, enginesDir()/nvidia-cdi-hook-VERSION/nvidia-cdi-hook. A
// build that cannot reach the network skips the test (fails it in CI).
func NvidiaCDIHook(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(enginesDir(), "nvidia-cdi-hook-"+NvidiaHookVersion)
	bin := filepath.Join(dir, "nvidia-cdi-hook")
	if Exists(bin) {
		return bin
	}
	RequireBinary(t, "gcc")
	goBin := RequireBinary(t, "go")
	nvidiaHookMu.Lock()
	defer nvidiaHookMu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Another test binary may be building it: one build per machine.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if Exists(bin) {
		return bin
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command(goBin, "install", "-trimpath", nvidiaHookPackage+"@"+NvidiaHookVersion)
	cmd.Dir = tmp // outside any module: `go install PKG@VERSION` alone decides
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=1", "GOWORK=off", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		if networkError.Match(out) {
			Missing(t, "go install %s@%s: the Go module proxy is out of reach: %v\n%s", nvidiaHookPackage, NvidiaHookVersion, err, out)
		}
		t.Fatalf("go install %s@%s: %v\n%s", nvidiaHookPackage, NvidiaHookVersion, err, out)
	}
	if err := os.Rename(filepath.Join(tmp, "nvidia-cdi-hook"), bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// networkError matches what the go command says when it cannot download a
// module.
var networkError = regexp.MustCompile(`dial tcp|no such host|i/o timeout|connection refused|network is unreachable|TLS handshake|proxyconnect|Temporary failure in name resolution|server misbehaving`)
