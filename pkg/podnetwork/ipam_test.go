package podnetwork

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

func TestIPAMPluginTypeNamesABinary(t *testing.T) {
	for conf, want := range map[string]string{
		`{"type":"whereabouts"}`:        "",
		`{"type":"../../usr/bin/true"}`: "want the name of a plugin binary",
		`{"type":""}`:                   "want the name of a plugin binary",
		`{"type":"."}`:                  "want the name of a plugin binary",
		`[1]`:                           "IPAM config of 10.0.61.0/24",
	} {
		_, err := IPAMPlugin{Subnet: netip.MustParsePrefix("10.0.61.0/24"), Config: json.RawMessage(conf)}.Type()
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", conf, err, want)
		}
	}
}

func TestIPAMPluginFor(t *testing.T) {
	a := IPAMPlugin{Subnet: netip.MustParsePrefix("10.0.61.0/24")}
	b := IPAMPlugin{Subnet: netip.MustParsePrefix("10.0.62.0/24")}
	plugins := []IPAMPlugin{a, b}
	if p, ok := IPAMPluginFor(plugins, []netip.Prefix{netip.MustParsePrefix("10.0.62.3/24")}); !ok || p.Subnet != b.Subnet {
		t.Errorf("10.0.62.3: %v %v", p, ok)
	}
	if _, ok := IPAMPluginFor(plugins, []netip.Prefix{netip.MustParsePrefix("10.0.63.3/24")}); ok {
		t.Error("10.0.63.3 got a plugin")
	}
}
