// Command mkpkg builds rdma-cdi's packages with nfpm, used as a library:
// a .deb for Debian and Ubuntu, an .rpm for RHEL, Rocky and Fedora. Both
// hold the binaries, the rdma-container-runtime symlink, the systemd units,
// the config (a conffile), the podman hook, the engine snippets, and the
// man pages and completions the binary writes of itself.
//
//	go run . -format rpm -binary ../../../bin/rdma-cdi -version 1.2.3 -out ../../../_out
//
// It lives in its own module so that nfpm's dependencies stay out of
// rdma-cdi's go.mod.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
	"github.com/goreleaser/nfpm/v2/rpm"
)

func main() {
	var (
		format  = flag.String("format", "deb", "package format: deb or rpm")
		binary  = flag.String("binary", "bin/rdma-cdi", "rdma-cdi binary (static, linux/amd64)")
		deploy  = flag.String("deploy", "deploy", "the repository's deploy/ directory")
		version = flag.String("version", "0.0.0", "package version (git describe output is fine)")
		arch    = flag.String("arch", "amd64", "architecture, as Go names it (nfpm maps it to the format's)")
		out     = flag.String("out", "_out", "output directory")
	)
	flag.Parse()
	layout, ok := layouts[*format]
	if !ok {
		fmt.Fprintf(os.Stderr, "mkpkg: -format %q: want deb or rpm\n", *format)
		os.Exit(2)
	}
	path, err := build(layout, *binary, *deploy, PackageVersion(*version), *arch, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkpkg:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

// layout is what differs between the formats: where the distributions
// keep units and zsh completions, and the weak dependencies' names. The
// maintainer scripts are the same files (postinst, prerm, postrm), which
// tell dpkg's arguments from rpm's.
type layout struct {
	format     string
	packager   nfpm.Packager
	unitDir    string
	zshDir     string
	recommends []string
	// fileName is the package's file name for a version and Go arch.
	fileName func(version, arch string) string
}

var layouts = map[string]layout{
	"deb": {
		format: "deb", packager: deb.Default, unitDir: "/lib/systemd/system", zshDir: "/usr/share/zsh/vendor-completions",
		recommends: []string{"ibverbs-providers", "rdma-core"},
		fileName:   func(v, arch string) string { return fmt.Sprintf("rdma-cdi_%s_%s.deb", v, arch) },
	},
	"rpm": {
		format: "rpm", packager: rpm.DefaultRPM, unitDir: "/usr/lib/systemd/system", zshDir: "/usr/share/zsh/site-functions",
		recommends: []string{"rdma-core", "libibverbs", "librdmacm"},
		fileName: func(v, arch string) string {
			return fmt.Sprintf("rdma-cdi-%s-1.%s.rpm", v, map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[arch])
		},
	},
}

var versionRE = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*$`)

// PackageVersion turns a git describe output into a version both dpkg and
// rpm accept (rpm allows no "-"): a leading "v" goes, "-N-gSHA" becomes
// "+N.gSHA", another "-" (a pre-release, 1.2.3-rc1) "~", which both sort
// before the release, and anything that does not start with a digit (an
// untagged tree) becomes "0.0.0~git<it>".
func PackageVersion(v string) string {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if m := regexp.MustCompile(`^(.*)-([0-9]+)-g([0-9a-f]+)(-dirty)?$`).FindStringSubmatch(v); m != nil {
		v = m[1] + "+" + m[2] + ".g" + m[3]
		if m[4] != "" {
			v += ".dirty"
		}
	}
	v = strings.NewReplacer("_", ".", "-", "~").Replace(v)
	if versionRE.MatchString(v) {
		return v
	}
	clean := regexp.MustCompile(`[^A-Za-z0-9.+~]+`).ReplaceAllString(v, ".")
	return "0.0.0~git" + strings.Trim(clean, ".")
}

func build(l layout, binary, deployDir, version, arch, outDir string) (string, error) {
	if _, err := os.Stat(binary); err != nil {
		return "", fmt.Errorf("binary: %w (run make build first)", err)
	}
	file := func(src, dst string, mode os.FileMode) *files.Content {
		return &files.Content{Source: src, Destination: dst, FileInfo: &files.ContentFileInfo{Mode: mode}}
	}
	hookBinary := filepath.Join(filepath.Dir(binary), "rdma-cdi-hook")
	if _, err := os.Stat(hookBinary); err != nil {
		return "", fmt.Errorf("hook binary: %w (run make build first)", err)
	}
	// The hook's ldconfig sandbox, which the hook runs from beside itself.
	sandboxBinary := filepath.Join(filepath.Dir(binary), "rdma-cdi-ldsandbox")
	if _, err := os.Stat(sandboxBinary); err != nil {
		return "", fmt.Errorf("ldconfig sandbox binary: %w (run make build first)", err)
	}
	agentBinary := filepath.Join(filepath.Dir(binary), "rdma-cdi-agent")
	if _, err := os.Stat(agentBinary); err != nil {
		return "", fmt.Errorf("agent binary: %w (run make build first)", err)
	}
	contents := files.Contents{
		file(binary, "/usr/bin/rdma-cdi", 0o755),
		file(hookBinary, "/usr/bin/rdma-cdi-hook", 0o755),
		file(sandboxBinary, "/usr/bin/rdma-cdi-ldsandbox", 0o755),
		file(agentBinary, "/usr/bin/rdma-cdi-agent", 0o755),
		{Source: "rdma-cdi", Destination: "/usr/bin/rdma-container-runtime", Type: files.TypeSymlink},
		file(filepath.Join(deployDir, "systemd/rdma-cdi-watch.service"), l.unitDir+"/rdma-cdi-watch.service", 0o644),
		file(filepath.Join(deployDir, "systemd/rdma-cdi-generate.service"), l.unitDir+"/rdma-cdi-generate.service", 0o644),
		{Source: filepath.Join(deployDir, "bootstrap/config.toml"), Destination: "/etc/rdma-cdi/config.toml",
			Type: files.TypeConfigNoReplace, FileInfo: &files.ContentFileInfo{Mode: 0o644}},
		file(filepath.Join(deployDir, "bootstrap/config.toml"), "/usr/share/rdma-cdi/config.toml.example", 0o644),
	}
	// podman reads /etc/containers/oci/hooks.d; CRI-O, by default, only
	// /usr/share/containers/oci/hooks.d, and it refuses to start on a hook
	// whose stage it does not know (precreate is podman's alone). A plain
	// file, not a conffile: removing the package must not leave a hook
	// naming a binary that is gone.
	if hook := filepath.Join(deployDir, "hooks.d/rdma-cdi-precreate.json"); exists(hook) {
		contents = append(contents, file(hook, "/etc/containers/oci/hooks.d/rdma-cdi-precreate.json", 0o644))
	}
	var snippets []string
	for _, dir := range []string{"docker", "containerd", "crio", "hooks.d", "kubernetes"} {
		_ = filepath.WalkDir(filepath.Join(deployDir, dir), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				snippets = append(snippets, p)
			}
			return nil
		})
	}
	sort.Strings(snippets)
	for _, p := range snippets {
		rel, _ := filepath.Rel(deployDir, p)
		contents = append(contents, file(p, "/usr/share/rdma-cdi/engines/"+filepath.ToSlash(rel), 0o644))
	}
	docs, err := os.MkdirTemp("", "rdma-cdi-docs-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(docs)
	generated, err := manAndCompletions(binary, docs, l.zshDir)
	if err != nil {
		return "", err
	}
	for src, dst := range generated {
		contents = append(contents, file(src, dst, 0o644))
	}
	sort.Slice(contents, func(i, j int) bool { return contents[i].Destination < contents[j].Destination })

	script := func(name string) string { return filepath.Join(deployDir, "packaging", name) }
	info := nfpm.WithDefaults(&nfpm.Info{
		Name:          "rdma-cdi",
		Arch:          arch,
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none",
		Release:       "1",
		Section:       "admin",
		Priority:      "optional",
		Maintainer:    "rdma-cdi maintainers <rdma-cdi@example.com>",
		Description: "RDMA for containers through CDI\n" +
			"Discovers RDMA HCAs, writes CDI specs for them (device nodes, rdma-core\n" +
			"libraries, NCCL settings) and runs the container hooks CDI cannot express.",
		Homepage: "https://github.com/rdma-cdi/rdma-cdi",
		License:  "Apache-2.0",
		MTime:    time.Unix(0, 0).UTC(),
		Overridables: nfpm.Overridables{
			Recommends: l.recommends,
			Contents:   contents,
			Scripts: nfpm.Scripts{
				PostInstall: script("postinst"),
				PreRemove:   script("prerm"),
				PostRemove:  script("postrm"),
			},
		},
	})
	if l.format == "rpm" {
		info.RPM.Group = "System Environment/Base"
	}
	if err := nfpm.PrepareForPackager(info, l.format); err != nil {
		return "", err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(outDir, l.fileName(version, arch))
	tmp, err := os.CreateTemp(outDir, ".rdma-cdi-*."+l.format)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if err := l.packager.Package(info, tmp); err != nil {
		tmp.Close()
		return "", fmt.Errorf("%s: %w", l.format, err)
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return "", err
	}
	return path, os.Rename(tmp.Name(), path)
}

// manAndCompletions has binary write its man pages and its bash, zsh and
// fish completions under dir (with the default config, whatever this
// machine's is), and returns where each file goes in the package, by its
// path under dir.
func manAndCompletions(binary, dir, zshDir string) (map[string]string, error) {
	run := func(args ...string) ([]byte, error) {
		out, err := exec.Command(binary, append([]string{"--config", os.DevNull}, args...)...).Output()
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", binary, strings.Join(args, " "), err)
		}
		return out, nil
	}
	if _, err := run("man", filepath.Join(dir, "man1")); err != nil {
		return nil, err
	}
	pages, _ := filepath.Glob(filepath.Join(dir, "man1", "*.1"))
	if len(pages) == 0 {
		return nil, fmt.Errorf("%s man wrote no pages", binary)
	}
	out := map[string]string{}
	for _, p := range pages {
		out[p] = "/usr/share/man/man1/" + filepath.Base(p)
	}
	for shell, dst := range map[string]string{
		"bash": "/usr/share/bash-completion/completions/rdma-cdi",
		"zsh":  zshDir + "/_rdma-cdi",
		"fish": "/usr/share/fish/vendor_completions.d/rdma-cdi.fish",
	} {
		script, err := run("completion", shell)
		if err != nil {
			return nil, err
		}
		src := filepath.Join(dir, "completion."+shell)
		if err := os.WriteFile(src, script, 0o644); err != nil {
			return nil, err
		}
		out[src] = dst
	}
	return out, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
