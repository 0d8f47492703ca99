package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// The config file is the operator's, but a typo must give an error that
// names the place, never a panic; and a file that decodes and validates
// must mean the same thing when written back out.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		"",
		"[nccl]\nexclude_default_route_hca = false\ninclude_hcas = [\"mlx5_1\", \"mlx5_2:1\"]\n[nccl.tunables]\nNCCL_IB_TIMEOUT = \"22\"\n",
		"[cdi]\nvendor = \"rdma.example.com\"\nformat = \"json\"\nmax_version = \"0.5.0\"\n",
		"[hooks]\nmemlock = \"64G\"\n[watch]\nrescan_interval = \"30s\"\ndebounce = \"1ms\"\n",
		"[nccl]\nroce_version = 3\naddr_family = \"AF_UNIX\"\naddr_range = \"10.0.0.0/33\"\n",
		"[nccl.tunables]\n\"NCCL_X=Y\" = \"1\"\nNCCL_Y = \"a\\nNCCL_Z=1\"\n",
		"[cdi]\nunknown = 1\n",
		"[watch]\nrescan_interval = \"forever\"\n",
		"[nccl]\nroce_version = 99999999999999999999\n",
		"nccl = 1\n",
		"[[nccl]]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := Default()
		err := Decode(data, &cfg)
		if err != nil {
			if k, ok := strings.CutPrefix(err.Error(), "unknown key "); ok && (k == "" || strings.ContainsAny(k, "\n\r")) {
				t.Fatalf("unknown-key error names no key, or spans lines: %q", err)
			}
			return
		}
		if cfg.Validate() != nil {
			return
		}
		// A valid config survives a round trip through TOML.
		out, err := toml.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back := Default()
		if err := Decode(out, &back); err != nil {
			t.Fatalf("re-decode of\n%s: %v", out, err)
		}
		if !reflect.DeepEqual(normalize(back), normalize(cfg)) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v\n%s", cfg, back, out)
		}
	})
}

// normalize maps empty and nil collections to one form.
func normalize(c Config) Config {
	if len(c.NCCL.Tunables) == 0 {
		c.NCCL.Tunables = nil
	}
	if len(c.NCCL.IncludeHCAs) == 0 {
		c.NCCL.IncludeHCAs = nil
	}
	if len(c.NCCL.ExcludeHCAs) == 0 {
		c.NCCL.ExcludeHCAs = nil
	}
	if len(c.CDI.ExtraLibraries) == 0 {
		c.CDI.ExtraLibraries = nil
	}
	return c
}

// Regression (found by FuzzDecode): a table named "" gave the error
// "unknown key " with no key; keys that are not bare are now quoted.
func TestDecodeUnknownKeyIsQuoted(t *testing.T) {
	for in, want := range map[string]string{
		`[""]`:                         `unknown key ""`,
		"[cdi]\n\"a\\nb\" = 1\n":       `unknown key cdi."a\nb"`,
		"[nccl]\n\"x.y\" = 1\nz = 2\n": `unknown key nccl."x.y", nccl.z`,
	} {
		cfg := Default()
		if err := Decode([]byte(in), &cfg); err == nil || err.Error() != want {
			t.Errorf("%q: got %v, want %s", in, err, want)
		}
	}
}
