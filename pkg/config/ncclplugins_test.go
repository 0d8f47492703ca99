package config

import (
	"strings"
	"testing"
)

func TestNCCLPluginsValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		edit func(*NCCLPlugins)
		want string
	}{
		{func(p *NCCLPlugins) { p.Dirs = []string{"opt/gib"} }, `"opt/gib": want an absolute path`},
		{func(p *NCCLPlugins) { p.Dirs = []string{"/opt/../etc"} }, `"/opt/../etc": want an absolute path`},
		{func(p *NCCLPlugins) { p.LibfabricDirs = []string{"/opt/amazon/efa/../lib"} }, `"/opt/amazon/efa/../lib": want an absolute path`},
		{func(p *NCCLPlugins) { p.ConfFile = "nccl.conf" }, `"nccl.conf": want an absolute path`},
		{func(p *NCCLPlugins) { p.CarryKeys = []string{"LD_PRELOAD"} }, `carry_keys "LD_PRELOAD": want an NCCL_* name`},
	} {
		c := Default()
		tc.edit(&c.NCCLPlugins)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}
