// Package runtimewrap is the OCI runtime wrapper (rdma-container-runtime):
// its Main, runc's command line, an atomic rewrite of the bundle's
// config.json, runc-style log lines and the exec of the real runtime. The
// edit itself is pkg/ociapply's.
package runtimewrap

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Args is what the wrapper needs from runc's argv. The argv itself is
// always passed on untouched.
type Args struct {
	// Command is the runc command ("create", "start", "delete", ...), or ""
	// when argv holds only global flags (e.g. --version).
	Command string
	// Bundle is the bundle dir of create and run as written: "" means the
	// flag was absent, and runc then uses the working directory.
	Bundle string
	// Log and LogFormat are runc's global --log and --log-format.
	Log, LogFormat string
}

// EditsBundle reports whether the command reads the bundle's config.json.
func (a Args) EditsBundle() bool { return a.Command == "create" || a.Command == "run" }

// BundleDir returns the bundle dir to edit, defaulting to cwd as runc does.
func (a Args) BundleDir(cwd string) string {
	if a.Bundle == "" {
		return cwd
	}
	if filepath.IsAbs(a.Bundle) {
		return a.Bundle
	}
	return filepath.Join(cwd, a.Bundle)
}

// runc's global flags that take a value (urfave/cli accepts one or two
// dashes, and NAME=VALUE).
var globalValueFlags = map[string]bool{"log": true, "log-format": true, "root": true, "criu": true, "rootless": true}

// Value flags of runc create and run.
var createValueFlags = map[string]bool{"bundle": true, "b": true, "console-socket": true, "pid-file": true, "preserve-fds": true}

// splitFlag returns the flag name of arg without its dashes and the value
// after "=", if any; ok is false when arg is not a flag.
func splitFlag(arg string) (name, value string, hasValue, ok bool) {
	if len(arg) < 2 || arg[0] != '-' || arg == "--" {
		return "", "", false, false
	}
	name = strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	name, value, hasValue = strings.Cut(name, "=")
	return name, value, hasValue, true
}

// Parse reads runc's argv (without argv[0]): global flags, the command,
// then the command's flags in any order, "--bundle=B", "-b B" and so on.
func Parse(argv []string) Args {
	var a Args
	i := 0
	for ; i < len(argv); i++ {
		name, value, hasValue, ok := splitFlag(argv[i])
		if !ok {
			break
		}
		if globalValueFlags[name] && !hasValue && i+1 < len(argv) {
			i++
			value = argv[i]
		}
		switch name {
		case "log":
			a.Log = value
		case "log-format":
			a.LogFormat = value
		}
	}
	if i < len(argv) && argv[i] == "--" {
		i++
	}
	if i >= len(argv) {
		return a
	}
	a.Command = argv[i]
	if !a.EditsBundle() {
		return a
	}
	for i++; i < len(argv); i++ {
		if argv[i] == "--" {
			break
		}
		name, value, hasValue, ok := splitFlag(argv[i])
		if !ok {
			continue // the container id
		}
		if createValueFlags[name] && !hasValue && i+1 < len(argv) {
			i++
			value = argv[i]
		}
		if name == "bundle" || name == "b" {
			a.Bundle = value
		}
	}
	return a
}

// ConfigPath is the config.json of bundle.
func ConfigPath(bundle string) string { return filepath.Join(bundle, "config.json") }

// EditConfig reads bundle/config.json, passes it to edit and, when edit
// reports a change, replaces the file atomically: a temp file in the same
// dir, written and fsynced, given the original mode (and owner, where we
// may), renamed over it, and the dir fsynced. On any error the original
// file is left as it was.
func EditConfig(bundle string, edit func([]byte) ([]byte, bool, error)) error {
	path := ConfigPath(bundle)
	info, err := os.Stat(bundle)
	if err != nil {
		return fmt.Errorf("bundle %s: %w", bundle, err)
	}
	if !info.IsDir() {
		return fmt.Errorf("bundle %s: not a directory", bundle)
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	out, changed, err := edit(orig)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !changed {
		return nil
	}
	return WriteAtomic(path, out, st)
}

// WriteAtomic replaces path with data, keeping the mode (and owner) of like.
func WriteAtomic(path string, data []byte, like os.FileInfo) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".rdma-cdi-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Chmod(like.Mode().Perm()); err != nil {
		return err
	}
	if sys, ok := like.Sys().(*syscall.Stat_t); ok && (int(sys.Uid) != os.Geteuid() || int(sys.Gid) != os.Getegid()) {
		_ = tmp.Chown(int(sys.Uid), int(sys.Gid)) // best effort: only root may give files away
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// SystemPath is searched when the engine gives the wrapper no PATH: conmon
// runs `delete --force` with an empty environment.
const SystemPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// SearchPath is the PATH to find the runtime in: pathEnv, or SystemPath
// when it is empty.
func SearchPath(pathEnv string) string {
	if pathEnv == "" {
		return SystemPath
	}
	return pathEnv
}

// FindRuntime resolves the real runtime: an absolute or relative path is
// taken as is, a bare name is looked up in PATH. Whatever is this very
// binary (self, e.g. os.Executable()) is skipped, so a wrapper installed
// as "runc" earlier in PATH never execs itself.
func FindRuntime(name, self, pathEnv string) (string, error) {
	selfInfo, selfErr := os.Stat(self)
	isSelf := func(p string) bool {
		info, err := os.Stat(p)
		return err == nil && selfErr == nil && os.SameFile(info, selfInfo)
	}
	if name == "" {
		return "", errors.New("no runtime path configured")
	}
	if strings.Contains(name, "/") {
		if isSelf(name) {
			return "", fmt.Errorf("runtime path %s is this wrapper itself; set runtime.path to the real runtime (e.g. /usr/sbin/runc)", name)
		}
		if _, err := os.Stat(name); err != nil {
			return "", fmt.Errorf("runtime %w", err)
		}
		return name, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		info, err := os.Stat(p)
		if err != nil || info.IsDir() || info.Mode()&0o111 == 0 || isSelf(p) {
			continue
		}
		return p, nil
	}
	return "", fmt.Errorf("runtime %q not found in PATH (%s) other than this wrapper; set runtime.path", name, pathEnv)
}

// Exec replaces the process with the runtime at path, argv[0] = path and
// args passed untouched. It returns only on failure.
func Exec(path string, args, env []string) error {
	argv := append([]string{path}, args...)
	err := syscall.Exec(path, argv, env)
	return fmt.Errorf("exec %s: %w", path, err)
}

// LogLine appends one line to runc's --log file in its format: logrus
// JSON ({"level","msg","time"}) when format is "json", logrus text
// otherwise. The engine shows the last error line of this file when a
// container fails to start.
func LogLine(path, format, level, msg string) error {
	if path == "" {
		return nil
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	var line []byte
	if format == "json" {
		var err error
		line, err = json.Marshal(struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Time  string `json:"time"`
		}{level, msg, now})
		if err != nil {
			return err
		}
	} else {
		line = fmt.Appendf(nil, "time=%q level=%s msg=%q", now, level, msg)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
