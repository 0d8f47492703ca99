// Command mkdeb builds rdma-cdi's Debian package with nfpm, used as a
// library: the binary, the rdma-container-runtime symlink, the systemd units,
// the config (a conffile), the podman hook and the engine snippets.
//
//	go run . -binary ../../../bin/rdma-cdi -version 1.2.3 -out ../../../_out
//
// It lives in its own module so that nfpm's dependencies stay out of
// rdma-cdi's go.mod.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
)

func main() {
	var (
		binary  = flag.String("binary", "bin/rdma-cdi", "rdma-cdi binary (static, linux/amd64)")
		deploy  = flag.String("deploy", "deploy", "the repository's deploy/ directory")
		version = flag.String("version", "0.0.0", "package version (git describe output is fine)")
		arch    = flag.String("arch", "amd64", "Debian architecture")
		out     = flag.String("out", "_out", "output directory")
	)
	flag.Parse()
	path, err := build(*binary, *deploy, DebianVersion(*version), *arch, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkdeb:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

var debVersionRE = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~-]*$`)

// DebianVersion turns a git describe output into a Debian version: a
// leading "v" goes, "-N-gSHA" becomes "+N.gSHA", and anything that does not
// start with a digit (an untagged tree) becomes "0.0.0~git<it>".
func DebianVersion(v string) string {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if m := regexp.MustCompile(`^(.*)-([0-9]+)-g([0-9a-f]+)(-dirty)?$`).FindStringSubmatch(v); m != nil {
		v = m[1] + "+" + m[2] + ".g" + m[3]
		if m[4] != "" {
			v += ".dirty"
		}
	}
	v = strings.ReplaceAll(v, "_", ".")
	if debVersionRE.MatchString(v) {
		return v
	}
	clean := regexp.MustCompile(`[^A-Za-z0-9.+~]+`).ReplaceAllString(v, ".")
	return "0.0.0~git" + strings.Trim(clean, ".")
}

func build(binary, deployDir, version, arch, outDir string) (string, error) {
	if _, err := os.Stat(binary); err != nil {
		return "", fmt.Errorf("binary: %w (run make build first)", err)
	}
	script := func(name string) string { return filepath.Join(deployDir, "packaging", name) }
	file := func(src, dst string, mode os.FileMode) *files.Content {
		return &files.Content{Source: src, Destination: dst, FileInfo: &files.ContentFileInfo{Mode: mode}}
	}
	hookBinary := filepath.Join(filepath.Dir(binary), "rdma-cdi-hook")
	if _, err := os.Stat(hookBinary); err != nil {
		return "", fmt.Errorf("hook binary: %w (run make build first)", err)
	}
	agentBinary := filepath.Join(filepath.Dir(binary), "rdma-cdi-agent")
	if _, err := os.Stat(agentBinary); err != nil {
		return "", fmt.Errorf("agent binary: %w (run make build first)", err)
	}
	contents := files.Contents{
		file(binary, "/usr/bin/rdma-cdi", 0o755),
		file(hookBinary, "/usr/bin/rdma-cdi-hook", 0o755),
		file(agentBinary, "/usr/bin/rdma-cdi-agent", 0o755),
		{Source: "rdma-cdi", Destination: "/usr/bin/rdma-container-runtime", Type: files.TypeSymlink},
		file(filepath.Join(deployDir, "systemd/rdma-cdi-watch.service"), "/lib/systemd/system/rdma-cdi-watch.service", 0o644),
		file(filepath.Join(deployDir, "systemd/rdma-cdi-generate.service"), "/lib/systemd/system/rdma-cdi-generate.service", 0o644),
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

	info := nfpm.WithDefaults(&nfpm.Info{
		Name:          "rdma-cdi",
		Arch:          arch,
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none",
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
			Recommends: []string{"ibverbs-providers", "rdma-core"},
			Contents:   contents,
			Scripts: nfpm.Scripts{
				PostInstall: script("postinst"),
				PreRemove:   script("prerm"),
				PostRemove:  script("postrm"),
			},
		},
	})
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return "", err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(outDir, fmt.Sprintf("rdma-cdi_%s_%s.deb", version, arch))
	tmp, err := os.CreateTemp(outDir, ".rdma-cdi-*.deb")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if err := deb.Default.Package(info, tmp); err != nil {
		tmp.Close()
		return "", fmt.Errorf("deb: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return "", err
	}
	return path, os.Rename(tmp.Name(), path)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
