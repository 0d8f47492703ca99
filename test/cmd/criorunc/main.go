// Command criorunc is runc for the end-to-end tests' CRI-O nodes: it does
// to a container's OCI config what the settings of containerd's CRI plugin
// do for the containerd nodes, where CRI-O has no such setting.
//
//   - restrict_oom_score_adj: root on the test machines lacks
//     CAP_SYS_RESOURCE, so no process may lower its oom_score_adj, while
//     the kubelet asks -997 for a node-critical pod (the chart's agent);
//     runc then fails ("failed to update /proc/self/oom_score_adj:
//     Permission denied"). process.oomScoreAdj is raised to criorunc's own
//     (conmon's, inherited) where it is lower.
//   - disable_hugetlb_controller (containerd's default): the kubelet gives
//     every container a hugetlb limit per page size, and CRI-O passes them
//     on when /proc/cgroups lists the hugetlb controller, which it does
//     here although no hierarchy of it is mounted; runc then fails
//     ("cannot set hugetlb limit: container could not join or create
//     cgroup"). linux.resources.hugepageLimits is dropped.
//
// It edits the bundle's config.json on create (and run) and then, for every
// command, executes runc from PATH with the same arguments.
//
//	[crio.runtime.runtimes.runc]
//	runtime_path = "/path/to/bin/criorunc"
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// valueFlags are runc's global flags that take a value as the next
// argument.
var valueFlags = map[string]bool{"--root": true, "--log": true, "--log-format": true, "--criu": true, "--rootless": true}

func main() {
	args := os.Args[1:]
	if bundle, ok := createBundle(args); ok {
		if err := edit(filepath.Join(bundle, "config.json")); err != nil {
			fmt.Fprintf(os.Stderr, "criorunc: %v\n", err)
			os.Exit(1)
		}
	}
	runc, err := exec.LookPath("runc")
	if err == nil {
		err = syscall.Exec(runc, append([]string{runc}, args...), os.Environ())
	}
	fmt.Fprintf(os.Stderr, "criorunc: runc: %v\n", err)
	os.Exit(1)
}

// createBundle is the bundle of a create or run command line (--bundle,
// -b, or the working directory); ok is false for other commands.
func createBundle(args []string) (bundle string, ok bool) {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			break
		}
		if valueFlags[a] {
			i++
		}
	}
	if i >= len(args) || (args[i] != "create" && args[i] != "run") {
		return "", false
	}
	bundle = "."
	for j := i + 1; j < len(args); j++ {
		a := args[j]
		switch {
		case (a == "--bundle" || a == "-b") && j+1 < len(args):
			bundle = args[j+1]
			j++
		case strings.HasPrefix(a, "--bundle="):
			bundle = strings.TrimPrefix(a, "--bundle=")
		case strings.HasPrefix(a, "-b="):
			bundle = strings.TrimPrefix(a, "-b=")
		}
	}
	return bundle, true
}

// edit applies both settings to the OCI config at path, keeping
// everything else (numbers as written), and writes it back when it
// changed.
func edit(path string) error {
	own, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return err
	}
	floor, err := strconv.Atoi(strings.TrimSpace(string(own)))
	if err != nil {
		return fmt.Errorf("/proc/self/oom_score_adj: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&spec); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	changed := false
	process, _ := spec["process"].(map[string]any)
	if adj, ok := process["oomScoreAdj"].(json.Number); ok {
		want, err := adj.Int64()
		if err != nil {
			return fmt.Errorf("%s: process.oomScoreAdj %s: %w", path, adj, err)
		}
		if want < int64(floor) {
			process["oomScoreAdj"] = floor
			changed = true
		}
	}
	linux, _ := spec["linux"].(map[string]any)
	resources, _ := linux["resources"].(map[string]any)
	if _, ok := resources["hugepageLimits"]; ok {
		delete(resources, "hugepageLimits")
		changed = true
	}
	if !changed {
		return nil
	}
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp := path + ".criorunc"
	if err := os.WriteFile(tmp, out, st.Mode().Perm()); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
