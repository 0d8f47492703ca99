package e2e

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// CRIOOptions tune a CRI-O started by CRIO.
type CRIOOptions struct {
	// DropIns are extra files for crio's --config-dir, by file name (the
	// shipped deploy/crio/10-rdma.conf, for example).
	DropIns map[string]string
	// HooksDir is the only hooks.d dir CRI-O reads ("" for an empty one).
	HooksDir string
}

// crioPauseRef is the infra container's image: the bb image with /pause.
const crioPauseRef = "localhost/rdma-cdi-crio-pause:latest"

// CRIO returns a CRI-O built by `make engines-cdi`, with private root, run
// root, socket and state, the vfs storage driver, runc through conmon, the
// cgroupfs manager, CDI specs from /etc/cdi and /var/run/cdi, and BB and
// Glibc in its storage. Daemons are shared by the tests of a binary that
// pass the same options.
func CRIO(t testing.TB, opts CRIOOptions) *CRIEnv {
	t.Helper()
	in := CRIOInputs(t)
	var names []string
	for name := range opts.DropIns {
		names = append(names, name)
	}
	sort.Strings(names)
	key := "crio\x00" + opts.HooksDir
	for _, n := range names {
		key += "\x00" + n + "\x00" + opts.DropIns[n]
	}
	env := GetShared(t, key, func(c Cleaner) (*CRIODaemon, error) {
		return StartCRIO(c, in, opts)
	})
	return NewCRIEnv(t, env.socket, env.Log)
}

// CRIODaemon is a running CRI-O.
type CRIODaemon struct{ socket, Log string }

// crioSetup is what starting a CRI-O takes: its binaries, the host programs
// it runs containers with, and the images to put in its storage (by ref).
type crioSetup struct {
	bin, runc, conmon string
	Images            map[string]string
}

// CRIOInputs are what StartCRIO takes on this machine, with the test images.
func CRIOInputs(t testing.TB) crioSetup {
	t.Helper()
	RequireRoot(t)
	in := crioSetup{bin: EnginesBinDir(), runc: RequireBinary(t, "runc"), conmon: RequireBinary(t, "conmon")}
	for _, b := range []string{"crio", "pinns"} {
		RequireFile(t, filepath.Join(in.bin, b), "make engines-cdi")
	}
	in.Images = map[string]string{BB.Ref: BB.RootfsTar(t), Glibc.Ref: Glibc.RootfsTar(t), OwnStack.Ref: OwnStack.RootfsTar(t)}
	return in
}

// StartCRIO starts a CRI-O of its own (cleaned up by c).
func StartCRIO(c Cleaner, in crioSetup, opts CRIOOptions) (*CRIODaemon, error) {
	bin := in.bin
	images := map[string]string{}
	for ref, tar := range in.Images {
		images[ref] = tar
	}
	dir, err := ScratchDir(c, "crio")
	if err != nil {
		return nil, err
	}
	sub := func(name string) string { return filepath.Join(dir, name) }
	for _, d := range []string{"root", "runroot", "conf.d", "cni", "cni-bin", "exits", "attach", "ns", "hooks.d", "runc", "state"} {
		if err := os.MkdirAll(sub(d), 0o755); err != nil {
			return nil, err
		}
	}
	hooks := opts.HooksDir
	if hooks == "" {
		hooks = sub("hooks.d")
	}
	for name, data := range opts.DropIns {
		if err := os.WriteFile(filepath.Join(sub("conf.d"), name), []byte(data), 0o644); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(sub("policy.json"), []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), 0o644); err != nil {
		return nil, err
	}
	if len(images) > 0 {
		pause, err := crioPauseImage(dir)
		if err != nil {
			return nil, err
		}
		images[crioPauseRef] = pause
		if err := importIntoStorage(sub("root"), sub("runroot"), images); err != nil {
			return nil, err
		}
	}
	conf := crioConf{
		Root: sub("root"), RunRoot: sub("runroot"),
		VersionFile: sub("state/version"), VersionFilePersist: sub("state/version-persist"), CleanShutdownFile: sub("state/clean.shutdown"),
		Listen: sub("crio.sock"), HooksDir: hooks, Pinns: filepath.Join(bin, "pinns"),
		ContainerExitsDir: sub("exits"), AttachSocketDir: sub("attach"), NamespacesDir: sub("ns"),
		Runc: in.runc, RuncRoot: sub("runc"), Conmon: in.conmon,
		PauseImage: crioPauseRef, PauseCommand: "/pause", SignaturePolicy: sub("policy.json"),
		NetworkDir: sub("cni"), PluginDir: sub("cni-bin"),
	}.render()
	if err := os.WriteFile(sub("crio.conf"), conf, 0o644); err != nil {
		return nil, err
	}
	d := &CRIODaemon{socket: sub("crio.sock"), Log: sub("crio.log")}
	cmd := exec.Command(filepath.Join(bin, "crio"), "--config", sub("crio.conf"), "--config-dir", sub("conf.d"), "--log-level", "info")
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	err = startDaemon(c, daemon{
		name: "crio", cmd: cmd, log: d.Log, stopTimeout: 20 * time.Second,
		beforeStop: func() {},
		ready: func() error {
			_, err := os.Stat(d.socket)
			return err
		},
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// importIntoStorage puts rootfs tars, by ref, into the containers/storage
// at root (vfs), where CRI-O finds them: there is no registry here.
func importIntoStorage(root, runroot string, images map[string]string) error {
	for ref, tarPath := range images {
		cmd := exec.Command("podman", "--root", root, "--runroot", runroot, "--storage-driver", "vfs",
			"import", "--quiet", "--change", `CMD ["/bin/sh"]`, tarPath, ref)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("podman import %s into %s: %v\n%s", ref, root, err, out)
		}
	}
	return nil
}

// crioPauseImage writes the bb rootfs tar plus /pause (a shell script that
// sleeps): CRI-O runs pause_command in the pod's infra container.
func crioPauseImage(dir string) (string, error) {
	src, err := os.Open(filepath.Join(ImagesDir(), "bb.tar"))
	if err != nil {
		return "", err
	}
	defer src.Close()
	out := filepath.Join(dir, "pause.tar")
	dst, err := os.Create(out)
	if err != nil {
		return "", err
	}
	defer dst.Close()
	tw := tar.NewWriter(dst)
	tr := tar.NewReader(src)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return "", err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return "", err
		}
	}
	script := "#!/bin/sh\nexec sleep 2147483647\n"
	if err := tw.WriteHeader(&tar.Header{Name: "./pause", Mode: 0o755, Size: int64(len(script)), Typeflag: tar.TypeReg}); err != nil {
		return "", err
	}
	if _, err := io.WriteString(tw, script); err != nil {
		return "", err
	}
	return out, tw.Close()
}

// CRIORuntimeHandler turns the shipped deploy/crio/10-rdma.conf into the
// test's drop-in: the wrapper at wrapper, its config reaching it through
// conmon's environment (monitor_env), and runc's root under runcRoot.
func CRIORuntimeHandler(t testing.TB, wrapper, runcRoot string, env []string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(RepoRoot(), "deploy/crio/10-rdma.conf"))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(data)
	for _, sub := range []struct{ old, new string }{
		{`runtime_path = "/usr/bin/rdma-container-runtime"`, fmt.Sprintf("runtime_path = %q", wrapper)},
		{`runtime_root = "/run/runc"`, fmt.Sprintf("runtime_root = %q", runcRoot)},
	} {
		if !strings.Contains(conf, sub.old) {
			t.Fatalf("deploy/crio/10-rdma.conf no longer has %s", sub.old)
		}
		conf = strings.Replace(conf, sub.old, sub.new, 1)
	}
	quoted := make([]string, len(env))
	for i, e := range env {
		quoted[i] = fmt.Sprintf("%q", e)
	}
	return conf + "monitor_env = [" + strings.Join(quoted, ", ") + "]\n"
}

// crioConf is what a test's CRI-O config sets: its own storage, state,
// socket, hooks dir, runc and pause image, CDI on, cgroupfs (the
// machines' kubelet and containerd use it too), and optionally NRI.
type crioConf struct {
	Root, RunRoot, LogDir                                   string
	VersionFile, VersionFilePersist, CleanShutdownFile      string
	Listen, HooksDir, Pinns                                 string
	ContainerExitsDir, AttachSocketDir, NamespacesDir       string
	IRQBalanceRestoreOff                                    bool
	Runc, RuncRoot, Conmon                                  string
	PauseImage, PauseCommand, SignaturePolicy, SignatureDir string
	NetworkDir, PluginDir                                   string
	// NRI, when set, is the NRI listener and its plugin dirs.
	NRI *crioNRI
}

type crioNRI struct {
	Enable                             bool
	Listen, PluginDir, PluginConfigDir string
}

// render is the config as CRI-O's crio.conf (TOML), empty keys left out so
// CRI-O keeps its defaults.
func (c crioConf) render() []byte {
	type runtime struct {
		RuntimePath string `toml:"runtime_path"`
		RuntimeType string `toml:"runtime_type"`
		RuntimeRoot string `toml:"runtime_root,omitempty"`
		MonitorPath string `toml:"monitor_path"`
	}
	irq := ""
	if c.IRQBalanceRestoreOff {
		irq = "disable"
	}
	doc := map[string]any{"crio": map[string]any{
		"root": c.Root, "runroot": c.RunRoot, "storage_driver": "vfs", "log_dir": c.LogDir,
		"version_file": c.VersionFile, "version_file_persist": c.VersionFilePersist, "clean_shutdown_file": c.CleanShutdownFile,
		"api": map[string]any{"listen": c.Listen},
		"runtime": map[string]any{
			"default_runtime": "runc", "cgroup_manager": "cgroupfs", "conmon_cgroup": "pod",
			"cdi_spec_dirs": []string{"/etc/cdi", "/var/run/cdi"}, "hooks_dir": []string{c.HooksDir}, "pinns_path": c.Pinns,
			"container_exits_dir": c.ContainerExitsDir, "container_attach_socket_dir": c.AttachSocketDir,
			"namespaces_dir": c.NamespacesDir, "irqbalance_config_restore_file": irq,
			"runtimes": map[string]any{"runc": runtime{RuntimePath: c.Runc, RuntimeType: "oci", RuntimeRoot: c.RuncRoot, MonitorPath: c.Conmon}},
		},
		"image": map[string]any{
			"pause_image": c.PauseImage, "pause_command": c.PauseCommand,
			"signature_policy": c.SignaturePolicy, "signature_policy_dir": c.SignatureDir,
		},
		"network": map[string]any{"network_dir": c.NetworkDir, "plugin_dirs": []string{c.PluginDir}},
	}}
	if c.NRI != nil {
		doc["crio"].(map[string]any)["nri"] = map[string]any{
			"enable_nri": c.NRI.Enable, "nri_listen": c.NRI.Listen,
			"nri_plugin_dir": c.NRI.PluginDir, "nri_plugin_config_dir": c.NRI.PluginConfigDir,
		}
	}
	dropEmpty(doc)
	b, err := toml.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("crio.conf: %v", err)) // maps of strings, bools and slices always marshal
	}
	return b
}

// dropEmpty removes the empty strings of nested maps: keys CRI-O defaults.
func dropEmpty(m map[string]any) {
	for k, v := range m {
		switch v := v.(type) {
		case string:
			if v == "" && k != "pause_command" {
				delete(m, k)
			}
		case map[string]any:
			dropEmpty(v)
		}
	}
}
