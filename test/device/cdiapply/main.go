// Command cdiapply injects CDI devices into an OCI config.json with the CDI
// library's own cache, the code path the engines run, so that a runtime
// started by hand (runc, no engine) gets exactly what podman or containerd
// would give it. test/device/gpu_cdi.sh uses it to apply NVIDIA's spec and
// ours to one container.
//
//	cdiapply -spec-dir DIR [-spec-dir DIR...] -config BUNDLE/config.json DEVICE...
//
// DEVICE is a fully qualified CDI name (vendor/class=name). It rewrites the
// config in place and prints, per spec, what the injection added.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

type dirList []string

func (d *dirList) String() string     { return strings.Join(*d, ",") }
func (d *dirList) Set(v string) error { *d = append(*d, v); return nil }

func main() {
	var dirs dirList
	flag.Var(&dirs, "spec-dir", "CDI spec directory (repeatable)")
	config := flag.String("config", "config.json", "OCI config.json to rewrite")
	flag.Parse()
	if err := run(dirs, *config, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "cdiapply:", err)
		os.Exit(1)
	}
}

func run(dirs []string, config string, devices []string) error {
	if len(dirs) == 0 || len(devices) == 0 {
		return fmt.Errorf("need -spec-dir and at least one device")
	}
	data, err := os.ReadFile(config)
	if err != nil {
		return err
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return fmt.Errorf("%s: %w", config, err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return err
	}
	// A spec the cache refused is not fatal for the others, but say so.
	for path, errs := range cache.GetErrors() {
		for _, e := range errs {
			fmt.Printf("cdiapply: spec error %s: %v\n", path, e)
		}
	}
	for _, v := range cache.ListVendors() {
		for _, s := range cache.GetVendorSpecs(v) {
			fmt.Printf("cdiapply: loaded %s (kind %s, cdiVersion %s, %d devices)\n", s.GetPath(), s.Kind, s.Version, len(s.Devices))
		}
	}
	before := summarize(&spec)
	if unresolved, err := cache.InjectDevices(&spec, devices...); err != nil {
		return fmt.Errorf("InjectDevices %v: %w (unresolved: %v)", devices, err, unresolved)
	}
	after := summarize(&spec)
	fmt.Printf("cdiapply: injected %s\n", strings.Join(devices, " "))
	for _, k := range sortedKeys(after) {
		fmt.Printf("cdiapply:   %-22s %d -> %d\n", k, before[k], after[k])
	}
	if spec.Hooks != nil {
		for _, h := range spec.Hooks.CreateRuntime {
			fmt.Printf("cdiapply:   createRuntime   hook %s %s\n", h.Path, hookVerb(h.Args))
		}
		for _, h := range spec.Hooks.CreateContainer {
			fmt.Printf("cdiapply:   createContainer hook %s %s\n", h.Path, hookVerb(h.Args))
		}
	}
	out, err := json.MarshalIndent(&spec, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(config, append(out, '\n'), 0o644)
}

// hookVerb is the hook's first arguments after argv[0], enough to tell the
// hooks apart in the log (our hook's --lend list is long).
func hookVerb(args []string) string {
	if len(args) <= 1 {
		return ""
	}
	a := args[1:]
	if len(a) > 3 {
		a = append(a[:3:3], "...")
	}
	return strings.Join(a, " ")
}

// summarize counts what CDI edits can add to a config.
func summarize(s *specs.Spec) map[string]int {
	m := map[string]int{"env": 0, "mounts": len(s.Mounts)}
	if s.Process != nil {
		m["env"] = len(s.Process.Env)
	}
	if s.Linux != nil {
		m["linux.devices"] = len(s.Linux.Devices)
		if s.Linux.Resources != nil {
			m["linux.resources.devices"] = len(s.Linux.Resources.Devices)
		}
	}
	if s.Hooks != nil {
		m["hooks.createRuntime"] = len(s.Hooks.CreateRuntime)
		m["hooks.createContainer"] = len(s.Hooks.CreateContainer)
		m["hooks.startContainer"] = len(s.Hooks.StartContainer)
		m["hooks.poststart"] = len(s.Hooks.Poststart)
	}
	return m
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
