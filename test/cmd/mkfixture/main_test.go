package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMain lets the test binary stand in for mkfixture in a child process
// (the net command must run inside a fresh user+network namespace).
func TestMain(m *testing.M) {
	if os.Getenv("MKFIXTURE_AS_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestList(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"list"}, &out); err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(out.String())
	for _, want := range []string{"seed002", "seed004", "ib-ipoib", "mixed-state", "bond", "sriov", "gid-not-3", "no-rdma"} {
		if !slices.Contains(names, want) {
			t.Errorf("list lacks %s: %v", want, names)
		}
	}
}

func TestBuild(t *testing.T) {
	for _, topology := range []string{"../../fixtures/seed002.toml", "seed002"} {
		out := t.TempDir()
		if err := run([]string{"build", "-topology", topology, "-out", out}, nil); err != nil {
			t.Fatalf("%s: %v", topology, err)
		}
		guid, err := os.ReadFile(filepath.Join(out, "sys/class/infiniband/mlx5_8/node_guid"))
		if err != nil || string(guid) != "e8eb:d303:006c:68af\n" {
			t.Errorf("%s: mlx5_8 node_guid %q (%v)", topology, guid, err)
		}
		if fi, err := os.Stat(filepath.Join(out, "dev/infiniband/uverbs8")); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: dev/infiniband/uverbs8 placeholder: %v", topology, err)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"frobnicate"},
		{"build", "-topology", "seed002"},
		{"build", "-topology", "no-such-topology", "-out", t.TempDir()},
		{"net"},
	} {
		if err := run(args, nil); err == nil {
			t.Errorf("mkfixture %v: no error", args)
		}
	}
}

// ipAddr is the part of `ip -j addr` output the test reads.
type ipAddr struct {
	IfName   string   `json:"ifname"`
	Flags    []string `json:"flags"`
	AddrInfo []struct {
		Local     string `json:"local"`
		PrefixLen int    `json:"prefixlen"`
		Scope     string `json:"scope"`
	} `json:"addr_info"`
}

// TestNetInUserNamespace runs `mkfixture net` as an unprivileged-style
// user+network namespace would (root mapped, nothing else), then lists the
// result with ip(8) in that namespace.
func TestNetInUserNamespace(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare not installed")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip (iproute2) not installed")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := `"$SELF" net -topology seed002 && ip -j addr show && echo '---' && ip route show default`
	cmd := exec.Command(unshare, "--user", "--map-root-user", "--net", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "MKFIXTURE_AS_MAIN=1", "SELF="+self)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "Operation not permitted") {
			t.Skipf("user namespaces are not available here: %s", out)
		}
		t.Fatalf("%v\n%s", err, out)
	}
	addrJSON, route, _ := strings.Cut(string(out), "---")
	var links []ipAddr
	if err := json.Unmarshal([]byte(addrJSON), &links); err != nil {
		t.Fatalf("ip -j addr: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, l := range links {
		for _, a := range l.AddrInfo {
			if a.Scope == "global" {
				got[l.IfName] = a.Local
			}
		}
	}
	want := map[string]string{
		"eth0": "10.0.60.3", "eth1": "25.11.128.2", "eth2": "25.11.128.34", "eth3": "25.11.128.66",
		"eth4": "25.11.128.98", "eth5": "25.11.128.130", "eth6": "25.11.128.162",
		"eth7": "25.11.128.194", "eth8": "25.11.128.226",
	}
	for name, addr := range want {
		if got[name] != addr {
			t.Errorf("%s: address %q, want %s", name, got[name], addr)
		}
	}
	if !strings.Contains(route, "default via 10.0.60.1 dev eth0") || !strings.Contains(route, "onlink") {
		t.Errorf("default route %q, want via 10.0.60.1 dev eth0 onlink", strings.TrimSpace(route))
	}
}
