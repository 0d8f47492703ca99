// Package hooks implements the container hooks `rdma-cdi hook <name>`:
// update-ldcache and nccl-conf (createContainer) and memlock
// (createRuntime). Each reads the OCI state on stdin, loads the bundle's
// config.json, checks that the state's pid really is this container, and
// touches the container's root only through pathrs-lite (openat2
// RESOLVE_IN_ROOT), so that no symlink or ".." in an image reaches the host.
//
// The hooks never read the container's environment for their own
// behavior, and never run a binary from the container.
package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// MaxStateSize bounds the OCI state read from stdin. Real states are a few
// hundred bytes plus annotations.
const MaxStateSize = 1 << 20

// MaxConfigSize bounds the bundle's config.json.
const MaxConfigSize = 16 << 20

// ReadState parses the OCI state JSON ({ociVersion,id,status,pid,bundle,
// annotations}) an engine writes to a hook's stdin. It is strict about what
// the hooks rely on (one JSON object, types, ociVersion, id, bundle, a pid >
// 0) and tolerant of fields a newer runtime may add, as specs outlive
// binaries. Every error starts with "OCI state on stdin:".
func ReadState(r io.Reader) (specs.State, error) {
	var st specs.State
	data, err := io.ReadAll(io.LimitReader(r, MaxStateSize+1))
	if err != nil {
		return st, fmt.Errorf("OCI state on stdin: %w", err)
	}
	if len(data) > MaxStateSize {
		return st, fmt.Errorf("OCI state on stdin: larger than %d bytes", MaxStateSize)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return st, errors.New("OCI state on stdin: empty (hooks are run by a container engine, which writes the state JSON)")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&st); err != nil {
		return st, fmt.Errorf("OCI state on stdin: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return st, errors.New("OCI state on stdin: trailing data after the JSON object")
	}
	switch {
	case st.Version == "":
		return st, errors.New("OCI state on stdin: ociVersion missing")
	case st.ID == "":
		return st, errors.New("OCI state on stdin: id missing")
	case st.Bundle == "":
		return st, errors.New("OCI state on stdin: bundle missing")
	case !filepath.IsAbs(st.Bundle):
		return st, fmt.Errorf("OCI state on stdin: bundle %q is not an absolute path", st.Bundle)
	case st.Pid <= 0:
		return st, fmt.Errorf("OCI state on stdin: pid %d: want the container's process id (> 0)", st.Pid)
	}
	return st, nil
}

// LoadSpec reads bundle/config.json, bounded and strict about JSON syntax.
func LoadSpec(bundle string) (*specs.Spec, error) {
	if !filepath.IsAbs(bundle) {
		return nil, fmt.Errorf("bundle %q is not an absolute path", bundle)
	}
	fi, err := os.Stat(bundle)
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("bundle %s is not a directory", bundle)
	}
	path := filepath.Join(bundle, "config.json")
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bundle config: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("bundle config: %w", err)
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("bundle config %s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("bundle config %s: %w", path, err)
	}
	if len(data) > MaxConfigSize {
		return nil, fmt.Errorf("bundle config %s: larger than %d bytes", path, MaxConfigSize)
	}
	var used configUsed
	if err := json.Unmarshal(data, &used); err != nil {
		return nil, fmt.Errorf("bundle config %s: %w", path, err)
	}
	if used.Root == nil || used.Root.Path == "" {
		return nil, fmt.Errorf("bundle config %s: root.path missing", path)
	}
	return used.spec(), nil
}

// configUsed is the part of config.json the hooks read. Decoding the whole
// specs.Spec built encoding/json's field tables for every OCI type (the
// seccomp profile's among them) on each container start: an eighth of a
// hook process's time. The JSON is still checked whole.
type configUsed struct {
	Process *struct {
		Env     []string            `json:"env,omitempty"`
		Rlimits []specs.POSIXRlimit `json:"rlimits,omitempty"`
	} `json:"process,omitempty"`
	Root        *specs.Root       `json:"root,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Linux       *struct {
		Devices     []specs.LinuxDevice    `json:"devices,omitempty"`
		Namespaces  []specs.LinuxNamespace `json:"namespaces,omitempty"`
		UIDMappings []specs.LinuxIDMapping `json:"uidMappings,omitempty"`
		GIDMappings []specs.LinuxIDMapping `json:"gidMappings,omitempty"`
	} `json:"linux,omitempty"`
}

// spec is a specs.Spec holding what was decoded, and nothing else.
func (u configUsed) spec() *specs.Spec {
	s := &specs.Spec{Root: u.Root, Annotations: u.Annotations}
	if u.Process != nil {
		s.Process = &specs.Process{Env: u.Process.Env, Rlimits: u.Process.Rlimits}
	}
	if l := u.Linux; l != nil {
		s.Linux = &specs.Linux{Devices: l.Devices, Namespaces: l.Namespaces, UIDMappings: l.UIDMappings, GIDMappings: l.GIDMappings}
	}
	return s
}

// RootfsPath is the spec's root.path, relative paths taken from the bundle.
func RootfsPath(bundle string, spec *specs.Spec) string {
	p := spec.Root.Path
	if !filepath.IsAbs(p) {
		p = filepath.Join(bundle, p)
	}
	return filepath.Clean(p)
}
