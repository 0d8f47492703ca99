package node

// End-to-end tests of the deployment: deploy/bootstrap/install.sh in a
// scratch --root (twice: the second run changes nothing), the .deb built by
// `make deb` installed and removed with dpkg (only in CI=true or with
// RDMA_CDI_TEST_DEB=1: it changes the real system), and `rdma-cdi doctor`
// on fixture nodes.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/doctor"
	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

func installSh(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(e2e.RepoRoot(), "deploy/bootstrap/install.sh")}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// Upgrading in place while containers start: during ten upgrades the
// installed binary, through its runtime link, is always whole and
// executable, and executing it always works
// (install.sh renames a temporary file over each).
func TestBootstrapUpgradeInPlaceNeverBreaksAnExec(t *testing.T) {
	root := t.TempDir()
	bin := e2e.Binary(t, "rdma-cdi")
	e2e.Binary(t, "rdma-cdi-agent") // install.sh installs it from beside bin
	// Two builds that differ, so that every run really replaces the file:
	// bytes after an ELF's last section do not change what it runs.
	other := filepath.Join(t.TempDir(), "rdma-cdi")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, append(data, make([]byte, 4096)...), 0o755); err != nil {
		t.Fatal(err)
	}
	install := func(b string) { installSh(t, "--binary", b, "--root", root, "--no-generate") }
	install(bin)
	installed := filepath.Join(root, "usr/local/bin/rdma-cdi")
	link := filepath.Join(root, "usr/local/bin/rdma-container-runtime")

	stop := make(chan struct{})
	type result struct {
		runs     int
		failures []string
	}
	done := make(chan result)
	go func() {
		var r result
		for {
			select {
			case <-stop:
				done <- r
				return
			default:
			}
			// What an exec meets, checked far more often than an exec could:
			// the file there, executable, whole (one of the two builds).
			r.runs++
			if fi, err := os.Stat(link); err != nil {
				r.failures = append(r.failures, "through the runtime link: "+err.Error())
			} else if fi.Mode().Perm() != 0o755 || (fi.Size() != int64(len(data)) && fi.Size() != int64(len(data)+4096)) {
				r.failures = append(r.failures, fmt.Sprintf("%s is %v, %d bytes: not a whole, executable build", installed, fi.Mode(), fi.Size()))
			}
			if r.runs%200 == 0 {
				if out, err := exec.Command(installed, "--version").CombinedOutput(); err != nil {
					r.failures = append(r.failures, fmt.Sprintf("exec: %v %s", err, out))
				}
			}
		}
	}()
	for i := 0; i < 10; i++ {
		install([]string{other, bin}[i%2])
	}
	close(stop)
	r := <-done
	if len(r.failures) > 0 {
		t.Fatalf("%d of %d checks during upgrades failed, first: %s", len(r.failures), r.runs, r.failures[0])
	}
	t.Logf("%d checks (%d executions) during 10 upgrades, none failed", r.runs, r.runs/200)
	if left, _ := filepath.Glob(filepath.Join(root, "usr/local/bin/.*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestBootstrapInstallIsIdempotent(t *testing.T) {
	node := e2e.NewFixtureNode(t, "seed002")
	root := t.TempDir()
	bin := e2e.Binary(t, "rdma-cdi")
	e2e.Binary(t, "rdma-cdi-agent")
	gen := append([]string{"--"}, node.Roots()...)
	args := append([]string{"--binary", bin, "--root", root}, gen...)

	first := installSh(t, args...)
	if !strings.Contains(first, "change(s) made") {
		t.Fatalf("first run:\n%s", first)
	}
	for _, p := range []string{
		"usr/local/bin/rdma-cdi", "usr/local/bin/rdma-cdi-agent", "usr/local/bin/rdma-cdi-ldsandbox", "etc/rdma-cdi/config.toml", "etc/systemd/system/rdma-cdi-watch.service",
		"etc/systemd/system/rdma-cdi-generate.service", "etc/containers/oci/hooks.d/rdma-cdi-precreate.json",
		"usr/local/share/rdma-cdi/engines/docker/daemon.json", "var/run/cdi/rdma.example.com-hca.yaml",
	} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	checkManAndCompletions(t, filepath.Join(root, "usr/local/share"), "zsh/site-functions")
	if target, err := os.Readlink(filepath.Join(root, "usr/local/bin/rdma-container-runtime")); err != nil || target != "rdma-cdi" {
		t.Errorf("runtime symlink: %q %v", target, err)
	}
	unit, _ := os.ReadFile(filepath.Join(root, "etc/systemd/system/rdma-cdi-watch.service"))
	hook, _ := os.ReadFile(filepath.Join(root, "etc/containers/oci/hooks.d/rdma-cdi-precreate.json"))
	if !strings.Contains(string(unit), "ExecStart=/usr/local/bin/rdma-cdi-agent ") || !strings.Contains(string(hook), `"/usr/local/bin/rdma-cdi"`) {
		t.Errorf("paths not rewritten to the prefix:\n%s\n%s", unit, hook)
	}
	spec, _ := os.ReadFile(filepath.Join(root, "var/run/cdi/rdma.example.com-hca.yaml"))
	if !strings.Contains(string(spec), filepath.Join(root, "usr/local/bin/rdma-cdi")) {
		t.Errorf("the spec's hooks do not name the installed binary")
	}

	// An operator's config edit survives a reinstall.
	conf := filepath.Join(root, "etc/rdma-cdi/config.toml")
	if err := os.WriteFile(conf, []byte("[cdi]\nclass = \"hca\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	second := installSh(t, args...)
	if !strings.Contains(second, "nothing to do, everything is already in place") || strings.Contains(second, "install ") {
		t.Fatalf("second run changed something:\n%s", second)
	}
	if b, _ := os.ReadFile(conf); string(b) != "[cdi]\nclass = \"hca\"\n" {
		t.Fatalf("config overwritten: %q", b)
	}
	dry := installSh(t, append([]string{"--uninstall", "--dry-run"}, args...)...)
	if !strings.Contains(dry, "would remove") {
		t.Fatalf("dry-run uninstall:\n%s", dry)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/local/bin/rdma-cdi")); err != nil {
		t.Fatal("--dry-run removed the binary")
	}

	installSh(t, "--uninstall", "--root", root)
	for _, p := range []string{"usr/local/bin/rdma-cdi", "usr/local/bin/rdma-cdi-agent", "usr/local/bin/rdma-container-runtime", "etc/systemd/system/rdma-cdi-watch.service",
		"etc/containers/oci/hooks.d/rdma-cdi-precreate.json", "usr/local/share/rdma-cdi", "var/run/cdi/rdma.example.com-hca.yaml",
		"usr/local/share/man/man1/rdma-cdi.1", "usr/local/share/man/man1/rdma-cdi-doctor.1", "usr/local/share/bash-completion/completions/rdma-cdi",
		"usr/local/share/zsh/site-functions/_rdma-cdi", "usr/local/share/fish/vendor_completions.d/rdma-cdi.fish"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("left after uninstall: %s (%v)", p, err)
		}
	}
	if _, err := os.Stat(conf); err != nil {
		t.Error("uninstall removed the config without --purge")
	}
	if again := installSh(t, "--uninstall", "--root", root); !strings.Contains(again, "nothing to do") {
		t.Fatalf("second uninstall:\n%s", again)
	}
	installSh(t, "--uninstall", "--purge", "--root", root)
	if _, err := os.Stat(conf); !errors.Is(err, os.ErrNotExist) {
		t.Error("--purge kept the config")
	}
}

// checkManAndCompletions: share (PREFIX/share) holds rdma-cdi's man pages
// and its completions, which bash loads; zshDir is where the distribution's
// zsh looks, below share.
func checkManAndCompletions(t *testing.T, share, zshDir string) {
	t.Helper()
	for _, p := range []string{"man/man1/rdma-cdi.1", "man/man1/rdma-cdi-doctor.1", "man/man1/rdma-cdi-generate.1",
		zshDir + "/_rdma-cdi", "fish/vendor_completions.d/rdma-cdi.fish"} {
		if _, err := os.Stat(filepath.Join(share, p)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	bash := exec.Command("bash", "-c", `source "$1" && complete -p rdma-cdi`, "-", filepath.Join(share, "bash-completion/completions/rdma-cdi"))
	if out, err := bash.CombinedOutput(); err != nil || !strings.Contains(string(out), "rdma-cdi") {
		t.Errorf("bash does not load the installed completion: %v\n%s", err, out)
	}
}

// buildDeb runs `make deb` with the made-up version 1.2.3-4-gabcdef0 and
// returns the package.
func buildDeb(t *testing.T) string {
	return buildPackage(t, "deb", "1.2.3-4-gabcdef0", "rdma-cdi_1.2.3+4.gabcdef0_amd64.deb")
}

// buildPackage runs `make FORMAT` with a made-up version and returns the
// package, whose file name is want.
func buildPackage(t *testing.T, format, version, want string) string {
	t.Helper()
	out := t.TempDir()
	// BINDIR: the package's binary carries a made-up version; bin/rdma-cdi,
	// which other tests run, must keep the real one.
	build := exec.Command("make", format, "OUT="+out, "BINDIR="+filepath.Join(out, "bin"), "VERSION="+version)
	build.Dir = e2e.RepoRoot()
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make %s: %v\n%s", format, err, b)
	}
	pkg := filepath.Join(out, want)
	if _, err := os.Stat(pkg); err != nil {
		t.Fatalf("make %s did not produce %s: %v", format, pkg, err)
	}
	return pkg
}

// TestRPMInstallIntoScratchRoot installs the RPM into a scratch root with
// rpm --root (its scriptlets run there, under a static busybox), upgrades
// it and erases it: the files land at RHEL's paths, %post runs, an upgrade
// keeps the spec naming the binary (rpm runs the old %preun after the new
// %post), the erase removes it, and an edited config is kept.
func TestRPMInstallIntoScratchRoot(t *testing.T) {
	e2e.RequireRoot(t)
	e2e.RequireBinary(t, "rpm")
	e2e.RequireFile(t, "/bin/busybox", "apt-get install busybox-static")
	first := buildPackage(t, "rpm", "1.2.3", "rdma-cdi-1.2.3-1.x86_64.rpm")
	second := buildPackage(t, "rpm", "1.2.4-rc1", "rdma-cdi-1.2.4~rc1-1.x86_64.rpm")
	root := t.TempDir()
	for _, dir := range []string{"bin", "var/run/cdi"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := exec.Command("cp", "/bin/busybox", filepath.Join(root, "bin/busybox")).CombinedOutput(); err != nil {
		t.Fatalf("cp busybox: %v\n%s", err, b)
	}
	if b, err := exec.Command("chroot", root, "/bin/busybox", "--install", "-s", "/bin").CombinedOutput(); err != nil {
		t.Fatalf("busybox --install: %v\n%s", err, b)
	}
	rpmIn := func(args ...string) string {
		t.Helper()
		b, err := exec.Command("rpm", append([]string{"--root", root}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("rpm %v: %v\n%s", args, err, b)
		}
		return string(b)
	}
	rpmIn("--initdb")
	// --nodeps: the scratch root has no package that provides /bin/sh.
	rpmIn("-i", "--nodeps", first)
	for _, p := range []string{"usr/bin/rdma-cdi", "usr/bin/rdma-cdi-hook", "usr/bin/rdma-cdi-ldsandbox", "usr/bin/rdma-cdi-agent",
		"usr/lib/systemd/system/rdma-cdi-watch.service", "usr/lib/systemd/system/rdma-cdi-generate.service",
		"etc/rdma-cdi/config.toml", "etc/containers/oci/hooks.d/rdma-cdi-precreate.json",
		"usr/share/rdma-cdi/engines/crio/10-rdma.conf", "var/log/rdma-cdi"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	checkManAndCompletions(t, filepath.Join(root, "usr/share"), "zsh/site-functions") // where RHEL's zsh looks
	if l, err := os.Readlink(filepath.Join(root, "usr/bin/rdma-container-runtime")); err != nil || l != "rdma-cdi" {
		t.Errorf("rdma-container-runtime -> %q (%v)", l, err)
	}
	if cfg := rpmIn("-q", "--configfiles", "rdma-cdi"); !strings.Contains(cfg, "/etc/rdma-cdi/config.toml") {
		t.Errorf("the config is no %%config file:\n%s", cfg)
	}

	// A spec whose hooks name the installed binary, and an operator's edit.
	spec := filepath.Join(root, "var/run/cdi/rdma.example.com-hca.yaml")
	if err := os.WriteFile(spec, []byte("hooks: [{path: /usr/bin/rdma-cdi-hook}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(root, "etc/rdma-cdi/config.toml")
	if err := os.WriteFile(conf, []byte("[cdi]\nclass = \"hca\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rpmIn("-U", "--nodeps", second)
	if v := rpmIn("-q", "rdma-cdi"); !strings.HasPrefix(v, "rdma-cdi-1.2.4~rc1-1") {
		t.Errorf("after the upgrade: %s", v)
	}
	if _, err := os.Stat(spec); err != nil {
		t.Errorf("the upgrade removed the spec (the old %%preun acted as on an erase): %v", err)
	}
	if b, _ := os.ReadFile(conf); string(b) != "[cdi]\nclass = \"hca\"\n" {
		t.Errorf("the upgrade replaced the edited config: %q", b)
	}

	rpmIn("-e", "--nodeps", "rdma-cdi")
	for _, p := range []string{"usr/bin/rdma-cdi", "usr/bin/rdma-container-runtime", "usr/lib/systemd/system/rdma-cdi-watch.service",
		"etc/containers/oci/hooks.d/rdma-cdi-precreate.json", "usr/share/man/man1/rdma-cdi.1", "var/run/cdi/rdma.example.com-hca.yaml"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("left after the erase: %s (%v)", p, err)
		}
	}
	if _, err := os.Stat(conf + ".rpmsave"); err != nil {
		t.Errorf("the edited config was not kept as config.toml.rpmsave: %v", err)
	}
}

// TestDebInstallRemove builds the .deb and installs it on this machine.
func TestDebInstallRemove(t *testing.T) {
	if !e2e.InCI() && os.Getenv("RDMA_CDI_TEST_DEB") != "1" {
		t.Skip("installs a package on this machine: runs with CI=true or RDMA_CDI_TEST_DEB=1")
	}
	e2e.RequireRoot(t)
	e2e.RequireBinary(t, "dpkg")
	e2e.RequireBinary(t, "apt-get")
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", "rdma-cdi").Output(); err == nil && strings.Contains(string(out), "installed") {
		e2e.Missing(t, "package rdma-cdi already installed here (%s); not touching it", out)
	}
	deb := buildDeb(t)
	dpkg := func(args ...string) string {
		t.Helper()
		b, err := exec.Command("dpkg", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("dpkg %v: %v\n%s", args, err, b)
		}
		return string(b)
	}
	apt := func(args ...string) {
		t.Helper()
		cmd := exec.Command("apt-get", append([]string{"-y", "-q"}, args...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("apt-get %v: %v\n%s", args, err, b)
		}
	}
	t.Cleanup(func() { _ = exec.Command("dpkg", "--purge", "rdma-cdi").Run() })
	// As an operator installs it, but without its Recommends: rdma-core
	// would come from the mirror on a fresh machine, and its ldconfig run
	// would replace the host's /etc/ld.so.cache under the Kubernetes tests'
	// agents, which mount it (they exit on a stale mount; the e2e node
	// namespace keeps showing them the old file).
	apt("install", "--no-install-recommends", deb)
	v, err := exec.Command("/usr/bin/rdma-cdi", "--version").Output()
	if err != nil || !strings.Contains(string(v), "1.2.3-4-gabcdef0") || !strings.Contains(string(v), "commit") {
		t.Fatalf("installed rdma-cdi --version: %q %v", v, err)
	}
	for _, p := range []string{"/usr/bin/rdma-container-runtime", "/lib/systemd/system/rdma-cdi-watch.service",
		"/etc/rdma-cdi/config.toml", "/etc/containers/oci/hooks.d/rdma-cdi-precreate.json"} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	checkManAndCompletions(t, "/usr/share", "zsh/vendor-completions")
	// The spec's hooks run the installed hook binary, found beside rdma-cdi;
	// the watch unit runs the agent's.
	for _, b := range []string{"/usr/bin/rdma-cdi-hook", "/usr/bin/rdma-cdi-agent"} {
		if v, err := exec.Command(b, "--version").Output(); err != nil || !strings.Contains(string(v), "1.2.3-4-gabcdef0") {
			t.Errorf("installed %s --version: %q %v", b, v, err)
		}
	}
	node := e2e.SharedFixtureNode(t, "gid-not-3")
	spec, err := exec.Command("/usr/bin/rdma-cdi", "--sysfs-root", node.Sys, "--dev-root", node.Dev, "generate", "--format", "json", "--output", "-").Output()
	if err != nil || !strings.Contains(string(spec), `"/usr/bin/rdma-cdi-hook"`) {
		t.Errorf("the installed rdma-cdi's spec does not run /usr/bin/rdma-cdi-hook (%v):\n%s", err, spec)
	}
	// CRI-O's default hooks dir: a precreate hook there stops CRI-O.
	if _, err := os.Stat("/usr/share/containers/oci/hooks.d/rdma-cdi-precreate.json"); !errors.Is(err, os.ErrNotExist) {
		t.Error("the precreate hook is in CRI-O's default hooks dir, where CRI-O refuses to start on it")
	}
	if conf := dpkg("--status", "rdma-cdi"); !strings.Contains(conf, "/etc/rdma-cdi/config.toml") {
		t.Errorf("config is not a conffile:\n%s", conf)
	}
	apt("remove", "rdma-cdi")
	for _, bin := range []string{"/usr/bin/rdma-cdi", "/usr/bin/rdma-cdi-hook", "/usr/bin/rdma-cdi-ldsandbox", "/usr/share/man/man1/rdma-cdi.1", "/usr/share/bash-completion/completions/rdma-cdi"} {
		if _, err := os.Lstat(bin); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after remove", bin)
		}
	}
	if _, err := os.Lstat("/etc/containers/oci/hooks.d/rdma-cdi-precreate.json"); !errors.Is(err, os.ErrNotExist) {
		t.Error("the podman hook is left after remove, naming a binary that is gone")
	}
	if _, err := os.Stat("/etc/rdma-cdi/config.toml"); err != nil {
		t.Error("conffile gone after remove (only purge removes it)")
	}
	dpkg("--purge", "rdma-cdi")
	if _, err := os.Stat("/etc/rdma-cdi"); !errors.Is(err, os.ErrNotExist) {
		t.Error("/etc/rdma-cdi left after purge")
	}
}

// doctorRun runs doctor with PATH holding only a fake podman 4.3.1, so the
// engine lines do not depend on what this machine has installed.
func doctorRun(t *testing.T, node *e2e.FixtureNode, specDir string, extra ...string) (string, error) {
	t.Helper()
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "podman"), []byte("#!/bin/sh\necho 'podman version 4.3.1'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The real CRI-O that make engines-cdi built, where there is one.
	if crio := filepath.Join(e2e.EnginesBinDir(), "crio"); e2e.Exists(crio) {
		if err := os.Symlink(crio, filepath.Join(fake, "crio")); err != nil {
			t.Fatal(err)
		}
	}
	// One reading of the ports, unless extra asks for an interval (the last
	// --sample-interval wins): doctor's two readings 2s apart are for nodes.
	args := append(append(node.Roots(), "--config", node.Config, "--spec-dir", specDir), append([]string{"doctor", "--sample-interval=0"}, extra...)...)
	cmd := exec.Command(e2e.Binary(t, "rdma-cdi"), args...)
	cmd.Env = []string{"PATH=" + fake}
	var so strings.Builder
	cmd.Stdout = &so
	err := cmd.Run()
	return so.String(), err
}

func TestDoctorOnFixture(t *testing.T) {
	e2e.RequireHostRDMALibs(t)
	e2e.RequireFile(t, filepath.Join(e2e.EnginesBinDir(), "crio"), "make engines-cdi")
	node := e2e.NewFixtureNode(t, "seed002")
	specDir := t.TempDir()
	if _, se, err := node.RDMACDI(t, "--spec-dir", specDir, "generate"); err != nil {
		t.Fatalf("generate: %v\n%s", err, se)
	}
	out, err := doctorRun(t, node, specDir, "--sample-interval", "200ms")
	if err != nil {
		t.Fatalf("doctor on a healthy fixture exited with %v:\n%s", err, out)
	}
	spec := filepath.Join(specDir, "rdma.example.com-hca.yaml")
	for _, want := range []string{
		"PASS rdma-devices: 9 device(s), active ports: mlx5_0:1, mlx5_1:1,",
		"PASS uverbs-nodes: " + filepath.Join(node.Dev, "infiniband/uverbs0") + " 231:192,",
		"PASS rdma-netns-mode: shared",
		"PASS rdma-core: rdma-core:",
		"PASS cdi-podman: podman 4.3.1: CDI on by default; reads cdiVersion <= 0.5.0, spec is 0.5.0",
		"PASS cdi-crio: crio 1.34.0: CDI on by default; reads cdiVersion <= 1.0.0, spec is 0.5.0",
		"PASS cdi-spec: " + spec + " (cdiVersion 0.5.0): rdma.example.com/hca=all, rdma.example.com/hca=mlx5_0,",
		"PASS cdi-spec-current: " + spec + " matches what would be rendered now",
		"PASS grey-health: 9 port(s) and 9 PCIe link(s) read twice, ",
	} {
		if !strings.Contains(out, "\n"+want) && !strings.HasPrefix(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !regexpLine.MatchString(line) {
			t.Errorf("line not in the PASS|WARN|FAIL name: detail format: %q", line)
		}
	}

	// Break the node: a uverbs node vanishes, the spec goes stale.
	if err := os.Remove(filepath.Join(node.Dev, "infiniband/uverbs3")); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(spec)
	os.WriteFile(spec, []byte(strings.Replace(string(data), "name: mlx5_8", "name: mlx5_9", 1)), 0o644)
	out, err = doctorRun(t, node, specDir, "--json")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("doctor with FAILs exited with %v, want 1", err)
	}
	var rep doctor.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	status := map[string]doctor.Result{}
	for _, r := range rep.Checks {
		status[r.Name] = r
	}
	if r := status["uverbs-nodes"]; r.Status != doctor.Fail || !strings.Contains(r.Detail, "mlx5_3: "+filepath.Join(node.Dev, "infiniband/uverbs3")+" missing") || r.Fix == "" {
		t.Errorf("uverbs-nodes: %+v", r)
	}
	if r := status["cdi-spec-current"]; r.Status != doctor.Fail || !strings.Contains(r.Detail, "stale") {
		t.Errorf("cdi-spec-current: %+v", r)
	}
	if rep.OK || rep.Summary.Fail != 2 {
		t.Errorf("summary %+v ok=%v", rep.Summary, rep.OK)
	}
}

func TestDoctorNoRDMA(t *testing.T) {
	node := e2e.NewFixtureNode(t, "no-rdma")
	out, err := doctorRun(t, node, t.TempDir())
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("doctor on a node without RDMA exited with %v, want 1:\n%s", err, out)
	}
	if !strings.Contains(out, "FAIL rdma-devices: no RDMA devices under "+node.Sys+"/class/infiniband (fix: ") {
		t.Fatalf("output:\n%s", out)
	}
	if !strings.Contains(out, "PASS cdi-spec-current: no spec expected: nothing to render") {
		t.Fatalf("output:\n%s", out)
	}
}

var regexpLine = regexp.MustCompile(`^(PASS|WARN|FAIL) [a-z0-9-]+: .+$`)

// TestWatchWithoutCapabilities backs the systemd unit's empty
// CapabilityBoundingSet: as uid 0 with no capability at all (and
// no_new_privs), watch reads the fixture, subscribes to netlink and uevents
// and writes the spec into a root-owned dir. It starts as `rdma-cdi watch`,
// which executes rdma-cdi-agent beside it: what an operator's old unit or
// script does.
func TestWatchWithoutCapabilities(t *testing.T) {
	e2e.RequireRoot(t)
	setpriv := e2e.RequireBinary(t, "setpriv")
	e2e.Binary(t, "rdma-cdi-agent")
	node := e2e.NewFixtureNode(t, "seed002")
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	cmd := exec.Command(setpriv, append([]string{"--bounding-set", "-all", "--inh-caps", "-all", "--no-new-privs", e2e.Binary(t, "rdma-cdi")},
		append(node.Roots(), "--config", node.Config, "--spec-dir", filepath.Join(dir, "cdi"), "watch", "--ready-file", ready)...)...)
	var log e2e.SyncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-done
		}
	}()
	watchWait(t, 15*time.Second, "the ready file", func() bool { _, err := os.Stat(ready); return err == nil })
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if !strings.Contains(string(status), "CapEff:\t0000000000000000") || !strings.Contains(string(status), "CapBnd:\t0000000000000000") {
		t.Fatalf("watch runs with capabilities:\n%s", status)
	}
	if _, err := os.Stat(filepath.Join(dir, "cdi/rdma.example.com-hca.yaml")); err != nil {
		t.Fatal(err)
	}
	if l := log.String(); strings.Contains(l, "no netlink events") || strings.Contains(l, "no kernel uevents") {
		t.Fatalf("event sources failed without capabilities:\n%s", l)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := <-done; err != nil {
		t.Fatalf("watch exit: %v\n%s", err, log.String())
	}
}
