package runtimewrap

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		argv []string
		want Args
	}{
		// What Docker 20.10's shim passes.
		{[]string{"--root", "/r", "--log", "/b/log.json", "--log-format", "json", "create", "--bundle", "/b", "--pid-file", "/b/pid", "abc"},
			Args{Command: "create", Bundle: "/b", Log: "/b/log.json", LogFormat: "json"}},
		{[]string{"--log=/l", "--log-format=text", "create", "--bundle=/b2", "id"}, Args{Command: "create", Bundle: "/b2", Log: "/l", LogFormat: "text"}},
		{[]string{"create", "-b", "/b3", "id"}, Args{Command: "create", Bundle: "/b3"}},
		{[]string{"create", "-b=/b4", "id"}, Args{Command: "create", Bundle: "/b4"}},
		{[]string{"-log", "/l", "create", "-bundle", "/b5", "id"}, Args{Command: "create", Bundle: "/b5", Log: "/l"}},
		// Flags after the id, value flags whose value looks like a command.
		{[]string{"create", "--console-socket", "create", "--pid-file", "p", "id", "--bundle", "/b6"}, Args{Command: "create", Bundle: "/b6"}},
		{[]string{"--systemd-cgroup", "--debug", "create", "--no-pivot", "--preserve-fds", "3", "id"}, Args{Command: "create"}},
		{[]string{"run", "-d", "--bundle", "rel/dir", "id"}, Args{Command: "run", Bundle: "rel/dir"}},
		// After "--" nothing is a flag.
		{[]string{"create", "id", "--", "--bundle", "/nope"}, Args{Command: "create"}},
		{[]string{"--root", "/r", "start", "id"}, Args{Command: "start"}},
		{[]string{"delete", "--force", "--bundle", "/not-read", "id"}, Args{Command: "delete"}},
		{[]string{"--root", "/r", "--log", "/l", "state", "id"}, Args{Command: "state", Log: "/l"}},
		{[]string{"--version"}, Args{}},
		{nil, Args{}},
		{[]string{"features"}, Args{Command: "features"}},
	}
	for _, c := range cases {
		if got := Parse(c.argv); got != c.want {
			t.Errorf("Parse(%q) = %+v, want %+v", c.argv, got, c.want)
		}
	}
}

func TestBundleDir(t *testing.T) {
	if got := (Args{Command: "create"}).BundleDir("/cwd"); got != "/cwd" {
		t.Errorf("default = %s", got)
	}
	if got := (Args{Command: "create", Bundle: "b"}).BundleDir("/cwd"); got != "/cwd/b" {
		t.Errorf("relative = %s", got)
	}
	if got := (Args{Command: "create", Bundle: "/b"}).BundleDir("/cwd"); got != "/b" {
		t.Errorf("absolute = %s", got)
	}
	for cmd, want := range map[string]bool{"create": true, "run": true, "start": false, "delete": false, "exec": false, "": false} {
		if (Args{Command: cmd}).EditsBundle() != want {
			t.Errorf("%q EditsBundle != %v", cmd, want)
		}
	}
}

func TestEditConfigAtomicKeepsMode(t *testing.T) {
	b := t.TempDir()
	path := filepath.Join(b, "config.json")
	if err := os.WriteFile(path, []byte(`{"a":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(path)
	err := EditConfig(b, func(in []byte) ([]byte, bool, error) {
		if string(in) != `{"a":1}` {
			t.Errorf("edit saw %q", in)
		}
		return []byte(`{"a":2}`), true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(path)
	if data, _ := os.ReadFile(path); string(data) != `{"a":2}` {
		t.Fatalf("content = %q", data)
	}
	if after.Mode() != before.Mode() {
		t.Fatalf("mode %v, was %v", after.Mode(), before.Mode())
	}
	if os.SameFile(before, after) {
		t.Fatal("file rewritten in place, not renamed over")
	}
	entries, _ := os.ReadDir(b)
	if len(entries) != 1 {
		t.Fatalf("temp files left: %v", entries)
	}
}

func TestEditConfigUnchangedOrFailedLeavesFile(t *testing.T) {
	b := t.TempDir()
	path := filepath.Join(b, "config.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(path)
	if err := EditConfig(b, func(in []byte) ([]byte, bool, error) { return in, false, nil }); err != nil {
		t.Fatal(err)
	}
	err := EditConfig(b, func([]byte) ([]byte, bool, error) { return []byte("x"), true, errors.New("cannot parse") })
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "cannot parse") {
		t.Fatalf("error %v should name %s", err, path)
	}
	after, _ := os.Stat(path)
	data, _ := os.ReadFile(path)
	if !os.SameFile(before, after) || string(data) != "{not json" || !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("file touched")
	}
	if err := EditConfig(filepath.Join(b, "missing"), func(in []byte) ([]byte, bool, error) { return in, false, nil }); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing bundle: %v", err)
	}
	if err := EditConfig(path, func(in []byte) ([]byte, bool, error) { return in, false, nil }); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("file as bundle: %v", err)
	}
	empty := t.TempDir()
	if err := EditConfig(empty, func(in []byte) ([]byte, bool, error) { return in, false, nil }); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Fatalf("bundle without config.json: %v", err)
	}
}

func writeExe(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestFindRuntimeSkipsSelf(t *testing.T) {
	d1, d2 := t.TempDir(), t.TempDir()
	self := filepath.Join(t.TempDir(), "rdma-cdi")
	writeExe(t, self)
	// d1/runc is the wrapper itself (a symlink to it), d2/runc is the real one.
	if err := os.Symlink(self, filepath.Join(d1, "runc")); err != nil {
		t.Fatal(err)
	}
	writeExe(t, filepath.Join(d2, "runc"))
	got, err := FindRuntime("runc", self, d1+":"+d2)
	if err != nil || got != filepath.Join(d2, "runc") {
		t.Fatalf("got %s, %v", got, err)
	}
	if _, err := FindRuntime("runc", self, d1); err == nil || !strings.Contains(err.Error(), "other than this wrapper") {
		t.Fatalf("only self in PATH: %v", err)
	}
	if _, err := FindRuntime(filepath.Join(d1, "runc"), self, ""); err == nil || !strings.Contains(err.Error(), "wrapper itself") {
		t.Fatalf("absolute self: %v", err)
	}
	if got, err := FindRuntime(filepath.Join(d2, "runc"), self, ""); err != nil || got != filepath.Join(d2, "runc") {
		t.Fatalf("absolute: %s %v", got, err)
	}
	if _, err := FindRuntime("/nonexistent/runc", self, ""); err == nil {
		t.Fatal("missing absolute runtime accepted")
	}
	// Not executable: skipped.
	d3 := t.TempDir()
	if err := os.WriteFile(filepath.Join(d3, "runc"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := FindRuntime("runc", self, d3+":"+d2); err != nil || got != filepath.Join(d2, "runc") {
		t.Fatalf("non-executable not skipped: %s %v", got, err)
	}
}

func TestLogLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.json")
	if err := os.WriteFile(path, []byte(`{"level":"info","msg":"earlier","time":"x"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := LogLine(path, "json", "error", `bad "thing"`); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines = %q", lines)
	}
	var entry map[string]string
	if err := json.Unmarshal([]byte(lines[1]), &entry); err != nil {
		t.Fatal(err)
	}
	if entry["level"] != "error" || entry["msg"] != `bad "thing"` || entry["time"] == "" {
		t.Fatalf("entry = %v", entry)
	}
	text := filepath.Join(t.TempDir(), "log")
	if err := LogLine(text, "text", "error", "oops"); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(text); !strings.Contains(string(data), `level=error msg="oops"`) {
		t.Fatalf("text = %q", data)
	}
	if err := LogLine("", "json", "error", "x"); err != nil {
		t.Fatal(err)
	}
}
