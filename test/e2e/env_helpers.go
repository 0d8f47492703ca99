// Package e2e holds helpers for end-to-end tests that run real container
// engines (podman, runc, Docker 20.10, containerd 2.x) on this machine.
//
// The helpers need root, the Debian packages of `make deps`, the images of
// `make images` and, for containerd, the binaries of `make engines-cdi`.
// When something is missing a test is skipped, except in CI (CI=true), where
// it fails: CI must never skip engine tests silently.
//
// Engines are started once per test binary when the package's TestMain calls
// Main, and once per test otherwise:
//
//	func TestMain(m *testing.M) { e2e.Main(m) }
package e2e

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// CommandTimeout bounds every engine command the helpers run.
var CommandTimeout = 3 * time.Minute

// InCI reports whether CI=true is set: then missing engines fail tests.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing skips the test with the reason, or fails it in CI.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("%s (CI=true: missing test prerequisites are errors)", msg)
	}
	t.Skip(msg)
}

// RequireRoot skips the test unless it runs as root (fails in CI).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "needs root (run `sudo make test`)")
	}
}

// RequireBinary returns the path of the named program in PATH, or skips the
// test (fails in CI) when it is not installed.
func RequireBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "%s not installed (run `make deps`)", name)
	}
	return p
}

// RequireFile returns path when it exists, else skips (fails in CI) with hint.
func RequireFile(t testing.TB, path, hint string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Missing(t, "%s missing (run `%s`)", path, hint)
	}
	return path
}

var (
	repoRootOnce sync.Once
	repoRoot     string
)

// RepoRoot returns the root of the rdma-cdi repository (the directory of its
// go.mod), found upwards from the working directory. It panics when there is
// none: tests always run inside the repository.
func RepoRoot() string {
	repoRootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			panic(err)
		}
		for {
			b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err == nil && bytes.Contains(b, []byte("module github.com/rdma-cdi/rdma-cdi\n")) {
				repoRoot = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				panic("e2e: repository root (go.mod of github.com/rdma-cdi/rdma-cdi) not found above the working directory")
			}
			dir = parent
		}
	})
	return repoRoot
}

// binaryPackages maps the programs Binary can build to their packages.
var binaryPackages = map[string]string{
	"rdma-cdi":           "./cmd/rdma-cdi",
	"rdma-cdi-hook":      "./cmd/rdma-cdi-hook",
	"rdma-cdi-ldsandbox": "./cmd/rdma-cdi-ldsandbox",
	"rdma-cdi-agent":     "./cmd/rdma-cdi-agent",
	"rdma-cdi-dra":       "./cmd/rdma-cdi-dra",
	"mkfixture":          "./test/cmd/mkfixture",
	"gpudra":             "./test/cmd/gpudra",
	"fakegpu":            "./test/cmd/fakegpu",
	"criorunc":           "./test/cmd/criorunc",
}

var binaryMu sync.Mutex

// Binary returns the absolute path of bin/NAME in the repository ("rdma-cdi"
// or "mkfixture"). It builds it with `go build` when it is missing or older
// than a Go source file of the repository, so `go test` alone never runs a
// stale binary.
func Binary(t testing.TB, name string) string {
	t.Helper()
	if _, ok := binaryPackages[name]; !ok {
		t.Fatalf("e2e.Binary: unknown program %q", name)
	}
	binaryMu.Lock()
	defer binaryMu.Unlock()
	out := filepath.Join(RepoRoot(), "bin", name)
	buildIfStale(t, name)
	// A spec rdma-cdi writes names the rdma-cdi-hook beside it, and the
	// hook runs the rdma-cdi-ldsandbox beside it: a stale one would run
	// the old code under the new.
	for _, other := range runsBeside[name] {
		buildIfStale(t, other)
	}
	return out
}

// runsBeside: the programs a program runs from beside itself.
var runsBeside = map[string][]string{
	"rdma-cdi":      {"rdma-cdi-hook", "rdma-cdi-ldsandbox"},
	"rdma-cdi-hook": {"rdma-cdi-ldsandbox"},
}

// buildIfStale builds program name into bin/ unless it is newer than every
// source of the module.
func buildIfStale(t testing.TB, name string) {
	t.Helper()
	root := RepoRoot()
	out := filepath.Join(root, "bin", name)
	if st, err := os.Stat(out); err == nil && !sourcesNewerThan(root, st.ModTime()) {
		return
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	// Build next to the target and rename, so concurrent test binaries never
	// see a half-written file.
	tmp := fmt.Sprintf("%s.tmp.%d", out, os.Getpid())
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, binaryPackages[name])
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		t.Fatalf("go build %s: %v\n%s", binaryPackages[name], err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		t.Fatal(err)
	}
}

// sourcesNewerThan reports whether a .go file, go.mod or go.sum under root
// (outside _out, bin and hidden dirs) is newer than ts.
func sourcesNewerThan(root string, ts time.Time) bool {
	newer := errors.New("newer")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (name == "_out" || name == "bin" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") || name == "go.mod" || name == "go.sum" {
			if info, err := d.Info(); err == nil && info.ModTime().After(ts) {
				return newer
			}
		}
		return nil
	})
	return errors.Is(err, newer)
}

// Image is a local test image made by `make images`.
type Image struct {
	Name string // file name stem under ImagesDir()
	Ref  string // image reference once imported into an engine
	// Build, for an image `make images` does not make, is the script (from
	// the repository root) that builds it into ImagesDir() when asked; it
	// does nothing when the image is up to date.
	Build string
}

var (
	// BB is a busybox-static image with every busybox applet linked in /bin.
	BB = Image{Name: "bb", Ref: "localhost/rdma-cdi-bb:latest"}
	// Pause is BB as a pod sandbox image: PID 1 waits and exits on SIGTERM.
	Pause = Image{Name: "pause", Ref: "localhost/rdma-cdi-pause:latest"}
	// Glibc is a Debian minbase userland without rdma-core, plus the host's
	// ibv_devices and ibv_devinfo (they need an injected libibverbs).
	Glibc = Image{Name: "glibc", Ref: "localhost/rdma-cdi-glibc:latest"}
	// OwnStack carries trixie's rdma-core 56.1 (newer than any host here)
	// and mlx5probe, which needs its libmlx5's MLX5_1.25 (stacks.sh).
	OwnStack = Image{Name: "ownstack", Ref: "localhost/rdma-cdi-ownstack:latest"}
	// NoProv carries libibverbs without ibverbs-providers.
	NoProv = Image{Name: "noprov", Ref: "localhost/rdma-cdi-noprov:latest"}
	// Lib64 is a RHEL-style layout (/usr/lib64, no /usr/lib/<triplet>)
	// without rdma-core, plus the host's ibv_devices.
	Lib64 = Image{Name: "lib64", Ref: "localhost/rdma-cdi-lib64:latest"}
	// SeedTorch is seed 002's job image under the seed's name: Debian 12
	// with python3-torch (1.13, CPU) and our gloo all-reduce main.py as the
	// seed's main.py (test/images/torch.sh). About 0.9 GB: built on demand
	// (`make images-torch`), not by `make images`.
	SeedTorch = Image{Name: "seedtorch", Ref: "registry.baidubce.com/cce-ai-native/swin-transformer-torch:v2.0",
		Build: "test/images/torch.sh"}
)

var (
	imageBuildMu   sync.Mutex
	imageBuildDone = map[string]error{}
)

// build runs i.Build once per test binary (an image with none: nothing).
// It needs root, as `make images` does.
func (i Image) build(t testing.TB) {
	t.Helper()
	if i.Build == "" {
		return
	}
	imageBuildMu.Lock()
	defer imageBuildMu.Unlock()
	err, done := imageBuildDone[i.Name]
	if !done {
		if os.Geteuid() != 0 {
			Missing(t, "image %s is built on demand by %s, which needs root", i.Name, i.Build)
		}
		cmd := exec.Command("bash", filepath.Join(RepoRoot(), i.Build), ImagesDir())
		cmd.Dir = RepoRoot()
		var out []byte
		if out, err = cmd.CombinedOutput(); err != nil {
			err = fmt.Errorf("%s %s: %w\n%s", i.Build, ImagesDir(), err, out)
		}
		imageBuildDone[i.Name] = err
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Exists says whether path names something (a dangling link does not count).
func Exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ImagesDir returns the directory that `make images` fills.
func ImagesDir() string {
	if dir := os.Getenv("RDMA_CDI_IMAGES_DIR"); dir != "" {
		return dir
	}
	return filepath.Join(userCacheDir(), "rdma-cdi", "images")
}

// RootfsTar returns the path of the image's rootfs tar (skips or fails the
// test when `make images` has not run).
func (i Image) RootfsTar(t testing.TB) string {
	t.Helper()
	i.build(t)
	return RequireFile(t, filepath.Join(ImagesDir(), i.Name+".tar"), "make images")
}

// DockerArchive returns the path of the image as a docker-archive tar
// (`docker load`, `ctr images import`).
func (i Image) DockerArchive(t testing.TB) string {
	t.Helper()
	i.build(t)
	return RequireFile(t, filepath.Join(ImagesDir(), i.Name+"-docker.tar"), "make images")
}

// UniqueID returns prefix followed by random hex digits, for container names,
// CDI vendors and file names that must not clash between concurrent tests.
func UniqueID(prefix string) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b)
}

// UniqueVendor returns a CDI vendor name of its own for this test, e.g.
// "t3f9a0c1b2d4e.rdma-cdi.test". Test packages run in parallel and share
// /var/run/cdi; two specs naming the same device would conflict, so each test
// should use its own vendor.
func UniqueVendor(t testing.TB) string {
	return UniqueID("t") + ".rdma-cdi.test"
}

// CDIDir is the spec directory that every engine reads (podman 4.3 reads only
// /etc/cdi and /var/run/cdi).
const CDIDir = "/var/run/cdi"

// InstallSpec copies the CDI spec at src into /var/run/cdi under a unique file
// name (keeping its .json or .yaml extension), mode 0644, and removes it when
// the test ends. It returns the installed path.
func InstallSpec(t testing.TB, src string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	ext := filepath.Ext(src)
	if ext != ".json" && ext != ".yaml" && ext != ".yml" {
		t.Fatalf("InstallSpec: %s: a CDI spec needs a .json or .yaml extension", src)
	}
	return InstallSpecData(t, strings.TrimSuffix(filepath.Base(src), ext), ext, data)
}

// InstallSpecData writes data as a CDI spec named NAME-<random>EXT in
// /var/run/cdi and removes it when the test ends. ext is ".json" or ".yaml".
func InstallSpecData(t testing.TB, name, ext string, data []byte) string {
	t.Helper()
	RequireRoot(t)
	if err := os.MkdirAll(CDIDir, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(CDIDir, UniqueID(name+"-")+ext)
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dst) })
	return dst
}

// Run runs cmd with CommandTimeout and returns its stdout and stderr. The
// error names the command and carries the tail of stderr.
func Run(cmd *exec.Cmd) (stdout, stderr string, err error) {
	var so, se bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &so
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &se
	}
	// A nil Stdin reads from /dev/null.
	cmd.WaitDelay = 10 * time.Second
	if err = cmd.Start(); err != nil {
		return "", "", fmt.Errorf("%s: %w", cmdLine(cmd), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(CommandTimeout):
		_ = cmd.Process.Kill()
		err = <-done
		err = fmt.Errorf("timed out after %v: %w", CommandTimeout, err)
	}
	if err != nil {
		tail := se.String()
		if len(tail) > 4000 {
			tail = "..." + tail[len(tail)-4000:]
		}
		err = fmt.Errorf("%s: %w\nstderr: %s", cmdLine(cmd), err, tail)
	}
	return so.String(), se.String(), err
}

func cmdLine(cmd *exec.Cmd) string {
	return strings.Join(cmd.Args, " ")
}

// ---------------------------------------------------------------------------
// Sharing engines between the tests of one binary
// ---------------------------------------------------------------------------

var shared struct {
	sync.Mutex
	active   bool
	cleanups []func()
	envs     map[string]*sharedEnv
	setups   []setup
}

type sharedEnv struct {
	once sync.Once
	val  any
	err  error
}

// Main runs the tests of a package and then stops the engines and removes the
// scratch directories the helpers made for the whole binary. Call it from
// TestMain; without it every test gets engines of its own.
func Main(m *testing.M) {
	shared.Lock()
	shared.active = true
	shared.Unlock()
	code := m.Run()
	shared.Lock()
	cl := shared.cleanups
	shared.cleanups = nil
	shared.Unlock()
	for i := len(cl) - 1; i >= 0; i-- {
		cl[i]()
	}
	printSetups(os.Stdout)
	os.Exit(code)
}

// printSetups lists the shared environments the binary made (engines,
// fixture nodes, Kubernetes nodes) with what each took, slowest first:
// the cost tests pay before their first line.
func printSetups(w io.Writer) {
	shared.Lock()
	setups := slices.Clone(shared.setups)
	shared.Unlock()
	if len(setups) == 0 {
		return
	}
	slices.SortStableFunc(setups, func(a, b setup) int { return cmp.Compare(b.took, a.took) })
	var total time.Duration
	for _, s := range setups {
		total += s.took
	}
	fmt.Fprintf(w, "shared environments: %d made in %v\n", len(setups), total.Round(time.Second))
	for _, s := range setups {
		fmt.Fprintf(w, "%8v  %s\n", s.took.Round(100*time.Millisecond), s.name)
	}
}

// Cleaner collects cleanup functions: a test's, or the binary's under Main.
type Cleaner interface{ Cleanup(func()) }

type binaryCleaner struct{}

func (binaryCleaner) Cleanup(f func()) {
	shared.Lock()
	shared.cleanups = append(shared.cleanups, f)
	shared.Unlock()
}

// GetShared returns the environment made by create for key: one for the
// whole binary under Main, one per test otherwise.
func GetShared[T any](t testing.TB, key string, create func(c Cleaner) (T, error)) T {
	t.Helper()
	return GetOwned(t, nil, key, create)
}

// GetOwned is GetShared for an environment that cannot outlive owner (a
// test, or a test's fixture): made once for key while owner runs, and torn
// down with it, so that no idle cluster of a finished test holds the
// machine until the binary ends. A nil owner is the binary (GetShared).
func GetOwned[T any](t testing.TB, owner Cleaner, key string, create func(c Cleaner) (T, error)) T {
	t.Helper()
	shared.Lock()
	if !shared.active {
		shared.Unlock()
		v, err := create(t)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if shared.envs == nil {
		shared.envs = map[string]*sharedEnv{}
	}
	e := shared.envs[key]
	if e == nil {
		e = &sharedEnv{}
		shared.envs[key] = e
		if owner != nil {
			owner.Cleanup(func() {
				shared.Lock()
				delete(shared.envs, key)
				shared.Unlock()
			})
		}
	}
	shared.Unlock()
	e.once.Do(func() {
		var c Cleaner = binaryCleaner{}
		if owner != nil {
			c = owner
		}
		start := time.Now()
		e.val, e.err = create(c)
		recordSetup(key, time.Since(start))
	})
	if e.err != nil {
		t.Fatal(e.err)
	}
	return e.val.(T)
}

// recordSetup notes what a shared environment took to make, for the
// summary Main prints.
func recordSetup(key string, took time.Duration) {
	name, rest, _ := strings.Cut(key, "\x00")
	if dir, _, _ := strings.Cut(rest, "\x00"); dir != "" {
		name += " " + filepath.Base(dir)
	}
	shared.Lock()
	shared.setups = append(shared.setups, setup{name, took})
	shared.Unlock()
}

type setup struct {
	name string
	took time.Duration
}

// daemonFiles are where a daemon of the tests keeps its state.
type daemonFiles struct {
	Dir    string // scratch root of this daemon
	Socket string // its API socket
	Log    string // its log file
}

// newDaemonFiles makes a daemon's scratch dir (cleaned up by c), with the
// socket name.sock and the log daemon.log in it.
func newDaemonFiles(c Cleaner, name, daemon string) (daemonFiles, error) {
	dir, err := ScratchDir(c, name)
	return daemonFiles{Dir: dir, Socket: filepath.Join(dir, name+".sock"), Log: filepath.Join(dir, daemon+".log")}, err
}

// ScratchDir makes a temporary directory removed by c. Paths stay short:
// unix sockets live in it.
func ScratchDir(c Cleaner, prefix string) (string, error) {
	d, err := os.MkdirTemp("", "rdma-cdi-e2e-"+prefix+"-")
	if err != nil {
		return "", err
	}
	c.Cleanup(func() { removeAll(d) })
	return d, nil
}

// removeAll removes dir, first unmounting anything an engine left mounted
// below it.
func removeAll(dir string) {
	if b, err := os.ReadFile("/proc/self/mounts"); err == nil {
		var mnts []string
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 1 && (f[1] == dir || strings.HasPrefix(f[1], dir+"/")) {
				mnts = append(mnts, f[1])
			}
		}
		for i := len(mnts) - 1; i >= 0; i-- {
			_ = exec.Command("umount", "-l", mnts[i]).Run()
		}
	}
	_ = os.RemoveAll(dir)
}

// WaitFor polls ok until it returns nil or the deadline passes.
func WaitFor(ctx context.Context, d time.Duration, ok func() error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		err := ok()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// daemon describes a long-running engine process for startDaemon.
type daemon struct {
	name        string
	cmd         *exec.Cmd
	log         string        // the daemon's stdout and stderr go here
	stopTimeout time.Duration // SIGTERM grace before SIGKILL of the group
	beforeStop  func()        // e.g. remove containers so it stops quickly
	ready       func() error  // polled until nil
}

// startDaemon starts d in its own process group, stops it at cleanup
// (SIGTERM, then SIGKILL of the group), and waits until it answers.
func startDaemon(c Cleaner, d daemon) error {
	logf, err := os.Create(d.log)
	if err != nil {
		return err
	}
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	go func() { _ = d.cmd.Wait(); logf.Close(); close(exited) }()
	c.Cleanup(func() {
		d.beforeStop()
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(d.stopTimeout):
			_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	// A daemon that exits will never answer: stop waiting at once.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		select {
		case <-exited:
			stop()
		case <-ctx.Done():
		}
	}()
	err = WaitFor(ctx, 60*time.Second, func() error {
		select {
		case <-exited:
			return fmt.Errorf("%s exited", d.name)
		default:
		}
		return d.ready()
	})
	if err != nil {
		return fmt.Errorf("%s did not come up: %v\n%s", d.name, err, TailFile(d.log, 3000))
	}
	return nil
}
