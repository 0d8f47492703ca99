package cniipam

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// hostLocal is a Plugin of the CNI project's host-local IPAM (the real
// binary) for subnet, handing out first..last, its store in a temporary
// directory (returned).
func hostLocal(t *testing.T, subnet, first, last string) (podnetwork.IPAMPlugin, string) {
	t.Helper()
	store := t.TempDir()
	conf, err := json.Marshal(map[string]any{
		"type": "host-local", "dataDir": store,
		"ranges": [][]map[string]string{{{"subnet": subnet, "rangeStart": first, "rangeEnd": last}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return podnetwork.IPAMPlugin{Subnet: netip.MustParsePrefix(subnet), Config: conf}, store
}

func request(pod string) Request {
	return Request{ContainerID: "claim-" + pod, IfName: "mlx5-1", PodNamespace: "ns", PodName: pod, UID: "uid-" + pod}
}

// TestAddAndDelWithHostLocal: the plugin's own store keeps each address to
// one request; a DEL frees it for the next, and repeats harmlessly. The
// plugin hands out a part of the subnet (a /25 of the /24): the address
// has the subnet's prefix length.
func TestAddAndDelWithHostLocal(t *testing.T) {
	p, _ := hostLocal(t, "10.0.61.0/25", "10.0.61.100", "10.0.61.101")
	p.Subnet = netip.MustParsePrefix("10.0.61.0/24")
	d := Delegate{BinDirs: []string{fixture.CNIPluginDir(t)}, Plugins: []podnetwork.IPAMPlugin{p}}
	ctx := context.Background()
	add := func(pod string) (netip.Prefix, error) { return d.Add(ctx, p, request(pod)) }

	a, err := add("a")
	if err != nil || a != netip.MustParsePrefix("10.0.61.100/24") {
		t.Fatalf("first ADD: %v, %v; want 10.0.61.100/24", a, err)
	}
	b, err := add("b")
	if err != nil || b != netip.MustParsePrefix("10.0.61.101/24") {
		t.Fatalf("second ADD: %v, %v; want 10.0.61.101/24", b, err)
	}
	if c, err := add("c"); err == nil || !strings.Contains(err.Error(), "host-local") {
		t.Fatalf("third ADD of a two-address range: %v, %v; want the plugin's refusal, naming it", c, err)
	}
	if err := d.Del(ctx, p, request("a")); err != nil {
		t.Fatal(err)
	}
	if err := d.Del(ctx, p, request("a")); err != nil {
		t.Fatalf("a second DEL: %v", err)
	}
	if c, err := add("c"); err != nil || c != a {
		t.Fatalf("ADD after a's DEL: %v, %v; want a's %v", c, err, a)
	}
}

// TestAddRefusesAnAddressOutsideTheSubnet: an answer outside the
// configured subnet (a plugin config for another network) is freed again.
func TestAddRefusesAnAddressOutsideTheSubnet(t *testing.T) {
	p, store := hostLocal(t, "10.0.62.0/24", "10.0.62.10", "10.0.62.10")
	p.Subnet = netip.MustParsePrefix("10.0.61.0/24")
	d := Delegate{BinDirs: []string{fixture.CNIPluginDir(t)}, Plugins: []podnetwork.IPAMPlugin{p}}
	_, err := d.Add(context.Background(), p, request("a"))
	if err == nil || !strings.Contains(err.Error(), "none in 10.0.61.0/24") {
		t.Fatalf("ADD: %v; want a refusal naming the subnet", err)
	}
	if _, err := os.Stat(filepath.Join(store, "rdma-cdi", "10.0.62.10")); !os.IsNotExist(err) {
		t.Errorf("the plugin still holds 10.0.62.10 (stat: %v)", err)
	}
}

func TestAddNamesAMissingBinary(t *testing.T) {
	d := Delegate{BinDirs: []string{t.TempDir()}}
	p := podnetwork.IPAMPlugin{Subnet: netip.MustParsePrefix("10.0.61.0/24"), Config: json.RawMessage(`{"type":"whereabouts"}`)}
	if _, err := d.Add(context.Background(), p, request("a")); err == nil || !strings.Contains(err.Error(), "IPAM plugin whereabouts of 10.0.61.0/24") {
		t.Errorf("ADD without the binary: %v", err)
	}
}

// TestAPluginsLongFailureKeepsItsEnd: a plugin that fails with kilobytes
// on stderr and no JSON answer gives an error of bounded size that keeps
// the call and the end of what the plugin wrote, where its reason is.
func TestAPluginsLongFailureKeepsItsEnd(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\ni=0\nwhile [ $i -lt 200 ]; do echo \"debug line $i of a chatty plugin\" >&2; i=$((i+1)); done\necho 'connection refused' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "chatty"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d := Delegate{BinDirs: []string{dir}}
	p := podnetwork.IPAMPlugin{Subnet: netip.MustParsePrefix("10.0.61.0/24"), Config: json.RawMessage(`{"type":"chatty"}`)}
	_, err := d.Add(context.Background(), p, request("a"))
	if err == nil {
		t.Fatal("a failing plugin's ADD succeeded")
	}
	msg := err.Error()
	if len(msg) > 700 || !strings.Contains(msg, "(ADD claim-a/mlx5-1)") || !strings.Contains(msg, "connection refused") || strings.Contains(msg, "debug line 0 ") {
		t.Errorf("error of %d bytes: %s", len(msg), msg)
	}
	if err := d.Del(context.Background(), p, request("a")); err == nil || len(err.Error()) > 700 || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("DEL: %v", err)
	}
}
